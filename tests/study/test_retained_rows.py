"""Agreement of retained rows with the next root row (study.retained_rows): on rounds written out by hand,
every share, mean, median and agreement equals the figure computed here from the recorded reductions, the first
round of a decode is never counted as one that could hold rows, and the medians' weights are prompt counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from study.retained_rows import ROWS, RowStudy, weighted_medians
from evaluation.rounds import ROW_KINDS, RecordedDecode, RecordedRound, RetainedRows, no_rows
from pipeline.pool import Pool

KEY = dict(category="qa", turn=0, decoder="root-draw", temperature=1.0, budget=4, seed=0)
RESAMPLING = dict(n_resamples=300, confidence=0.95, seed=0)
POOL = Pool.from_edges(np.array([5, 6, 7]), np.array([-1, -1, 0]), np.log([0.6, 0.3, 0.5]), np.array([1, 0, 0], bool))


def retained(rows: list[tuple[str, float, bool, bool, int]]) -> RetainedRows:
    """Rows (kind, tv, agree, on path, age), each with made-up log-probabilities at the two first-level tokens."""
    if not rows:
        return no_rows(2)
    kind, tv, agree, on_path, age = zip(*rows)
    return RetainedRows(kind=np.array([ROW_KINDS.index(k) for k in kind]), tv=np.array(tv, np.float32),
                        agree=np.array(agree), on_path=np.array(on_path), age=np.array(age),
                        logp=np.log(np.full((len(rows), 2), 0.4, np.float32)))


def rnd(rows, prefix_root: int = 0, own: tuple[float, int] = (math.nan, -1)) -> RecordedRound:
    return RecordedRound(budget=4, accepted=0, emitted=np.array([6]), pool=POOL, edge=np.array([0.5, 0.2, 0.4]),
                         root=6, position=0, root_argmax=5, root_entropy=1.0, first_soft=np.array([0.5, 0.2]),
                         own_tv=own[0], own_agree=own[1], prefix_root=prefix_root, rows=retained(rows))


def decodes() -> list[RecordedDecode]:
    """Three prompts; each decode's first round holds no rows (prefix_root -1)."""
    a = [rnd([], -1, (0.01, 1)),
         rnd([("matched", 0.001, True, False, -1), ("token-only", 0.5, False, True, -1),
              ("token-only", 0.3, True, False, -1), ("cache", 0.2, True, False, 2), ("preceding", 0.9, False, False, -1)],
             2, (0.02, 1)),
         rnd([("token-only", 0.4, True, False, -1), ("same-token", 0.25, True, False, -1),
              ("preceding", 0.8, False, False, -1)], 1, (0.03, 0))]
    b = [rnd([], -1), rnd([("cache", 0.6, False, False, 5), ("preceding", 0.95, False, False, -1)], 0),
         rnd([("matched", 0.003, True, False, -1), ("preceding", 0.7, True, False, -1)], 0)]
    c = [rnd([], -1, (0.05, 1)), rnd([("token-only", 0.2, True, True, -1), ("preceding", 0.85, False, False, -1)], 1,
                                     (0.04, 1))]
    return [RecordedDecode({**KEY, "prompt_id": p}, rounds) for p, rounds in zip("abc", (a, b, c))]


def by_hand(found: list[RecordedDecode], row: str) -> dict:
    rounds = [r for d in found for r in d.rounds]
    if row == "own-root":
        counted = rounds
        picked = [[(r.own_tv, r.own_agree == 1)] if r.own_agree >= 0 else [] for r in rounds]
    else:
        counted = [r for r in rounds if r.prefix_root >= 0]
        kind = "token-only" if row.startswith("token-only") else row
        path = {"token-only-on-path": [True], "token-only-off-path": [False]}.get(row, [True, False])
        picked = [[(float(t), bool(a)) for k, t, a, p in zip(r.rows.kind, r.rows.tv, r.rows.agree, r.rows.on_path)
                   if ROW_KINDS[k] == kind and bool(p) in path] for r in counted]
    tvs = [t for rows in picked for t, _ in rows]
    return {"rounds": len(counted), "rows": len(tvs), "available": sum(bool(p) for p in picked) / len(counted),
            "mean_tv": np.mean(tvs) if tvs else math.nan, "median_tv": np.median(tvs) if tvs else math.nan,
            "agreement": np.mean([a for rows in picked for _, a in rows]) if tvs else math.nan}


@pytest.mark.parametrize("row", ROWS)
def test_every_agreement_figure_is_the_one_computed_from_the_reductions(row):
    found = decodes()
    got = RowStudy(1.0, found, RESAMPLING).agreement(row)
    want = by_hand(found, row)
    assert (got.rounds, got.rows) == (want["rounds"], want["rows"])
    for name in ("available", "mean_tv", "median_tv", "agreement"):
        e = getattr(got, name)
        if math.isnan(want[name]):
            assert math.isnan(e.value), name
        else:
            assert e.value == pytest.approx(want[name], abs=1e-6), name
            assert e.low <= e.value + 1e-9 and e.value <= e.high + 1e-9, name


def test_match_rates_count_the_rounds_that_follow_a_recorded_round():
    """Of the five rounds after a first round: the tree held the root token in three (prefix_root > 0), a pass
    scored it in four (a matched or token-only row), the emitted address in two (a matched row)."""
    study = RowStudy(1.0, decodes(), RESAMPLING)
    assert study.eligible == 5
    found = study.matches()
    assert found["token-tree"].value == pytest.approx(3 / 5)
    assert found["token-scored"].value == pytest.approx(4 / 5)
    assert found["address"].value == pytest.approx(2 / 5)


def test_intervals_are_the_same_under_the_same_seed():
    a, b = (RowStudy(1.0, decodes(), RESAMPLING) for _ in range(2))
    assert [a.agreement(row) for row in ROWS] == [b.agreement(row) for row in ROWS]


def test_weighted_medians_are_numpys_median_of_the_values_repeated():
    rng = np.random.default_rng(3)
    values = np.sort(rng.random(9))
    weights = rng.integers(0, 4, (50, 9)).astype(float)
    weights[0] = 1.0
    got = weighted_medians(values, weights)
    for w, m in zip(weights, got):
        repeated = np.repeat(values, w.astype(int))
        assert m == pytest.approx(np.median(repeated)) if len(repeated) else math.isnan(m)


def test_rounds_without_rows_give_no_figures():
    """Schema 1 recordings (prefix_root -1 everywhere) hold no round that could have rows."""
    found = [RecordedDecode({**KEY, "prompt_id": "a"}, [rnd([], -1), rnd([], -1)])]
    study = RowStudy(1.0, found, RESAMPLING)
    assert study.eligible == 0
    matched = study.agreement("matched")
    assert matched.rounds == 0 and matched.rows == 0 and math.isnan(matched.mean_tv.value)
