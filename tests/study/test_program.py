"""Rules compared at shared contexts, end to end on a mock pair: a sweep with --record-rounds, its rounds
file, and `values` over it (JSON lines, the report, agreement with the online decoder, shards)."""

from __future__ import annotations

import json
import lzma
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from evaluation.rounds import RecordedRound
from evaluation.rounds_file import load_rounds, round_files, rounds_path
from pipeline.pool import Pool
from programs.cli import build
from study.options import ValuesOptions
from study.program import load
from study.values import VALUED, Averages, evaluate
from timing.record_store import load_records
from tests.study.conftest import GRID, json_lines
from timing.values import main, run_records
from tests.timing.killed import DiesAfter, Killed

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "results" / "cpu-smollm2-values"  # the smallest committed recording with a rounds file


def test_sweep_records_every_timed_round_beside_its_records(recorded):
    records = [r for r in load_records([recorded]) if not r.warmup]
    (found,) = load_rounds([recorded])
    provenance, decodes = found.provenance, found.decodes
    assert provenance["sweep"]["record_rounds"] is True and not found.damage
    assert found.run.pool == (4, 3, 2) and found.run.temperatures == (0.0, 1.0) and found.run.vocab > 0
    by_key = {(d.key["prompt_id"], d.key["decoder"], d.key["temperature"]): d for d in decodes}
    assert len(by_key) == len(records) == len(decodes)  # warm-ups are not recorded
    for r in records:
        d = by_key[r.prompt_id, r.decoder, r.temperature]
        assert [x.accepted for x in d.rounds] == [a for a, b in zip(r.accepted, r.budgets) if b > 0]
        emitted = np.concatenate([x.emitted for x in d.rounds]).tolist()
        assert emitted[: r.new_tokens] == r.token_ids


def test_values_json_has_every_rule_budget_and_setting(recorded, capsys):
    lines = json_lines(capsys, str(recorded), "--budgets", "1,2,4,1000")
    values = [line for line in lines if line["kind"] == "value"]
    pool = 4 + 4 * 2 * 2  # topk 4, depth 3, expand 2: 4 + 8 + 8 candidates
    assert {(v["temperature"], v["rule"], v["budget"]) for v in values} == \
           {(t, rule, b) for t in (0.0, 1.0) for rule in VALUED for b in (1, 2, 4, pool)}
    for v in values:
        assert {"rounds", "value_per_round", "value_per_prompt"} <= set(v)
        assert 0.0 <= v["value_per_round"] <= v["budget"] + 1
    agreements = [line for line in lines if line["kind"] == "agreement"]
    assert {(a["temperature"], a["decoder"], a["budget"]) for a in agreements} == \
           {(t, d, "4") for t in (0.0, 1.0) for d in ("draft", "root-draw")}
    for a in agreements:
        assert not a["disagrees"]
        if a["temperature"] == 0.0:  # greedy verification is deterministic: exactly its value
            assert a["realized_per_round"] == pytest.approx(a["value_per_round"], abs=1e-9)
    assert not [line for line in lines if line["kind"] == "held-row"]  # no covering decoder: no Table 27


def figures(lines: list[dict]) -> list[str]:
    """The JSON lines as comparable text, without the measurement passes' seconds (the machine's, not the run's)."""
    return [json.dumps(line, sort_keys=True) for line in lines if line["kind"] != "recording"]


def test_values_of_two_shards_equal_the_whole_sweep(tmp_path, recorded, mock_session, make_options, sweep, capsys):
    for shard in ("1/2", "2/2"):
        sweep(mock_session(), make_options(tmp_path, shard=shard, **GRID))
    assert [p.name for p in round_files(tmp_path)] == ["rounds.shard-1-of-2.bin", "rounds.shard-2-of-2.bin"]
    whole = json_lines(capsys, str(recorded))
    split = json_lines(capsys, str(tmp_path))
    assert sorted(figures(whole)) == sorted(figures(split))


def test_report_and_figure(recorded, tmp_path, capsys):
    assert main([str(recorded), "--out", str(tmp_path), "--resamples", "200", "--by-category"]) == 0
    said = capsys.readouterr()
    assert not said.out  # stdout is for --json alone
    assert "computing the rules' values (1/3)" in said.err and "computing the retained rows (3/3)" in said.err
    assert f"wrote {tmp_path / 'values.md'}, {tmp_path / 'values.png'}" in said.err
    text = (tmp_path / "values.md").read_text()
    opening = text.split("## Selection rules at shared contexts")[0]  # the headline figures come first
    assert "## The headline figures beside the paper's" in opening
    assert ("| figure | the paper, pools of 710 | this run, T = 0, pools up to 20 | this run, T = 1, pools up to 20 |"
            in opening)  # B = 59 of a pool of 20 is no B = 59 of the paper's 710: each says its pool
    assert "Not like with like: this run's pools hold up to 20 candidates, the paper's 710" in opening
    assert re.search(r"^\| root over draft, B = 8 \| larger than at B = 59 \| [+-]\d+\.\d% \[", opening, re.M)
    assert re.search(r"^\| root-draw over PEARL, B = 59 \| up to \+7\.0% \| — \| — \|$", opening, re.M)  # B <= 20
    assert "## T = 0:" in text and "## T = 1:" in text
    assert "Share of the oracle's advantage over draft that root recovers" in text
    assert "draft reaches root's value at B = 8" in text and "by category" in text
    assert text.count("#### Table 27: not given (no round held a covered row") == 2  # draft and root-draw's rounds
    assert (tmp_path / "values.png").stat().st_size > 10_000


def docs_values_command() -> list[str]:
    """The values command docs/values.md gives for a report, its words after `values` (the run's folder first)."""
    lines = (ROOT / "docs" / "values.md").read_text(encoding="utf-8").splitlines()
    line = next(line for line in lines if line.startswith("launch/pair.sh values ") and "--json >" not in line)
    return line.split("#")[0].split()[2:]


def test_the_documented_command_leaves_a_committed_study_as_it_is(tmp_path, capsys):
    run = shutil.copytree(COMMITTED, tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main([str(run), *docs_values_command()[1:]]) == 2
    said = capsys.readouterr()
    assert not said.out
    refusal = said.err.strip().splitlines()
    assert len(refusal) == 1 and f"{run} holds values.md, values.png already" in refusal[0]
    assert "--out NEW_DIR" in refusal[0] and "--overwrite" in refusal[0]
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # byte for byte, nothing added


def test_a_recording_whose_records_predate_held_rows_reads_without_them():
    data = load([str(COMMITTED)], build(ValuesOptions), run_records([str(COMMITTED)]))
    assert data.decodes and all(d.held is None for d in data.decodes)


def test_a_packed_committed_rounds_file_reads_as_the_unpacked_one(tmp_path):
    packed = tmp_path / "packed"
    packed.mkdir()
    for p in COMMITTED.glob("records.*"):
        shutil.copy(p, packed / p.name)
    (bin_file,) = round_files(COMMITTED)
    (packed / f"{bin_file.name}.xz").write_bytes(lzma.compress(bin_file.read_bytes(), preset=0))
    prints = lambda run: [(d.key, [r.accepted for r in d.rounds]) for f in load_rounds([run]) for d in f.decodes]
    assert round_files(packed) == [packed / f"{bin_file.name}.xz"]
    assert prints(packed) == prints(COMMITTED) and prints(COMMITTED)


def test_values_writes_over_a_report_only_when_told_to(recorded, tmp_path, capsys):
    (tmp_path / "values_draw.png").write_bytes(b"kept")
    args = [str(recorded), "--out", str(tmp_path), "--resamples", "50", "--budgets", "4"]
    assert main(args) == 2
    assert f"{tmp_path} holds values_draw.png already" in capsys.readouterr().err
    assert (tmp_path / "values_draw.png").read_bytes() == b"kept" and not (tmp_path / "values.md").exists()
    assert main([*args, "--overwrite"]) == 0
    assert (tmp_path / "values_draw.png").read_bytes() != b"kept" and (tmp_path / "values.md").exists()


def test_values_refuses_a_run_without_rounds(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "--record-rounds" in capsys.readouterr().err


@pytest.mark.parametrize("budgets", ["0,2", "two", ""])
def test_values_refuses_bad_budgets(recorded, budgets, capsys):
    with pytest.raises(SystemExit) as stop:
        main([str(recorded), "--budgets", budgets])
    assert stop.value.code == 2
    assert "--budgets" in capsys.readouterr().err


def test_per_prompt_averages_weigh_every_prompt_the_same():
    """Two prompts, one with three rounds of value 1 and one with one round of value 0 under `draft`: per
    round 3/4, per prompt 1/2."""
    from evaluation.rounds import RecordedDecode

    def rnd(edge: float) -> RecordedRound:
        pool = Pool.from_edges(np.array([1]), np.array([-1]), np.array([-0.1]), np.zeros(1, bool))
        return RecordedRound(budget=1, accepted=0, emitted=np.array([1]), pool=pool, edge=np.array([edge]))

    KEY = dict(prompt_id="p", category="qa", turn=0, decoder="draft", temperature=1.0, budget=2, seed=0)
    decodes = [RecordedDecode({**KEY, "prompt_id": "a"}, [rnd(1.0)] * 3), RecordedDecode({**KEY, "prompt_id": "b"},
                                                                                       [rnd(0.0)])]
    (rv,) = evaluate(decodes, budgets=(1,))
    avg = Averages(rv, n_resamples=50)
    assert avg.per_round("draft")[0] == pytest.approx(0.75)
    assert avg.per_prompt("draft")[0] == pytest.approx(0.5)


def test_agreement_flags_a_biased_decoder_and_passes_an_exact_one():
    """Realized acceptance drawn with the expected probability agrees; one accepted node too many a round
    (a verifier that counts one node too many) is flagged."""
    from study.values import RoundValues, agreement

    rng = np.random.default_rng(0)
    expected = rng.uniform(0.2, 0.9, 2000)
    exact = (rng.random(2000) < expected).astype(float)
    settings = {("draft", "8"): {"realized": exact, "expected": expected, "prompt": np.zeros(2000, int)},
                ("root", "8"): {"realized": exact + 1, "expected": expected, "prompt": np.zeros(2000, int)}}
    rv = RoundValues(temperature=1.0, budgets=np.array([8]), prompt=np.zeros(1, int), prompts=["p"], categories=["qa"],
                     values={}, mean_curves={}, off_pool=np.zeros(1), settings=settings)
    verdict = {a.decoder: a.disagrees for a in agreement(rv)}
    assert verdict == {"draft": False, "root": True}


def test_values_of_a_killed_and_resumed_sweep_equal_the_whole_sweep(tmp_path, recorded, mock_session, make_options,
                                                                   sweep, capsys):
    options = make_options(tmp_path, **GRID)
    for kill_after in (3, 9):  # during warm-ups, then during timed decodes
        with pytest.raises(Killed):
            sweep(DiesAfter(mock_session(), kill_after), options)
        with open(rounds_path(tmp_path, 1, 1), "ab") as f:
            f.write(b"SPR1\x10")  # the kill tore the chunk being written
    sweep(mock_session(), options)
    assert sorted(figures(json_lines(capsys, str(tmp_path)))) == sorted(figures(json_lines(capsys, str(recorded))))


def test_a_cut_pool_is_valued_as_its_first_levels():
    import torch

    from study.values import CUT_RULES, cut_values
    from pipeline.config import PoolConfig
    from pipeline.pool import grow_pool
    from pipeline.value import Scored

    gen = torch.Generator().manual_seed(1)
    rows = lambda n: torch.log_softmax(torch.randn(n, 30, generator=gen), -1)  # noqa: E731
    pool = grow_pool(rows(1)[0], lambda nodes, tokens, parents, depth: rows(len(nodes)), PoolConfig(4, 3, 2))
    edge = np.random.default_rng(2).uniform(0, 0.25, len(pool))
    scored = Scored(pool, edge)
    budgets = np.array([1, 2, 4, 100])
    whole = {name: VALUED[name](scored) for name in CUT_RULES}
    got = cut_values(scored, budgets, whole)
    first = np.flatnonzero(pool.depth == 1)
    by_draft = first[np.argsort(-pool.logp[first], kind="stable")]
    for name in CUT_RULES:
        assert got[name].shape == (3, 4)
        np.testing.assert_array_equal(got[name][-1], whole[name].at(budgets))  # three levels: the whole pool
        second = Scored(pool.first_levels(2), edge[pool.depth <= 2])
        np.testing.assert_allclose(got[name][1], VALUED[name](second).at(budgets))
    # One level: draft keeps its B most draft-probable first tokens; a draw rule keeps X1 alone
    np.testing.assert_allclose(got["draft"][0], [edge[by_draft[:b]].sum() for b in budgets])
    np.testing.assert_allclose(got["root-draw"][0], 1.0)
    assert got["root-draw"][1][0] == 1.0 and np.all(got["root-draw"][1][1:] > 1.0)  # B = 1 is X1 alone


def test_values_json_has_each_rules_value_by_levels(recorded, capsys):
    from study.values import CUT_RULES

    assert not [c for c in json_lines(capsys, str(recorded), "--budgets", "2,4") if c["kind"] == "cut"]  # not asked
    lines = json_lines(capsys, str(recorded), "--budgets", "2,4", "--cut-levels")
    cut = {(c["temperature"], c["rule"], c["budget"], c["levels"]): c["value_per_round"]
           for c in lines if c["kind"] == "cut"}
    assert set(cut) == {(t, rule, b, d) for t in (0.0, 1.0) for rule in CUT_RULES for b in (2, 4) for d in (1, 2, 3)}
    whole = {(v["temperature"], v["rule"], v["budget"]): v["value_per_round"] for v in lines if v["kind"] == "value"}
    for (t, rule, b, d), value in cut.items():
        if d == 3:
            assert value == pytest.approx(whole[t, rule, b], rel=1e-12)


def test_damage_in_the_middle_is_named_by_values_and_listed_by_check(tmp_path, recorded, capsys):
    import shutil

    from evaluation.rounds_file import read_rounds, scan

    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    path = rounds_path(run, 1, 1)
    data = bytearray(path.read_bytes())
    offsets = [at for at, _ in scan(path, bytes(data)).chunks]
    struct_at = offsets[2] + 4  # the second decode's length field: the audit's case, recovered by its checksum
    data[struct_at: struct_at + 8] = (2 ** 33).to_bytes(8, "little")
    data[offsets[3] + 30] ^= 0xFF  # the third decode's payload: lost, and named
    path.write_bytes(bytes(data))
    lost = read_rounds(path)
    assert len(lost.decodes) == len(offsets) - 2
    assert main([str(run), "--check"]) == 1
    out = capsys.readouterr().out
    assert "no readable rounds for the recorded decode" in out and f"bytes {offsets[3]}-" in out
    assert main([str(run), "--json", "--resamples", "50"]) == 0
    assert "skipped, the chunks after it are read" in capsys.readouterr().err
    assert main([str(run), "--out", str(tmp_path / "report"), "--resamples", "50", "--no-plots"]) == 0
    assert "damaged stretch" in (tmp_path / "report" / "values.md").read_text()
    assert main([str(recorded), "--check"]) == 0
    assert "nothing damaged or missing" in capsys.readouterr().out


def test_values_out_naming_a_file_is_refused_in_one_line(tmp_path, recorded, capsys):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(SystemExit) as stop:
        main([str(recorded), "--out", str(tmp_path / "taken")])
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--out" in last and "is not a directory" in last


def test_values_json_has_the_paper_tables_kinds(recorded, capsys):
    from pipeline.value import SIZES

    lines = json_lines(capsys, str(recorded), "--budgets", "2,4,8,59")
    by = lambda kind: [line for line in lines if line["kind"] == kind]  # noqa: E731
    value = {(v["temperature"], v["rule"], v["budget"]): v["value_per_round"] for v in by("value")}
    depth = {(d["temperature"], d["depth"], d["budget"]): d["value_per_round"] for d in by("depth")}
    deepest = max(d for _, d, _ in depth)
    for (t, d, b), v in depth.items():
        if d == 1:
            assert v == value[t, "root", b]
        if d == deepest:
            assert v == value[t, "oracle", b]
    assert {s["rule"] for s in by("size")} == set(SIZES)
    keys = [(r["temperature"], r["candidates"], r["budget"]) for r in by("restricted")]
    assert len(keys) == len(set(keys))  # the whole pool once, however many candidates it holds
    for r in by("restricted"):
        if r["candidates"] >= 20:  # the mock pool holds 20 candidates: restricted to it, nothing changes
            assert r["oracle_advantage"] == pytest.approx(value[r["temperature"], "oracle", r["budget"]]
                                                          - value[r["temperature"], "draft", r["budget"]])
    # every per-round mean beside its interval: the oracle's advantage, emitted tokens, tree sizes
    for kind, name in (("restricted", "oracle_advantage"), ("emitted", "emitted_per_round"),
                       ("emitted", "baseline_emitted_per_round"), ("size", "expected_nodes"),
                       ("stronger", "root_draw_nodes"), ("stronger", "pearl_nodes")):
        for r in by(kind):
            assert r[f"{name}_low"] - 1e-12 <= r[name] <= r[f"{name}_high"] + 1e-12, (kind, name, r)
    matched = by("matched")
    assert {m["budget"] for m in matched} == {8}  # 59 is beyond the pool here: capped to 20, not reported
    for m in matched:
        assert m["pearl_size"] == pytest.approx(m["root_draw_size"], abs=0.01)
        assert m["gain_low"] <= m["gain"] <= m["gain_high"] and m["rounds"] > 0


def test_the_report_is_organised_by_the_papers_tables(recorded, tmp_path):
    assert main([str(recorded), "--out", str(tmp_path), "--resamples", "200", "--no-plots"]) == 0
    text = (tmp_path / "values.md").read_text()
    for title in ("Tables 2 and 9", "Figures 2 and 5", "Table 8", "Table 11", "Table 12", "Table 13",
                  "Table 15", "Table 20", "The paper:"):
        assert title in text, title


def test_a_category_of_enough_prompts_gets_its_intervals(recorded):
    """The by-category table gives an interval from MIN_INTERVAL_PROMPTS prompts on, a bare estimate below."""
    from dataclasses import replace

    from evaluation.stats import MIN_INTERVAL_PROMPTS
    from study.options import ValuesOptions
    from study.selection_section import _by_category

    rv = next(iter(evaluate(next(iter(load_rounds([recorded]))).decodes)))
    n = MIN_INTERVAL_PROMPTS
    many = replace(rv, prompt=np.arange(rv.rounds) % n, prompts=[f"p{i}" for i in range(n)],
                   categories=["qa"] * n)
    row = next(line for line in _by_category(many, ValuesOptions(resamples=200), "prompt") if line.startswith("| qa |"))
    assert "no interval" not in row and row.count("[") == 2 * len(many.budgets[:1])
    few = replace(rv, prompt=np.zeros(rv.rounds, np.int64), prompts=["p0"], categories=["qa"])
    row = next(line for line in _by_category(few, ValuesOptions(resamples=200), "prompt") if line.startswith("| qa |"))
    assert "no interval" in row


@pytest.mark.parametrize("where, said", [("taken/x", "cannot be made: a directory on its way is a file"),
                                         ("x" * 300, "a name in it is 300 bytes long")])
def test_values_out_that_cannot_be_made_is_one_line_with_status_2(tmp_path, recorded, capsys, where, said):
    (tmp_path / "taken").write_text("x")
    assert main([str(recorded), "--out", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--out" in err[-1] and said in err[-1] and "Traceback" not in "\n".join(err)
