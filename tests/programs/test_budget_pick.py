"""The default run's tree budget follows this machine's pass costs: where a tree's rows are dear (a CPU with
narrow vectors, or one core) it picks a smaller tree than where they are nearly free, says which in one line
with the costs it used, and leaves a run without a speculative decoder alone. The verdict names what a plain
pass and the tree pass it used cost here, beside the CPU's vector width."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evaluation.machine import device_words
from evaluation.verdict import Verdict, verdict_lines
from launch.pair import plan
from pipeline.budget import MeasuredPasses, SessionBudgets, candidate_sizes, cautious, costs_for, steady_rates
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig
from programs.budget_pick import pick_budget
from programs.options import RunOptions

CAP = 16


def passes(plain_ms: float, tree_ms: dict[int, float]) -> MeasuredPasses:
    """Made-up timings: tree passes by size (the root's row included or not, alike), a pool of 5 ms."""
    tree = {b: ms / 1000 for b, ms in tree_ms.items()}
    return MeasuredPasses(plain=plain_ms / 1000, overlapped=plain_ms / 1000, tree=tree, tree_with_root=dict(tree),
                          prefill=0.001, prefill_shared=0.001, pool=0.005)


# A plain pass of 57 ms beside tree passes hardly dearer (wide vectors: a 9-row pass is bound by reading the
# weights), and a plain pass of 44 ms beside tree passes that grow with their rows (narrow vectors: bound by
# arithmetic), as the two machines' records showed them.
WIDE = passes(57, {1: 50, 2: 50, 4: 51, 8: 52, 16: 70})
NARROW = passes(44, {1: 46, 2: 48, 4: 52, 8: 67, 16: 84})


class Session:
    """What pick_budget reads of a target session: its drafter and budget auto's (here made-up) pass timings."""

    def __init__(self, measured: MeasuredPasses, drafter: object | None = object()) -> None:
        self.drafter, self.asked = drafter, []
        self.budgets = SessionBudgets(lambda cap: self.asked.append(cap) or measured)


def run(decoders: str = "ar,draft,pearl,root-draw,root") -> RunOptions:
    return RunOptions(decode=DecodeConfig(budget_max=CAP), decoders=decoders)


def chosen(measured: MeasuredPasses) -> int:
    sizes = tuple(b for b in candidate_sizes(CAP) if b)
    return sizes[int(np.argmax(steady_rates([costs_for(RULES["draft"].root_pass, measured)], cautious(CAP), sizes)))]


def test_a_machine_where_tree_rows_are_dear_gets_smaller_trees():
    assert (chosen(WIDE), chosen(NARROW)) == (8, 4)


def test_a_large_tree_timed_cheaper_than_a_smaller_one_does_not_win_on_that_noise():
    noisy = passes(44, {1: 46, 2: 48, 4: 52, 8: 67, 16: 40})  # 16 rows in less time than 8: a moment of load
    assert chosen(noisy) == 4


@pytest.mark.parametrize("measured, budget", [(WIDE, 8), (NARROW, 4)])
def test_the_run_takes_the_budget_that_pays_and_says_which_with_its_costs(measured, budget):
    session = Session(measured)
    picked, line = pick_budget(session, run())
    assert picked.decode.budget == budget and session.asked == [CAP]  # budget auto's cap: its kept timings
    assert picked.configs()[1].budget == budget and picked.decoders == run().decoders
    assert line.startswith(f"budget {budget}, the most tokens a second on this machine: a plain pass "
                           f"{1000 * measured.plain:.1f} ms ({1 / measured.plain:.1f} tokens a second); tree passes of "
                           f"1, 2, 4, 8, 16 tokens ")
    assert f"{1000 * measured.tree_with_root[8]:.1f}" in line and "at a cautious τ of 1.40, 1.64, 1.87, 1.98" in line
    promised = [float(x) for x in line.split("promise ")[1].split(" tokens")[0].split(", ")]
    assert len(promised) == 5 and max(promised) == promised[[1, 2, 4, 8, 16].index(budget)]
    assert ("no size promises" in line) == (measured is NARROW)  # 22.8 tokens a second against a plain 22.7


def test_where_no_tree_promises_more_than_plain_decoding_the_line_says_so_and_names_budget_auto():
    dear = passes(44, {1: 90, 2: 95, 4: 100, 8: 120, 16: 160})
    picked, line = pick_budget(Session(dear), run())
    assert picked.decode.budget == 4
    assert line.endswith("at this cautious τ no size promises more than plain rounds here by 10%: the τ the rounds "
                         "reach decides (context lookup's copies are not in it; --budget auto learns it as it "
                         "decodes); --budget N or auto sets it yourself")


def test_a_run_without_speculation_times_nothing_and_keeps_its_budget():
    for session, decoders in ((Session(NARROW), "ar"), (Session(NARROW, drafter=None), "ar,draft")):
        assert pick_budget(session, run(decoders)) == (run(decoders), "") and session.asked == []


def test_only_the_embedded_default_run_without_a_budget_picks_one(tmp_path):
    assert "--pick-budget" in plan([]).target
    for argv in (["--budget", "8"], ["--budget", "auto"], ["--target", "mock"], ["sweep", "--out", str(tmp_path)]):
        assert "--pick-budget" not in (target := plan(argv).target), argv
    assert plan(["--target", "mock"]).target[plan(["--target", "mock"]).target.index("--budget") + 1] == "8"


def test_a_picked_budget_and_a_named_one_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        plan(["--pick-budget", "--budget", "auto"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "--pick-budget chooses the run's budget on this machine: it goes without --budget auto")


def test_the_verdict_names_the_vector_width_and_what_the_passes_it_used_cost_here():
    machine = device_words({"cpu": "AMD EPYC 7B13", "cpu_vectors": "AVX2", "cpu_count": 2}, "cpu")
    v = Verdict("draft", 0.05, (-0.1, 0.2), 1.7, 2.0, 5, tree=4.0, tokens_per_pass=2.0)
    on = next(line for line in verdict_lines(v, budget=4, machine=machine, drafter="d", loaded=False,
                                             measured=NARROW) if line.startswith("  on:"))
    assert on == ("  on: AMD EPYC 7B13 (AVX2), 2 CPUs, drafter d, 5 prompts; here a plain pass takes 44.0 ms, "
                  "draft's tree pass of 4 tokens 52.0 ms (1.18 plain passes)")
    root = dataclasses.replace(v, decoder="root", tree=7.0)  # budget auto: the timed size nearest its mean tree
    on = verdict_lines(root, budget="auto", machine=machine, drafter="d", loaded=False, measured=WIDE)[2]
    assert on.endswith("here a plain pass takes 57.0 ms, root's tree pass of 8 tokens 52.0 ms (0.91 plain passes)")
    assert not verdict_lines(v, budget=4, machine=machine, drafter="d", loaded=False)[2].count("plain pass")
