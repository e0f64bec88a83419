"""Properties of the numbers the report's plots draw, on synthetic records with known answers: acceptance
by depth counts tree rounds only, tree sizes share all rounds, phases split tree from plain rounds, and a
plot's panels hold only the decoders and settings that have its data."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.summary import analyse, category_group
from pipeline.result import PHASES
from timing import figures


def ms(*values):
    return [v / 1000 for v in values]


@pytest.fixture
def auto_run(make_record):
    """Two prompts at T = 0 under budget auto: ar's plain rounds, root-draw's two tree rounds and a plain
    one per prompt, prompts in two categories."""
    recs = []
    for i, category in enumerate(("qa", "rag")):
        recs.append(make_record(f"p/{i}", "ar", budget="auto", tree_sizes=(0, 0, 0), accepted=(0, 0, 0),
                                budgets=(0, 0, 0), category=category, tokens=6, seconds=2.0))
        recs.append(make_record(f"p/{i}", "root-draw", budget="auto", tree_sizes=(8, 16, 0),
                                accepted=(1 + i, 3, 0), budgets=(8, 16, 0), category=category, tokens=7,
                                seconds=1.0, phases={"draft": ms(30, 50, 0), "root": ms(10, 20, 40),
                                                     "wait": ms(20, 30, 0), "tree": ms(40, 60, 0)}))
    return recs


def test_acceptance_by_depth_counts_tree_rounds_accepting_at_least_d(auto_run):
    st = analyse(auto_run, 0.0, "auto").decoders["root-draw"]
    # tree rounds accepted 1, 3 (p/0) and 2, 3 (p/1); the plain rounds' zeros do not count
    assert figures.acceptance_at_least(st) == pytest.approx([1.0, 0.75, 0.5])
    assert figures.acceptance_at_least(st, 5) == pytest.approx([1.0, 0.75, 0.5, 0.0, 0.0])


def test_a_decoder_without_tree_rounds_has_no_acceptance(auto_run):
    st = analyse(auto_run, 0.0, "auto").decoders["ar"]
    assert figures.acceptance_at_least(st).size == 0 and not figures.tree_rounds(st).any()


def test_tree_size_shares_cover_every_round(auto_run):
    st = analyse(auto_run, 0.0, "auto").decoders["root-draw"]
    shares = figures.tree_size_shares(st)
    assert shares == pytest.approx({0: 1 / 3, 8: 1 / 3, 16: 1 / 3}) and list(shares) == [0, 8, 16]


def test_phase_profile_takes_medians_over_tree_and_plain_rounds_apart(auto_run):
    profile = figures.phase_profile(analyse(auto_run, 0.0, "auto").decoders["root-draw"])
    n, tree = profile["tree"]
    assert n == 4 and 1000 * tree == pytest.approx([40, 15, 25, 1, 50, 1])  # medians of 30, 50, 30, 50 ...
    n, plain = profile["plain"]
    assert n == 2 and 1000 * plain == pytest.approx([0, 40, 0, 1, 0, 1])
    assert list(PHASES) == ["draft", "root", "wait", "select", "tree", "commit"]
    assert list(figures.phase_profile(analyse(auto_run, 0.0, "auto").decoders["ar"])) == ["plain"]


def test_speed_and_tau_per_setting_with_nan_where_a_decoder_is_missing(auto_run, make_record):
    b8 = [make_record(f"p/{i}", "ar", budget=8, budgets=(0, 0), tokens=4, seconds=1.0) for i in range(2)]
    settings = [analyse(auto_run + b8, 0.0, 8), analyse(auto_run + b8, 0.0, "auto")]
    speed, tau = figures.decoder_values(settings, "speed"), figures.decoder_values(settings, "tau")
    assert list(speed) == ["ar", "root-draw"]
    assert speed["ar"] == pytest.approx([4.0, 3.0]) and np.isnan(speed["root-draw"][0])
    assert speed["root-draw"][1] == pytest.approx(7.0) and tau["root-draw"][1] == pytest.approx((1 + 3 + 2 + 3) / 6 + 1)


def test_panels_hold_only_what_has_the_plots_data(auto_run, make_record):
    fixed = [make_record(f"p/{i}", d, budget=8, budgets=(0, 0) if d == "ar" else (8, 8), category=c)
             for i, c in enumerate(("qa", "rag")) for d in ("ar", "root-draw")]
    settings = [analyse(fixed + auto_run, 0.0, b) for b in (8, "auto")]
    assert [t for t, _ in figures.speed_panels(settings)] == ["T = 0"]
    assert [g for g, _ in figures.speed_panels(settings)[0][1]] == ["B = 8", "B = auto"]
    acceptance = figures.decoder_panels(settings, lambda st: bool(figures.tree_rounds(st).any()))
    assert [(t, [d for d, _ in series]) for t, series in acceptance] == [("T=0 B=8", ["root-draw"]),
                                                                         ("T=0 B=auto", ["root-draw"])]
    sizes = figures.decoder_panels(settings, figures.ran_auto)  # fixed budgets and `ar` have no choice to show
    assert [(t, [d for d, _ in series]) for t, series in sizes] == [("T=0 B=auto", ["root-draw"])]
    cats = {s.label: [analyse(fixed + auto_run, 0.0, s.budget, category_group(c)) for c in ("qa", "rag")]
            for s in settings}
    by_cat = figures.category_panels(settings, cats, figures.ran_auto)
    assert [(t, [c for c, _ in series]) for t, series in by_cat] == [("T=0 B=auto, root-draw", ["qa", "rag"])]
    assert [t for t, _ in figures.category_speed_panels(settings, cats)] == ["T=0 B=8", "T=0 B=auto"]
    assert figures.decoder_panels(settings[:1], figures.ran_auto) == []


def test_a_draw_rule_whose_trees_held_its_draw_alone_says_nothing_about_acceptance(make_record):
    alone = [make_record(f"p/{i}", "root-draw", budget="auto", tree_sizes=(1, 1), accepted=(1, 1), budgets=(1, 1))
             for i in range(2)]
    st = analyse(alone, 0.0, "auto").decoders["root-draw"]
    assert figures.tree_rounds(st).any() and not figures.has_acceptance(st)  # 100% at d = 1 by construction
    single = [make_record(f"p/{i}", "draft", budget="auto", tree_sizes=(1, 1), accepted=(1, 0), budgets=(1, 1))
              for i in range(2)]
    assert figures.has_acceptance(analyse(single, 0.0, "auto").decoders["draft"])  # a draft can miss
