"""Properties of the report's numbers and of the matched-size cap, on synthetic records: only complete
prompts count, seeds sum within a prompt, gains are timing.stats' paired gains, and the cap is the smallest
whose estimated mean tree size reaches pearl's."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.rules import comparisons
from timing.analysis import PHASES, analyse, median_rounds, settings_of
from timing.matched import match
from timing.stats import paired_gains

DECODERS = ("draft", "pearl", "root-draw", "root")


def sweep_records(make_record, n_prompts=6, seeds=(0,), rng=0):
    rng = np.random.default_rng(rng)
    out = []
    for i in range(n_prompts):
        for d in DECODERS:
            for s in seeds:
                out.append(make_record(f"p/{i}", d, seed=s, tokens=int(rng.integers(50, 100)),
                                       seconds=float(rng.uniform(1, 2)), category=f"c{i % 2}"))
    return out


def test_only_prompts_with_every_decoder_enter_a_setting(make_record):
    recs = sweep_records(make_record)
    recs = [r for r in recs if not (r["prompt_id"] == "p/3" and r["decoder"] == "root")]
    recs.append(make_record("p/0", "draft", warmup=True, tokens=10**6))  # warm-ups never count
    s = analyse(recs, 0.0, 8)
    assert len(s.prompt_ids) == 5 and s.prompts_seen == 6 and "p/3" not in s.prompt_ids
    assert all(st.tokens.shape == (5,) for st in s.decoders.values())
    drafts = [r for r in recs if r["decoder"] == "draft" and r["prompt_id"] != "p/3" and not r["warmup"]]
    assert s.decoders["draft"].speed == pytest.approx(sum(r["tokens"] for r in drafts) / sum(r["seconds"] for r in drafts))


def test_gains_are_paired_gains_over_prompts_sorted_by_id(make_record):
    recs = sweep_records(make_record, n_prompts=8)
    s = analyse(recs, 0.0, 8, n_resamples=500, rng=3)
    ids = sorted({r["prompt_id"] for r in recs})
    tok = {d: np.array([next(r["tokens"] for r in recs if r["decoder"] == d and r["prompt_id"] == p) for p in ids], float)
           for d in DECODERS}
    sec = {d: np.array([next(r["seconds"] for r in recs if r["decoder"] == d and r["prompt_id"] == p) for p in ids])
           for d in DECODERS}
    expected = paired_gains(tok, sec, comparisons(DECODERS), n_resamples=500, rng=3)
    assert s.gains == expected


def test_settings_with_the_same_prompts_are_resampled_alike(make_record):
    a = sweep_records(make_record, rng=1)
    b = [dict(r, budget=59) for r in a]  # the same decodes at another setting: the same intervals
    assert analyse(a + b, 0.0, 8).gains == analyse(a + b, 0.0, 59).gains
    assert settings_of(a + b) == [(0.0, 8), (0.0, 59)]


def test_seeds_are_summed_within_a_prompt(make_record):
    recs = sweep_records(make_record, seeds=(0, 1))
    s = analyse(recs, 0.0, 8)
    assert s.seeds == [0, 1] and len(s.prompt_ids) == 6
    p0 = [r for r in recs if r["prompt_id"] == "p/0" and r["decoder"] == "root"]
    assert s.decoders["root"].tokens[0] == sum(r["tokens"] for r in p0)
    # a prompt missing one seed of one decoder is incomplete
    s = analyse([r for r in recs if not (r["prompt_id"] == "p/0" and r["seed"] == 1 and r["decoder"] == "pearl")], 0.0, 8)
    assert "p/0" not in s.prompt_ids


def test_categories_are_analysed_apart(make_record):
    recs = sweep_records(make_record)
    s = analyse(recs, 0.0, 8, category="c1")
    assert s.prompt_ids == ["p/1", "p/3", "p/5"] and s.label == "T=0 B=8 [c1]"


def test_a_setting_with_one_prompt_has_speeds_but_no_gains(make_record):
    s = analyse(sweep_records(make_record, n_prompts=1), 0.0, 8)
    assert s.gains == {} and s.decoders["draft"].speed > 0


def test_median_rounds_are_the_rounds_nearest_the_median_round_time(make_record):
    r = make_record("p/0", "root-draw", tree_sizes=(1, 1, 1, 1, 1), accepted=(0,) * 5)
    r["phases"]["wait"] = [0.001, 0.0055, 0.002, 0.009, 0.003]  # rounds of 5, 9.5, 6, 13 and 7 ms
    stats = analyse([r], 0.0, 8).decoders["root-draw"]
    rows = median_rounds(stats, 3)
    assert list(np.round(rows[:, PHASES.index("wait")], 3)) == [0.001, 0.002, 0.003]  # in round order
    assert stats.phase_median("wait") == pytest.approx(0.003)


def matched_records(make_record, pearl_sizes, available, budget=59):
    return [make_record("p/0", "pearl", budget=budget, tree_sizes=pearl_sizes, accepted=[0] * len(pearl_sizes)),
            make_record("p/0", "root-draw", budget=budget, tree_sizes=[min(budget, a) for a in available],
                        accepted=[0] * len(available), available=available)]


def test_matched_cap_is_the_smallest_whose_mean_reaches_pearls(make_record):
    # pearl's mean is 20; root-draw rounds have 1, 30 and 70 nodes available: mean(min(c, a)) reaches 20
    # first at c = 30 (mean (1 + 29 + 29) / 3 = 19.67 at 29, (1 + 30 + 30) / 3 = 20.33 at 30)
    m = match(matched_records(make_record, [10, 30], [1, 30, 70]), 0.0)
    assert m["cap"] == 30 and m["pearl_mean"] == 20
    assert m["mean_at_cap"] == pytest.approx(61 / 3)
    assert m["estimate_at_budget"] == pytest.approx(m["root_draw_mean"])  # the estimate reproduces B itself


def test_matched_cap_above_the_budget_when_root_draw_trees_are_smaller(make_record):
    m = match(matched_records(make_record, [60, 62], [70, 70], budget=59), 0.0)
    assert m["cap"] == 61


def test_matched_needs_the_pool_count_under_the_draw(make_record):
    recs = matched_records(make_record, [10], [5])
    recs[1]["available"] = None
    with pytest.raises(ValueError, match="lack `available`"):
        match(recs, 0.0)
    with pytest.raises(ValueError, match="no pearl records"):
        match(recs[1:], 0.0)
