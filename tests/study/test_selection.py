"""The selection figures beyond each rule's value: depth-d selection at its two ends, expected tree sizes and
the PEARL tree's overflow by brute force, restricted pools, the matched PEARL, and the first-token and entropy
splits, on small pools grown from random rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from study.selection import (EXCEEDS, FULL, PEARLS, RESTRICTED, first_agrees, match_pearl,
                             matched_cap, padded, quintiles, reach_budgets, round_curves, top1_sizes)
from study.values import VALUED, prompt_resamples
from pipeline.config import PoolConfig
from pipeline.pool import ROOT, grow_pool
from pipeline.select import select_pearl, select_pearl_top1, select_root_draw
from pipeline.select import top1
from pipeline.value import SIZES, Scored, pearl_exceeds, pearl_top1_exceeds, value_oracle, value_root

CONFIGS = [PoolConfig(4, 3, 2), PoolConfig(5, 4, 3), PoolConfig(10, 3, 10)]


def a_round(config: PoolConfig, seed: int, greedy: bool) -> Scored:
    """A pool grown from random draft rows, with random target edges: at T = 1 a law over each node's
    children (the rest of the row off the pool); greedy, a point mass on one child or off the pool."""
    gen = torch.Generator().manual_seed(seed)
    rows = lambda n: torch.log_softmax(2 * torch.randn(n, 40, generator=gen), -1)  # noqa: E731
    pool = grow_pool(rows(1)[0], lambda nodes, tokens, parents, depth: rows(len(nodes)), config)
    rng = np.random.default_rng(seed)
    edge = np.zeros(len(pool))
    for parent in np.unique(pool.parent):
        kids = np.flatnonzero(pool.parent == parent)
        if greedy:
            pick = rng.integers(0, len(kids) + 1)  # len(kids): the target's argmax is off the pool
            if pick < len(kids):
                edge[kids[pick]] = 1.0
        else:
            edge[kids] = rng.dirichlet(np.ones(len(kids) + 1))[:-1]
    return Scored(pool, edge)


ROUNDS = [(c, seed, greedy) for c in CONFIGS for seed in range(4) for greedy in (False, True)]


@pytest.mark.parametrize("config,seed,greedy", ROUNDS)
def test_depth_one_is_root_and_the_full_depth_is_the_oracle_exactly(config, seed, greedy):
    s = a_round(config, seed, greedy)
    curves = {name: value(s) for name, value in VALUED.items()}
    figures = round_curves(s, curves, config.depth)
    budgets = np.arange(1, len(s.pool) + 1)
    np.testing.assert_array_equal(figures["depth-1"], value_root(s).at(budgets))
    np.testing.assert_array_equal(figures[f"depth-{config.depth}"], value_oracle(s).at(budgets))
    for d in range(1, config.depth):  # each depth between: never above the oracle, and it ends where all do
        assert np.all(figures[f"depth-{d}"] <= figures[f"depth-{config.depth}"] + 1e-12)


def _draws(s: Scored):
    """(token, probability) of every first-level draw X1, and the draw off the first level."""
    first = np.flatnonzero(s.pool.parent == ROOT)
    return [(int(s.pool.token[u]), float(s.edge[u])) for u in first] + [(-1, s.off_pool)]


@pytest.mark.parametrize("config,seed,greedy", ROUNDS)
def test_expected_sizes_and_pearls_overflow_by_brute_force(config, seed, greedy):
    s = a_round(config, seed, greedy)
    selectors = {"root-draw": select_root_draw, "pearl": select_pearl, "pearl-top1": select_pearl_top1}
    for b in (1, 2, 3, 5, 8, len(s.pool)):
        for rule, select in selectors.items():
            want = sum(p * len(select(s.pool, b, x1)) for x1, p in _draws(s))
            assert SIZES[rule](s)[b - 1] == pytest.approx(want, abs=1e-12), (rule, b)
        assert SIZES["draft"](s)[b - 1] == b
        for cap in (1, 2, 4):
            for exceeds, select in ((pearl_exceeds, select_pearl), (pearl_top1_exceeds, select_pearl_top1)):
                want = sum(p for x1, p in _draws(s) if len(select(s.pool, b, x1)) > cap)
                assert exceeds(s, cap)[b - 1] == pytest.approx(want, abs=1e-12), (exceeds.__name__, cap, b)
        top = int(s.pool.token[top1(s.pool)])  # the trees counted only after a draw of the drafter's top token
        for rule, select in selectors.items():
            want = sum(p * len(select(s.pool, b, x1)) for x1, p in _draws(s) if x1 == top)
            assert top1_sizes(s)[f"top1-size:{rule}"][b - 1] == pytest.approx(want, abs=1e-12), (rule, b)


@pytest.mark.parametrize("config,seed,greedy", ROUNDS[:8])
def test_restricted_to_the_pool_is_unrestricted_and_the_oracles_advantage_grows_with_m(config, seed, greedy):
    s = a_round(config, seed, greedy)
    curves = {name: value(s) for name, value in VALUED.items()}
    n = len(s.pool)
    figures = round_curves(s, curves, config.depth)
    for rule in ("draft", "root", "oracle"):
        whole = curves[rule].at(np.arange(1, n + 1))
        for m in RESTRICTED:
            if m >= n:
                np.testing.assert_array_equal(figures[f"restricted-{m}:{rule}"], whole)
    # a hand-made restriction: M = 3 keeps the three best by draft rank, so the oracle on them is their best tree
    advantage = [figures[f"restricted-{m}:oracle"] - figures[f"restricted-{m}:draft"] for m in RESTRICTED]
    for smaller, larger in zip(advantage, advantage[1:]):
        assert np.all(larger >= smaller - 1e-12)


def _full(rounds: list[Scored], prompt: np.ndarray, n: int) -> dict[str, np.ndarray]:
    full = {name: np.zeros((prompt.max() + 1, n)) for name in FULL}
    for s, p in zip(rounds, prompt):
        curves = {name: value(s) for name, value in VALUED.items()}
        figures = {name: curve.at(np.arange(1, len(s.pool) + 1)) for name, curve in curves.items()}
        figures.update(round_curves(s, curves, 4))
        for name in FULL:
            full[name][p] += padded(figures[name], n)
    return full


def test_the_matched_pearl_has_root_draws_expected_size():
    rounds = [a_round(PoolConfig(6, 4, 3), seed, False) for seed in range(24)]
    prompt = np.arange(24) % 6
    n = max(len(s.pool) for s in rounds)
    full = _full(rounds, prompt, n)
    per_prompt = np.bincount(prompt).astype(float)
    counts = prompt_resamples(6, 300, 0)
    mean = lambda name, at: full[name][:, at - 1].sum() / 24  # noqa: E731
    for budget in EXCEEDS:
        for baseline in PEARLS:
            m = match_pearl(full, per_prompt, counts, budget, 0.025, baseline)
            if mean(f"size:{baseline}", n) < mean("size:root-draw", budget) * (1 - 1e-9):  # no budget makes it as large
                assert baseline == "pearl-top1" and np.isnan([m.raised, m.gain, m.low, m.high]).all()
                continue
            assert m.baseline == baseline and m.pearl_size == pytest.approx(m.root_draw_size, abs=0.01)
            assert m.raised >= budget and m.low <= m.gain <= m.high
            b = min(int(m.raised), n - 1)  # its value mixes the two whole budgets around the raised one
            lam = b + 1 - m.raised
            raised = lambda name: lam * mean(name, b) + (1 - lam) * mean(name, b + 1)  # noqa: E731
            assert m.gain == pytest.approx(mean("root-draw", budget) / raised(baseline) - 1, rel=1e-9)
            assert m.exceeds == pytest.approx(raised(f"exceeds-{budget}:{baseline}"))
            # the trees by the kind of draw add up to the whole: X1 the top token, another, off the first level
            top, off = mean("draw:top1", 1), mean("draw:off", 1)
            assert m.top1_share == pytest.approx(top)
            for whole, after, other in ((m.pearl_size, m.after_top1, m.after_other),
                                        (m.root_draw_size, m.root_draw_after_top1, m.root_draw_after_other)):
                assert top * after + (1 - top - off) * other + off == pytest.approx(whole)
            assert m.root_draw_after_top1 <= budget and m.root_draw_after_other <= budget
            if baseline == "pearl-top1":  # it keeps the drawn token alone after any other draw
                assert m.after_other == pytest.approx(1.0)
    cap = matched_cap(full, per_prompt, 8)
    size = lambda name, at: full[name][:, at - 1].sum() / 24  # noqa: E731
    assert size("size:root-draw", cap) >= size("size:pearl", 8) > size("size:root-draw", cap - 1)


def test_reach_budgets_search_every_budget_and_resample():
    rounds = [a_round(PoolConfig(6, 4, 3), seed, True) for seed in range(12)]
    prompt = np.arange(12) % 4
    n = max(len(s.pool) for s in rounds)
    full = _full(rounds, prompt, n)
    got, low, high = reach_budgets(full, np.bincount(prompt).astype(float), prompt_resamples(4, 200, 1), "draft",
                                   "root", 4, 0.025)
    draft, goal = full["draft"].sum(0), full["root"].sum(0)[3]
    want = int(np.flatnonzero(draft >= goal - 1e-12)[0]) + 1 if np.any(draft >= goal - 1e-12) else None
    assert got == want and low <= (got or n + 1) <= high


def test_first_token_split_and_entropy_quintiles_by_brute_force():
    s = a_round(PoolConfig(5, 3, 2), 3, False)
    first = np.flatnonzero(s.pool.parent == ROOT)
    best = int(s.pool.token[first[np.argmax(s.pool.logp[first])]])  # the drafter's most probable first token
    assert first_agrees(s, best) and not first_agrees(s, best + 1000)
    rng = np.random.default_rng(0)
    entropy, gain = rng.uniform(0, 5, 103), rng.normal(0, 1, 103)
    which = quintiles(entropy)  # each round's quintile, as the values program splits rounds
    counts = np.bincount(which, minlength=5)
    means = np.bincount(which, weights=gain, minlength=5) / counts
    order = np.argsort(entropy, kind="stable")
    assert counts.sum() == 103 and counts.min() >= 20
    at = 0
    for q in range(5):  # the quintiles are consecutive runs of the rounds sorted by entropy
        chosen = order[at: at + counts[q]]
        assert means[q] == pytest.approx(gain[chosen].mean())
        at += counts[q]
