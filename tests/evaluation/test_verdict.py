import dataclasses

import numpy as np
import pytest

from evaluation.stats import GainResult
from evaluation.summary import DecoderStats, Setting
from evaluation.verdict import PAID, Verdict, mean_round_seconds, verdict_lines, verdict_of
from pipeline.metrics import RoundStats


def stats(name, seconds, prefill, rounds, tau):
    n = len(seconds)
    return DecoderStats(name, [8], n, np.full(n, 10.0), np.array(seconds, float), rounds, RoundStats(rounds, tau, 0, ()),
                        {}, None, prefill=np.array(prefill, float))


def gain(g, n, low=None, high=None):
    return GainResult(g, g - 0.1 if low is None else low, g + 0.1 if high is None else high, 0.05, 1, 1, n)


def setting(decoders, gains, n=2, budget=8):
    return Setting(0.0, budget, None, [f"p{i}" for i in range(n)], n, [0], decoders, gains)


def test_round_cost_is_seconds_less_prefill_over_rounds():
    assert mean_round_seconds(stats("ar", [3.0, 3.0], [0.5, 0.5], 50, 1.0)) == pytest.approx(0.1)
    assert mean_round_seconds(stats("ar", [1.0], [0.1], 0, 0.0)) is None


def test_verdict_picks_the_best_speculative_decoder_and_its_round_cost():
    s = setting({"ar": stats("ar", [2.0, 2.0], [0.0, 0.0], 40, 1.0),  # 0.1 s a round
                 "root-draw": stats("root-draw", [3.0, 3.0], [0.0, 0.0], 20, 4.03),  # 0.3 s a round
                 "draw": stats("draw", [2.0, 2.0], [0.0, 0.0], 10, 2.0)},
                {("root-draw", "ar"): gain(-0.219, 2), ("draw", "ar"): gain(-0.3, 2)})
    v = verdict_of(s)
    assert v.decoder == "root-draw" and v.round_cost == pytest.approx(3.0) and v.tau_needed == pytest.approx(3.0)
    assert v.interval is None and v.outcome != PAID and not v.settled


def test_no_verdict_without_ar_or_gains():
    assert verdict_of(setting({"draw": stats("draw", [1.0], [0.0], 5, 2.0)}, {})) is None
    assert verdict_of(setting({"ar": stats("ar", [1.0], [0.0], 5, 1.0)}, {})) is None


def test_lines_say_why_and_what_next():
    v = Verdict("root-draw", -0.219, None, 5.2, 4.03, 4)
    text = "\n".join(verdict_lines(v, budget=8, machine="Intel Xeon, 2 CPUs", drafter="tiny-drafter", loaded=False))
    assert "did not pay against ar: -21.9% (no interval: fewer than 5 prompts)" in text
    assert "cost 5.20 plain rounds, so it pays from τ 5.20; it reached τ 4.03 (below what pays)" in text
    assert "--prompts spec-bench:PATH" in text
    assert "Intel Xeon, 2 CPUs, drafter tiny-drafter, 4 prompts" in text


def test_where_speculation_did_not_pay_a_line_says_so_and_names_budget_auto():
    lost = Verdict("root-draw", -0.05, None, 3.5, 3.1, 4)
    for budget in (8, "auto"):
        said = [line for line in verdict_lines(lost, budget=budget, machine="m", drafter="smollm2:int8", loaded=False)
                if line.startswith("speculation did not pay on this machine with this drafter")]
        assert len(said) == 1 and "--budget auto" in said[0] and "settles on plain decoding" in said[0]
    paid = Verdict("root-draw", 0.2, None, 2.0, 3.1, 4)
    lines = verdict_lines(paid, budget=8, machine="m", drafter="d", loaded=False)
    assert not any(line.startswith("speculation did not pay") for line in lines)
    assert any(line.startswith("  next: launch/pair.sh --budget auto") for line in lines)  # it may pay more


def test_a_settled_gain_under_budget_auto_suggests_nothing_but_a_quiet_machine_when_loaded():
    v = Verdict("draw", 0.25, (0.1, 0.4), 1.5, 2.1, 8)
    quiet = verdict_lines(v, budget="auto", machine="c", drafter="d", loaded=False)
    assert "paid against ar: +25.0% [95% interval +10.0, +40.0]" in quiet[0]
    assert not any("next" in line for line in quiet)
    loaded = verdict_lines(v, budget="auto", machine="c", drafter="d", loaded=True)
    assert any("quiet machine" in line for line in loaded)


def test_an_interval_over_zero_is_said_and_is_not_paying():
    v = Verdict("draw", 0.05, (-0.05, 0.15), 1.5, 1.6, 8)
    assert verdict_lines(v, budget="auto", machine="c", drafter="d", loaded=False)[0].endswith(
        "was not shown to pay against ar: +5.0% [95% interval -5.0, +15.0], an interval that spans zero: not settled")


def test_more_prompts_say_where_spec_benchs_questions_come_from():
    v = Verdict("draw", 0.05, None, 1.5, 1.6, 3)
    (more,) = [line for line in verdict_lines(v, budget=8, machine="c", drafter="d", loaded=False)
               if "spec-bench:PATH" in line]
    assert "data/spec_bench/question.jsonl in its repository (github.com/hemingkx/Spec-Bench)" in more


def test_the_verdict_passes_over_a_decoder_that_did_plain_work_for_one_that_speculated():
    bare = dataclasses.replace(stats("pearl", [2.0, 2.0], [0.0, 0.0], 20, 2.0), bare=20)
    s = setting({"ar": stats("ar", [2.0, 2.0], [0.0, 0.0], 40, 1.0), "pearl": bare,
                 "draft": stats("draft", [2.0, 2.0], [0.0, 0.0], 20, 2.2)},
                {("pearl", "ar"): gain(0.3, 8), ("draft", "ar"): gain(0.1, 8)}, n=8)
    v = verdict_of(s)
    assert v.decoder == "draft" and v.worked
    s.decoders["draft"] = dataclasses.replace(s.decoders["draft"], bare=20)
    v = verdict_of(s)
    assert v.decoder == "pearl" and not v.worked
    (line, *_) = verdict_lines(v, budget="auto", machine="c", drafter="d", loaded=False)
    assert line.startswith("verdict: plain decoding here: no decoder verified anything beyond the root; pearl's")


def test_bad_verdicts_are_refused():
    with pytest.raises(ValueError, match="`round_cost`"):
        Verdict("draw", 0.1, None, 0.0, 2.0, 3)
