"""Properties of the numbers every summary shows, on synthetic records: only complete prompts count, turns
and seeds sum within a prompt, gains are evaluation.stats' paired gains (each rule over its baselines and
over `ar`), the speed counts the tokens its rule names, and categories group as Spec-Bench groups them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evaluation.stats import paired_gains
from evaluation.summary import MT_BENCH, analyse, as_json, category_group, group_order, median_rounds, settings_of
from pipeline.result import PHASES
from pipeline.rules import comparisons

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
    recs = [r for r in recs if not (r.prompt_id == "p/3" and r.decoder == "root")]
    recs.append(make_record("p/0", "draft", warmup=True, tokens=10**6))  # warm-ups never count
    s = analyse(recs, 0.0, 8)
    assert len(s.prompt_ids) == 5 and s.prompts_seen == 6 and "p/3" not in s.prompt_ids
    assert all(st.tokens.shape == (5,) for st in s.decoders.values())
    drafts = [r for r in recs if r.decoder == "draft" and r.prompt_id != "p/3" and not r.warmup]
    assert s.decoders["draft"].speed == pytest.approx(sum(r.new_tokens for r in drafts) / sum(r.seconds for r in drafts))


def test_gains_are_paired_gains_over_prompts_sorted_by_id(make_record):
    recs = sweep_records(make_record, n_prompts=8)
    s = analyse(recs, 0.0, 8, n_resamples=500, rng=3)
    ids = sorted({r.prompt_id for r in recs})
    tok = {d: np.array([next(r.new_tokens for r in recs if r.decoder == d and r.prompt_id == p) for p in ids], float)
           for d in DECODERS}
    sec = {d: np.array([next(r.seconds for r in recs if r.decoder == d and r.prompt_id == p) for p in ids])
           for d in DECODERS}
    expected = paired_gains(tok, sec, comparisons(DECODERS), n_resamples=500, rng=3)
    assert s.gains == expected


def test_settings_with_the_same_prompts_are_resampled_alike(make_record):
    a = sweep_records(make_record, rng=1)
    b = [dataclasses.replace(r, budget=59) for r in a]  # the same decodes at another setting: the same intervals
    assert analyse(a + b, 0.0, 8).gains == analyse(a + b, 0.0, 59).gains
    assert settings_of(a + b) == [(0.0, 8), (0.0, 59)]


def test_seeds_are_summed_within_a_prompt(make_record):
    recs = sweep_records(make_record, seeds=(0, 1))
    s = analyse(recs, 0.0, 8)
    assert s.seeds == [0, 1] and len(s.prompt_ids) == 6
    p0 = [r for r in recs if r.prompt_id == "p/0" and r.decoder == "root"]
    assert s.decoders["root"].tokens[0] == sum(r.new_tokens for r in p0)
    # a prompt missing one seed of one decoder is incomplete
    s = analyse([r for r in recs if not (r.prompt_id == "p/0" and r.seed == 1 and r.decoder == "pearl")], 0.0, 8)
    assert "p/0" not in s.prompt_ids


def test_categories_are_analysed_apart(make_record):
    recs = sweep_records(make_record)
    s = analyse(recs, 0.0, 8, category="c1")
    assert s.prompt_ids == ["p/1", "p/3", "p/5"] and s.label == "T=0 B=8 [c1]"


def test_mt_bench_categories_form_one_group_in_spec_benchs_order():
    assert {category_group(c) for c in MT_BENCH} == {"mt_bench"}
    assert category_group("qa") == "qa" and category_group("humaneval") == "humaneval"
    assert group_order(["humaneval", "rag", "qa", "mt_bench", "builtin", "translation"]) == [
        "mt_bench", "translation", "qa", "rag", "humaneval", "builtin"]


def test_turns_of_a_prompt_add_up_and_the_speed_counts_the_tokens_its_rule_names(make_record):
    recs = [make_record("q/1", d, tokens=10, seconds=1.0, overshoot=3, turn=t) for d in ("ar", "draft")
            for t in (0, 1)] + [make_record("q/2", d, tokens=20, seconds=2.0) for d in ("ar", "draft")]
    out = analyse(recs, 0.0, 8, speed_tokens="output")
    seed_rule = analyse(recs, 0.0, 8, speed_tokens="round")
    assert list(out.decoders["ar"].tokens) == [20, 20] and list(seed_rule.decoders["ar"].tokens) == [26, 20]
    assert out.decoders["draft"].speed == pytest.approx(40 / 4) and seed_rule.decoders["draft"].speed == 46 / 4
    assert set(out.gains) == {("draft", "ar")}


def test_every_decoder_is_compared_with_ar(make_record):
    recs = [make_record(f"p/{i}", d, tokens=10 + i) for i in range(4) for d in ("ar", "draft", "root-draw")]
    assert list(analyse(recs, 0.0, 8).gains) == [("root-draw", "draft"), ("draft", "ar"), ("root-draw", "ar")]


def test_sweep_records_are_grouped_by_their_grid_budget(make_record):
    recs = [make_record(f"p/{i}", d, budget=41 if d == "root-draw" else 59, grid_budget=59) for i in range(3)
            for d in ("pearl", "root-draw")]
    assert settings_of(recs) == [(0.0, 59)]
    s = analyse(recs, 0.0, 59)
    assert s.decoders["root-draw"].budgets == [41] and s.decoders["pearl"].budgets == [59]


def test_a_setting_with_one_prompt_has_speeds_but_no_gains(make_record):
    s = analyse(sweep_records(make_record, n_prompts=1), 0.0, 8)
    assert s.gains == {} and s.decoders["draft"].speed > 0


def test_median_rounds_are_the_rounds_nearest_the_median_round_time(make_record):
    r = make_record("p/0", "root-draw", tree_sizes=(1, 1, 1, 1, 1), accepted=(0,) * 5,
                    phases={"wait": [0.001, 0.0055, 0.002, 0.009, 0.003]})  # rounds of 5, 9.5, 6, 13 and 7 ms
    stats = analyse([r], 0.0, 8).decoders["root-draw"]
    rows = median_rounds(stats, 3)
    assert list(np.round(rows[:, PHASES.index("wait")], 3)) == [0.001, 0.002, 0.003]  # in round order
    assert stats.phase_median("wait") == pytest.approx(0.003)


@pytest.mark.parametrize("n_prompts, shown", [(2, False), (4, False), (5, True), (6, True)])
def test_an_interval_is_reported_from_enough_prompts_only(make_record, n_prompts, shown):
    from evaluation.stats import MIN_INTERVAL_PROMPTS
    from evaluation.summary import as_json

    assert MIN_INTERVAL_PROMPTS == 5
    setting = analyse(sweep_records(make_record, n_prompts=n_prompts), 0.0, 8)
    gain = next(iter(setting.gains.values()))
    assert gain.has_interval is shown and gain.n_prompts == n_prompts
    text = gain.interval_text()
    assert text.startswith("[") if shown else text == f"none ({n_prompts} prompts)"
    low = next(iter(as_json(setting)["gains"].values()))["low"]
    assert (low is not None) is shown


def test_drafting_ahead_is_summarised_over_the_rounds_that_tried_it(make_record):
    records = [make_record("p1", "root-draw", tree_sizes=(3, 4, 4), accepted=(1, 2, 0), ahead_hits=(-1, 1, 0),
                           ahead_seconds=(0.0, 0.004, 0.0)),
               make_record("p2", "root-draw", tree_sizes=(3, 4), accepted=(1, 2), ahead_hits=(-1, 1),
                           ahead_seconds=(0.0, 0.002)),
               make_record("p1", "ar"), make_record("p2", "ar")]
    s = analyse(records, 0.0, 8)
    got = as_json(s)["decoders"]
    assert got["root-draw"]["ahead_tried"] == 3
    assert got["root-draw"]["ahead_hit_rate"] == pytest.approx(2 / 3)
    assert got["root-draw"]["ahead_hidden_ms"] == pytest.approx(3.0)  # the mean of 4 and 2 ms
    assert "ahead_hit_rate" not in got["ar"]


def test_cut_pools_are_summarised_by_their_mean_depth(make_record):
    records = [make_record("p1", "root-draw", tree_sizes=(3, 4, 0), accepted=(1, 2, 0), budgets=(8, 8, 0),
                           pool_depths=(1, 3, 0)),
               make_record("p2", "root-draw", tree_sizes=(3, 4), accepted=(1, 2), pool_depths=(2, 2)),
               make_record("p1", "ar"), make_record("p2", "ar")]
    got = as_json(analyse(records, 0.0, 8))["decoders"]
    assert got["root-draw"]["cut_rounds"] == 4 and got["root-draw"]["pool_depth_mean"] == pytest.approx(2.0)
    assert "pool_depth_mean" not in got["ar"]
    draft = [make_record("p1", "draft", pool_depths=(3, 3)), make_record("p1", "ar")]  # waits for whole pools
    assert "pool_depth_mean" not in as_json(analyse(draft, 0.0, 8))["decoders"]["draft"]
    assert "pool_depth_mean" not in as_json(analyse([make_record("p1", "root-draw"), make_record("p1", "ar")],
                                                    0.0, 8))["decoders"]["root-draw"]  # pools not cut


def test_context_lookups_copies_are_summarised_as_a_share_of_the_accepted_tokens(make_record):
    def looked(prompt_id, copied, accepted):
        return dataclasses.replace(make_record(prompt_id, "draft", tree_sizes=(8,) * len(accepted),
                                               accepted=accepted), lookup=8, copied=list(copied))

    records = [looked("p1", (2, 0, 5), (2, 1, 6)), looked("p2", (1,), (3,)), make_record("p1", "ar"),
               make_record("p2", "ar")]
    got = as_json(analyse(records, 0.0, 8))["decoders"]
    assert got["draft"]["copied"] == 8 and got["draft"]["copied_share"] == pytest.approx(8 / 12)
    assert "copied" not in got["ar"]
    off = [make_record("p1", "draft"), make_record("p1", "ar")]  # without lookup: no line, even at zero copies
    assert "copied_share" not in as_json(analyse(off, 0.0, 8))["decoders"]["draft"]


def test_a_sweeps_one_ar_decode_is_paired_with_every_budget(make_record):
    records = [make_record(p, "ar", budget=8, grid_budget="all", seconds=2.0) for p in ("a", "b")]
    records += [make_record(p, "draft", budget=b, grid_budget=b) for p in ("a", "b") for b in (8, 59, "auto")]
    assert settings_of(records) == [(0.0, 8), (0.0, 59), (0.0, "auto")]
    for budget in (8, 59, "auto"):
        s = analyse(records, 0.0, budget)
        assert s.prompt_ids == ["a", "b"] and s.decoders["ar"].decodes == 2
        assert s.gains[("draft", "ar")].gain == pytest.approx(1.0)  # the same 10 tokens in 1 s against 2 s
    # records of an older sweep, which decoded ar at each budget, keep their own
    old = [make_record(p, "ar", budget=8, grid_budget=8, seconds=4.0) for p in ("a", "b")]
    assert analyse(records + old, 0.0, 8).decoders["ar"].seconds.sum() == 8.0
    assert analyse(records + old, 0.0, 59).decoders["ar"].seconds.sum() == 4.0
    assert settings_of(records[:2]) == [(0.0, "all")]  # ar alone is a setting of its own


def test_gains_count_the_tokens_delivered_unless_the_papers_count_is_named(make_record):
    # a sweep's rounds pass the limit (overshoot): the user got `tokens`, the paper counts the last round whole
    delivered = {("a", "ar"): (250, 10.0), ("a", "draft"): (250, 8.0), ("b", "ar"): (120, 6.0),
                 ("b", "draft"): (120, 5.0)}
    overshoot = {"ar": 0, "draft": 6}
    recs = [make_record(f"{p}/1", d, tokens=n, seconds=s, overshoot=overshoot[d])
            for (p, d), (n, s) in delivered.items()]
    speed = {d: sum(n for (_, e), (n, _) in delivered.items() if e == d) /
             sum(s for (_, e), (_, s) in delivered.items() if e == d) for d in ("ar", "draft")}
    by_hand = speed["draft"] / speed["ar"] - 1  # summed delivered tokens over summed seconds
    gain = analyse(recs, 0.0, 8).gains[("draft", "ar")].gain
    assert gain == pytest.approx(by_hand)
    assert analyse(recs, 0.0, 8, speed_tokens="round").gains[("draft", "ar")].gain > gain + 0.01


def test_tokens_per_pass_gains_are_paired_gains_on_the_speed_gains_resamples(make_record):
    """Each comparison's tokens per target pass (after the prefills) over its baseline's, a over b - 1, with the
    interval of the same resampled prompts as the speed gains: the pass counts stand where the seconds do."""
    rng = np.random.default_rng(5)
    recs = [dataclasses.replace(r, target_passes=int(rng.integers(5, 20))) for r in sweep_records(make_record, 8)]
    s = analyse(recs, 0.0, 8, n_resamples=400, rng=7)
    ids = sorted({r.prompt_id for r in recs})
    per = lambda d, field: np.array([sum(getattr(r, field) for r in recs if r.decoder == d and r.prompt_id == p)  # noqa: E731
                                     for p in ids], float)
    tokens, passes = ({d: per(d, f) for d in DECODERS} for f in ("new_tokens", "target_passes"))
    assert s.pass_gains == paired_gains(tokens, passes, comparisons(DECODERS), n_resamples=400, rng=7)
    g = s.pass_gains["root", "draft"]
    assert g.speed_a == pytest.approx(tokens["root"].sum() / passes["root"].sum()) == s.decoders["root"].tokens_per_pass
    assert as_json(s)["pass_gains"]["root/draft"]["gain"] == g.gain
    none = [dataclasses.replace(r, target_passes=0) if r.prompt_id == "p/0" and r.decoder == "pearl" else r for r in recs]
    assert analyse(none, 0.0, 8).pass_gains == {} and analyse(none, 0.0, 8).gains  # no pass: no tokens per pass


def test_the_json_gives_each_decoders_median_round_and_phases_in_ms(make_record):
    tree = {"draft": [0.002, 0.004, 0.006], "root": [0.010, 0.020, 0.030], "tree": [0.0, 0.040, 0.050]}
    records = [make_record("p1", "root", tree_sizes=(0, 3, 4), accepted=(0, 1, 2), phases=tree),
               make_record("p1", "ar", tree_sizes=(0, 0, 0), accepted=(0, 0, 0),
                           phases={"root": [0.010] * 3, **{p: [0.0] * 3 for p in ("draft", "wait", "select", "tree",
                                                                                     "commit")}})]
    got = as_json(analyse(records, 0.0, 8))["decoders"]
    root = got["root"]
    assert root["root_ms"] == pytest.approx(20.0) and root["tree_ms"] == pytest.approx(40.0)  # medians of rounds
    assert root["draft_ms"] == pytest.approx(4.0) and root["commit_ms"] == pytest.approx(1.0)
    # a round is the target side's phases one after another (the drafter's run beside the root pass)
    assert root["round_ms"] == pytest.approx(1000 * (0.020 + 0.001 + 0.001 + 0.040 + 0.001))
    assert got["ar"]["tree_ms"] is None and got["ar"]["round_ms"] == pytest.approx(10.0)  # never runs a tree pass
