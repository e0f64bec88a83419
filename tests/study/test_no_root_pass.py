"""The decoder without a root pass, offline (DESIGN.md section 12; the paper's D.10): the holding chain on a
hand-checked case, and its coverage the same as the coverage figures'."""

from __future__ import annotations

import numpy as np
import pytest

from study.coverage import MEMBERS, round_coverage
from study.no_root_pass import held_rounds, own_coverage
from evaluation.rounds import RecordedDecode, RecordedRound
from study.values import Averages
from pipeline.pool import Pool
from pipeline.verify import STOPPINGS
from tests.study.random_pools import random_scored

KEY = dict(prompt_id="p", category="qa", turn=0, decoder="draft", temperature=1.0, budget=1, seed=0)


def a_round(first: tuple[float, float]) -> RecordedRound:
    """First-level a (draft 0.6) and b (0.3), a's child c (0.4), b's child d (0.6): draft order a, b, c, d.
    Target edges: a and b as `first`, 1/2 for c and d."""
    pool = Pool.from_edges(np.array([1, 2, 3, 4]), np.array([-1, -1, 0, 1]), np.log([0.6, 0.3, 0.4, 0.6]),
                           np.array([True, True, False, False]))
    return RecordedRound(budget=1, accepted=0, emitted=np.array([1]), pool=pool,
                         edge=np.array([first[0], first[1], 0.5, 0.5]))


def test_the_holding_chain_on_a_hand_checked_case():
    """Rounds 1 and 2: p(a) = 1/4, p(b) = 1/2 (masses a 1/4, b 1/2, c 1/8, d 1/4), so at B = 1 draft keeps a
    and root keeps b (root order b, d, a, c). Scoring the top 2 of its order, draft's pass scores b: covered
    with 1/2; root's scores d: 1/4. Scoring the pool: draft's exits b, c: 5/8; root's a, d: 1/2.
    Round 3: p(a) = 1/2, p(b) = 1/4, where both keep a (value 1/2).

    Top 2: h = 0, 1/2, then 1/2 * 1/4 + 1/2 * 1/2 = 3/8. Pool: 0, 5/8, 5/8 * 1/2 + 3/8 * 5/8 = 35/64.
    Root over draft where the row is held (top 2): (1/2 * 1/2 + 3/8 * 1/2) / (1/2 * 1/4 + 3/8 * 1/2) - 1 = 2/5.
    A second decode's only round holds nothing. The decoder (root where it holds the row, draft elsewhere) over
    draft in every round, top 2: (1/4 + 3/8 + 1/2 + 1/4) / (1/4 + 1/4 + 1/2 + 1/4) - 1 = 1/10."""
    rounds = [a_round((0.25, 0.5)), a_round((0.25, 0.5)), a_round((0.5, 0.25))]
    decodes = [RecordedDecode(KEY, rounds), RecordedDecode({**KEY, "prompt_id": "q"}, [a_round((0.25, 0.5))])]
    (per,) = held_rounds(decodes, budgets=(1,), top=2)
    assert per.values["held:top-2"][:, 0].tolist() == [0, 0.5, 0.375, 0]
    assert per.values["held:pool"][:, 0].tolist() == [0, 0.625, 35 / 64, 0]
    assert per.values["root:top-2"][:, 0].tolist() == [0, 0.25, 0.1875, 0]
    assert per.values["draft:top-2"][:, 0].tolist() == [0, 0.125, 0.1875, 0]
    avg = Averages(per, n_resamples=20)
    assert avg.per_round("held:top-2")[0] == pytest.approx(0.875 / 4)
    assert avg.gain("root:top-2", "draft:top-2")[0].value == pytest.approx(0.4)
    assert per.values["decoder:top-2"][:, 0].tolist() == [0.25, 0.375, 0.5, 0.25]
    assert per.values["draft"][:, 0].tolist() == [0.25, 0.25, 0.5, 0.25]
    assert avg.gain("decoder:top-2", "draft")[0].value == pytest.approx(0.1)


def test_greedy_rounds_hold_the_row_or_not():
    """At T = 0 coverage is 0 or 1, and so is every round's holding probability."""
    rng = np.random.default_rng(3)
    rounds = []
    for _ in range(30):
        s = random_scored(rng, int(rng.integers(2, 25)), greedy=True)
        rounds.append(RecordedRound(budget=2, accepted=0, emitted=np.array([0]), pool=s.pool, edge=s.edge))
    (per,) = held_rounds([RecordedDecode({**KEY, "temperature": 0.0}, rounds)], budgets=(1, 2, 4, 8), top=5)
    for name in ("held:top-5", "held:pool"):
        assert set(np.unique(per.values[name]).tolist()) <= {0.0, 1.0}
    assert per.values["held:pool"].any()


def test_its_coverage_is_the_coverage_figures_own():
    """Draft's pass scoring the top M of draft order is the coverage figures' top-M set for draft; scoring the
    pool, both rules' coverage is the figures' pool coverage; and the values are the rules' values."""
    rng = np.random.default_rng(4)
    exhaustive, rules = list(STOPPINGS).index("exhaustive"), list(MEMBERS)
    for _ in range(60):
        s = random_scored(rng, int(rng.integers(1, 30)), greedy=bool(rng.integers(2)))
        budgets, top = np.arange(1, len(s.pool) + 2), int(rng.integers(0, 12))
        f = round_coverage(s, budgets, top=top)
        for rule in ("draft", "root"):
            value, cover = own_coverage(s, MEMBERS[rule](s).rank, budgets, top)
            i = rules.index(rule)
            np.testing.assert_allclose(value, f.value[i, 0, exhaustive], atol=1e-12)
            np.testing.assert_allclose(cover[1], f.coverage[i, 4, exhaustive], atol=1e-12)
            if rule == "draft":
                np.testing.assert_allclose(cover[0], f.coverage[i, 1, exhaustive], atol=1e-12)
