"""The values program's coverage section on a mock sweep recorded with --record-rounds: its JSON lines, its
report, and greedy coverage against what the recorded rounds emitted."""

from __future__ import annotations

import itertools

import pytest

from evaluation.rounds_file import load_rounds
from pipeline.pool import ROOT, Pool
from pipeline.select import draft_order
from pipeline.verify import STOPPINGS
from study.coverage import round_coverage, scored_names
from study.values import VALUED
from tests.study.conftest import json_lines
from timing.values import main

POOL = 4 + 4 * 2 * 2  # the mock sweep's pool: topk 4, depth 3, expand 2


def test_values_json_has_every_coverage_figure(recorded, capsys):
    lines = json_lines(capsys, str(recorded), "--budgets", "1,4,8,100")
    coverage = [line for line in lines if line["kind"] == "coverage"]
    assert {(c["temperature"], c["rule"], c["budget"], c["scored"], c["stopping"]) for c in coverage} == \
           set(itertools.product((0.0, 1.0), VALUED, (1, 4, 8, POOL), scored_names(), STOPPINGS))
    assert len(coverage) == 2 * len(VALUED) * 4 * 5 * 4
    cells = {(c["temperature"], c["rule"], c["budget"], c["scored"], c["stopping"]): c for c in coverage}
    for (t, rule, b, scored, stopping), c in cells.items():
        figures = ("coverage", "value", "shortfall", "added")
        assert set(c) == {"kind", "temperature", "rule", "budget", "scored", "stopping", "rounds", *figures,
                          *(f"{name}_{end}" for name in figures for end in ("low", "high"))}
        assert 0.0 <= c["coverage"] <= 1.0 + 1e-9 and c["shortfall"] >= c["coverage"] - 1e-9
        for name in figures:  # a paired prompt-bootstrap interval around each figure
            assert c[f"{name}_low"] - 1e-12 <= c[name] <= c[f"{name}_high"] + 1e-12, name
        assert c["coverage"] == cells[t, rule, b, "frontier", stopping]["coverage"] if scored == "pool" else True
        if (scored, stopping) == ("tree", "exhaustive"):
            assert c["coverage"] == 0.0
    held = [line for line in lines if line["kind"] == "no-root-pass"]
    assert {(h["temperature"], h["budget"], h["scored"]) for h in held} == \
           set(itertools.product((0.0, 1.0), (1, 4, 8, POOL), ("top-100", "pool")))
    for h in held:
        assert set(h) == {"kind", "temperature", "budget", "scored", "rounds", "held_share", "held_share_low",
                          "held_share_high", "gain_over_draft", "gain_low", "gain_high", "decoder_gain_over_draft",
                          "decoder_gain_low", "decoder_gain_high"}
        assert h["held_share_low"] - 1e-12 <= h["held_share"] <= h["held_share_high"] + 1e-12
        assert h["decoder_gain_low"] - 1e-12 <= h["decoder_gain_over_draft"] <= h["decoder_gain_high"] + 1e-12
        assert 0.0 <= h["held_share"] < 1.0  # each decode's first round holds nothing
        if h["gain_over_draft"] is not None:
            assert h["gain_low"] - 1e-12 <= h["gain_over_draft"] <= h["gain_high"] + 1e-12


def test_report_shows_the_papers_coverage_tables(recorded, tmp_path):
    assert main([str(recorded), "--out", str(tmp_path), "--resamples", "200", "--no-plots"]) == 0
    text = (tmp_path / "values.md").read_text()
    assert text.index("## Coverage and stopping rules") > text.index("## T = 1:")  # after the selection section
    for temperature in ("0", "1"):
        assert f"### T = {temperature}: stopping rules and scored sets (Table 1), draft's tree" in text
    assert text.count("(Table 21)") == 2 and text.count("Without a root pass (D.10)") == 2
    for paper in ("12-17%", "28-35% (380-418 candidates)", "| 41-56% |", "| +4.9% to +10.1% |"):
        assert paper in text
    assert "| exhaustive | tree | 0.000 [0.000, 0.000] |" in text  # every cell with its interval


def address_node(pool: Pool, tokens) -> int | None:
    """The pool index at an address (tokens from the root), None where the pool lacks it."""
    child = {(int(p), int(t)): i for i, (p, t) in enumerate(zip(pool.parent, pool.token))}
    at = ROOT
    for token in tokens:
        at = child.get((at, int(token)))
        if at is None:
            return None
    return at


@pytest.mark.parametrize("decoder", ["draft", "root-draw"])
def test_greedy_coverage_is_what_each_recorded_round_emitted(recorded, decoder):
    """At T = 0 coverage is whether the target's token after the accepted path labels a scored candidate: for
    every greedy round the recording decoder ran, at its own budget, the exact figure under exhaustive
    traversal is 1 exactly when the round's emitted address (accepted path and continuation) is in the pool,
    or among the first M in draft order (with the tree), and never within the tree."""
    (found,) = load_rounds([recorded])
    rounds = [r for d in found.decodes for r in d.rounds
              if d.key["decoder"] == decoder and d.key["temperature"] == 0.0 and not d.key.get("warmup")]
    assert rounds
    exhaustive, top = list(STOPPINGS).index("exhaustive"), 6
    covered = 0
    for rnd in rounds:
        f = round_coverage(rnd.scored(), [rnd.budget], rules=[decoder], top=top)
        node = address_node(rnd.pool, rnd.emitted)
        in_pool = node is not None
        assert f.coverage[0, 4, exhaustive, 0] == float(in_pool)
        assert f.coverage[0, 0, exhaustive, 0] == 0.0
        if decoder == "draft":
            assert f.coverage[0, 1, exhaustive, 0] == float(in_pool and node in draft_order(rnd.pool)[:top])
        covered += in_pool
    assert 0 < covered < len(rounds)  # both outcomes occur, so the comparison says something
