"""Draft factors replaced (study.controls): the binned isotonic map and the per-depth maps on hand-made
cases, fits that never see the half they are applied to, substitution and mixtures of retained rows, and the
exact row at T = 1 ranking the pool as `root` does."""

from __future__ import annotations

import numpy as np
import pytest

from study.controls import (BinnedIsotonic, calibrated, chosen_weight, first_values, mixed_first,
                                 per_depth_edges, study_rounds)
from evaluation.rounds import ROW_KINDS, RecordedDecode, RecordedRound, RetainedRows
from pipeline.pool import Pool
from pipeline.value import value_root

KEY = dict(category="qa", turn=0, decoder="draft", temperature=1.0, budget=4, seed=0)


def test_binned_isotonic_on_a_hand_made_case():
    """Two equal-count bins of (0.1, 0.2 | 0.3, 0.4): means (0.15, 0.5) and (0.35, 1.0); between them the map
    interpolates, outside it is clipped; a decreasing pair of bins is pooled to its weighted mean."""
    m = BinnedIsotonic(np.array([0.4, 0.1, 0.3, 0.2]), np.array([1.0, 1.0, 1.0, 0.0]), bins=2)
    np.testing.assert_allclose(m.x, [0.15, 0.35])
    np.testing.assert_allclose(m.y, [0.5, 1.0])
    np.testing.assert_allclose(m(np.array([0.0, 0.15, 0.25, 0.35, 0.9])), [0.5, 0.5, 0.75, 1.0, 1.0])
    down = BinnedIsotonic(np.array([0.1, 0.2, 0.3, 0.4, 0.5]), np.array([1.0, 1.0, 1.0, 0.0, 0.0]), bins=2)
    np.testing.assert_array_equal(down.weight, [3, 2])  # as np.array_split: the first bin one larger
    np.testing.assert_allclose(down(np.array([0.1, 0.5])), [0.6, 0.6])  # (3 * 1 + 2 * 0) / 5


def test_two_hundred_equal_count_bins():
    rng = np.random.default_rng(0)
    x = rng.random(1000)
    y = (rng.random(1000) < x).astype(float)
    m = BinnedIsotonic(x, y)
    assert len(m.x) == 200 and np.all(m.weight == 5)
    order = np.argsort(x)
    np.testing.assert_allclose(m.x, x[order].reshape(200, 5).mean(1))
    np.testing.assert_allclose(m.y, y[order].reshape(200, 5).mean(1))
    assert np.all(np.diff(m(np.sort(x))) >= 0)


def test_calibration_never_sees_the_half_it_is_applied_to():
    """The target is 1 on one half and 0 on the other: each half gets the other's map, so the figures are
    swapped. A fit that saw its own half would give each its own labels."""
    rng = np.random.default_rng(1)
    x = rng.random(400)
    half = np.repeat([0, 1], 200)
    y = (half == 0).astype(float)
    out = calibrated(x, y, half)
    np.testing.assert_allclose(out[half == 0], 0.0)
    np.testing.assert_allclose(out[half == 1], 1.0)


def pool_round(q1, edges, rows=None, first_soft=None) -> RecordedRound:
    """A pool of two first-level candidates (draft probabilities q1), each with one child of draft probability
    0.5; `edges`: the four target edges in pool order (u0, u1, child of u0, child of u1)."""
    pool = Pool.from_edges(np.array([1, 2, 3, 4]), np.array([-1, -1, 0, 1]), np.log([*q1, 0.5, 0.5]),
                           np.array([1, 1, 0, 0], bool))
    return RecordedRound(budget=2, accepted=0, emitted=np.array([1]), pool=pool, edge=np.array(edges, float),
                         root=9, position=0, root_argmax=1, first_soft=first_soft, prefix_root=0 if rows else -1,
                         rows=rows)


def decodes(rounds_by_prompt) -> list[RecordedDecode]:
    return [RecordedDecode({**KEY, "prompt_id": f"p{i}"}, rounds) for i, rounds in enumerate(rounds_by_prompt)]


def test_per_depth_maps_fit_each_depth_on_the_other_half():
    """Depth 1: the target follows the draft probability on the even prompt and its opposite on the odd one;
    depth 2: the target is 1 on the even prompt, 0 on the odd one. Every factor gets its depth's map from the
    other half, never another depth's."""
    even = [pool_round((0.7, 0.2), (0.7, 0.2, 1.0, 1.0)), pool_round((0.6, 0.3), (0.6, 0.3, 1.0, 1.0))]
    odd = [pool_round((0.7, 0.2), (0.2, 0.7, 0.0, 0.0)), pool_round((0.6, 0.3), (0.3, 0.6, 0.0, 0.0))]
    s = study_rounds(1.0, decodes([even, odd]), [1, 2])
    edges = per_depth_edges(s)
    x1 = np.array([0.7, 0.2, 0.6, 0.3])
    from_odd = BinnedIsotonic(x1, np.array([0.2, 0.7, 0.3, 0.6]))(x1)  # decreasing: pooled to 0.45
    from_even = BinnedIsotonic(x1, x1)(x1)
    np.testing.assert_allclose(np.concatenate([e[:2] for e in edges[:2]]), from_odd)
    np.testing.assert_allclose(np.concatenate([e[:2] for e in edges[2:]]), from_even)
    np.testing.assert_allclose([e[2:] for e in edges[:2]], 0.0)
    np.testing.assert_allclose([e[2:] for e in edges[2:]], 1.0)


def rows_of(kind: str, logp) -> RetainedRows:
    return RetainedRows(kind=np.array([ROW_KINDS.index(kind)]), tv=np.array([0.1], np.float32),
                        agree=np.array([True]), on_path=np.array([False]), age=np.array([-1]),
                        logp=np.array([logp], np.float32))


def test_a_substitute_replaces_the_first_factor_and_a_round_without_it_keeps_the_draft():
    rnd = pool_round((0.7, 0.2), (0.1, 0.8, 0.5, 0.5), rows=rows_of("cache", np.log([0.1, 0.9])))
    np.testing.assert_allclose(mixed_first(rnd, "cache", 1.0), [0.1, 0.9], rtol=1e-6)
    np.testing.assert_allclose(mixed_first(rnd, "same-token", 1.0), [0.7, 0.2], rtol=1e-6)
    np.testing.assert_allclose(mixed_first(rnd, "cache", 0.25), [0.7 ** 0.75 * 0.1 ** 0.25, 0.2 ** 0.75 * 0.9 ** 0.25],
                               rtol=1e-6)
    s = study_rounds(1.0, decodes([[rnd]]), [1, 2])
    # budget 1: draft keeps u0 (target 0.1), the cache row ranks u1 first (target 0.8)
    assert first_values(s, [mixed_first(rnd, "cache", 1.0)], np.array([1]))[0, 0] == pytest.approx(0.8)
    assert first_values(s, [mixed_first(rnd, "same-token", 1.0)], np.array([1]))[0, 0] == pytest.approx(0.1)


def test_the_preceding_rows_zeroed_continuation_ranks_its_subtree_last():
    rnd = pool_round((0.7, 0.2), (0.6, 0.3, 0.5, 0.5), rows=rows_of("preceding", [-np.inf, np.log(0.5)]))
    first = mixed_first(rnd, "preceding", 0.5)
    assert first[0] == 0.0 and first[1] == pytest.approx(np.sqrt(0.2 * 0.5))
    s = study_rounds(1.0, decodes([[rnd]]), [1, 2])
    np.testing.assert_allclose(first_values(s, [first], np.array([1, 2])), [[0.3, 0.45]])


def test_the_exact_row_at_t1_ranks_the_pool_as_root_does():
    rng = np.random.default_rng(2)
    rounds = []
    for _ in range(20):
        q, target = rng.dirichlet([1, 1, 1])[:2], rng.dirichlet([1, 1, 1])[:2]
        rounds.append(pool_round(q, (*target, *rng.random(2)), first_soft=target))
    s = study_rounds(1.0, decodes([rounds]), [1, 2, 3, 4])
    budgets = np.array([1, 2, 3, 4])
    got = first_values(s, [mixed_first(r, "exact", 1.0) for r in rounds], budgets)
    np.testing.assert_allclose(got, [value_root(sc).at(budgets) for sc in s.scored])


def test_the_mixture_weight_is_chosen_on_the_other_half():
    """Weight 0 is best on the even rounds, weight 2 on the odd ones: each half gets the other's best."""
    half = np.array([0, 0, 1, 1])
    values = np.zeros((3, 4, 2))
    values[0, half == 0] = 2.0
    values[2, half == 1] = 3.0
    values[1] = 1.0
    out, picks = chosen_weight(values, half)
    np.testing.assert_array_equal(picks, [[2, 2], [0, 0]])
    np.testing.assert_allclose(out, [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
