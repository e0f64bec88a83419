"""The matched-size cap is the smallest whose estimated mean tree size reaches pearl's, from the pool count
under each round's draw."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline.config import InputError
from timing.matched import match


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
    recs[1] = dataclasses.replace(recs[1], available=[0])
    with pytest.raises(InputError, match="lack `available`"):
        match(recs, 0.0)
    with pytest.raises(InputError, match="no pearl records"):
        match(recs[1:], 0.0)
