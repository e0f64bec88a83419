"""Tree selection with the draft factors replaced (the paper's Tables 19 and 25, Figure 6, Appendix D.12;
DESIGN.md section 13): the first draft factor by a calibrated estimate, a retained row, the exact root row or a
geometric mixture of a row with it; every draft factor by a per-depth calibration. Fits are made on one half of
the prompts (the even- or odd-numbered) and applied to the other, then the halves swap. A substitute or mixture
keeps the draft factor in a round that lacks its row; `exact` is the root row's softmax at the first level (at
T = 0 the softmax at T = 1, the paper's "Exact" column)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.isotonic import IsotonicRegression

from study.retained_rows import holds_rows
from evaluation.rounds import RecordedDecode, RecordedRound
from study.values import PerRound
from pipeline.select import oracle_order, root_order
from pipeline.value import Curve, Scored, value_root

BINS = 200  # equal-count bins of draft probability each calibration map is fitted over
SUBSTITUTES = ("cache", "same-token", "preceding", "exact")
MIXED = ("cache", "same-token", "preceding")
WEIGHTS = (0.25, 0.5, 0.75)  # a retained row's weight in its geometric mixture with the first draft factor


@dataclass(slots=True)
class StudyRounds:
    """One temperature's recorded rounds in the values program's prompt order, with what the controls and
    rerankers read of them."""

    table: PerRound  # prompts, categories, each round's prompt; `values` filled by the callers
    rounds: list[RecordedRound]
    scored: list[Scored]
    half: np.ndarray  # (R,) 0 for an even-numbered prompt, 1 for an odd-numbered one
    previous: np.ndarray  # (R,) accepted nodes of the decode's recorded round before (NaN for its first)
    prompt_tokens: np.ndarray  # (R,) the decode's context length (NaN: not recorded)

    @property
    def splits(self) -> bool:
        """Both halves hold prompts, so fits can be made."""
        return len(self.table.prompts) >= 2

    def first_half(self) -> np.ndarray:
        """(n,) the half of every first-level candidate, rounds in order, pool order within a round."""
        return np.repeat(self.half, [len(r.first) for r in self.rounds])


def study_rounds(temperature: float, decodes: Sequence[RecordedDecode], budgets) -> StudyRounds:
    """The rounds of `decodes` (one temperature's, as study.values.by_temperature orders them)."""
    table = PerRound.of(temperature, decodes, budgets)
    rounds, previous, tokens = [], [], []
    for d in decodes:
        rounds += d.rounds
        previous += [np.nan] + [float(r.accepted) for r in d.rounds[:-1]]
        tokens += [float(d.prompt_tokens) if d.prompt_tokens >= 0 else np.nan] * len(d.rounds)
    return StudyRounds(table, rounds, [r.scored() for r in rounds], table.prompt % 2, np.array(previous),
                       np.array(tokens))


def cross_fit(half: np.ndarray, fit: Callable[[np.ndarray], Callable[[np.ndarray], np.ndarray]]) -> np.ndarray:
    """(n,) figures for n items, each half's from a fit on the other: fit(train mask) returns a function of the
    test mask giving the figures of the test items."""
    out = np.zeros(len(half))
    for h in (0, 1):
        test = half == h
        if test.any():
            out[test] = fit(~test)(test)
    return out


class BinnedIsotonic:
    """An increasing map from draft probability to target probability: isotonic regression over the means of
    BINS equal-count bins of draft probability (each weighted by its count), clipped to [0, 1]."""

    def __init__(self, x: np.ndarray, y: np.ndarray, bins: int = BINS) -> None:
        order = np.argsort(x, kind="stable")
        n = len(x)
        sizes = np.full(min(bins, n), n // min(bins, n))
        sizes[: n % len(sizes)] += 1  # as np.array_split: the first bins one larger
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        self.x = np.add.reduceat(x[order], starts) / sizes  # (bins,) each bin's mean draft probability
        self.y = np.add.reduceat(y[order], starts) / sizes  # ... and mean target probability
        self.weight = sizes
        self.map = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        self.map.fit(self.x, self.y, sample_weight=sizes)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self.map.predict(x)


def calibrated(x: np.ndarray, y: np.ndarray, half: np.ndarray) -> np.ndarray:
    """(n,) each item's draft probability x mapped by the BinnedIsotonic of the other half's (x, y); an item
    whose other half holds nothing to fit keeps x."""
    def fit(train: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        if not train.any():
            return lambda test: x[test]
        m = BinnedIsotonic(x[train], y[train])
        return lambda test: m(x[test])

    return cross_fit(half, fit)


def isotonic_first(s: StudyRounds) -> list[np.ndarray]:
    """Per round (k,): the first draft factor of each first-level candidate, calibrated on the other half."""
    x = np.concatenate([np.exp(r.pool.logp[r.first].astype(np.float64)) for r in s.rounds])
    y = np.concatenate([sc.edge[r.first] for r, sc in zip(s.rounds, s.scored)])
    return _split(calibrated(x, y, s.first_half()), s.rounds)


def per_depth_edges(s: StudyRounds) -> list[np.ndarray]:
    """Per round (N,): every candidate's draft factor calibrated by the map of its depth, fitted on the other
    half's candidates of that depth."""
    x = np.concatenate([np.exp(r.pool.logp.astype(np.float64)) for r in s.rounds])
    y = np.concatenate([sc.edge for sc in s.scored])
    depth = np.concatenate([r.pool.depth for r in s.rounds])
    half = np.repeat(s.half, [len(r.pool) for r in s.rounds])
    out = np.empty(len(x))
    for d in np.unique(depth):
        at = depth == d
        out[at] = calibrated(x[at], y[at], half[at])
    return np.split(out, np.cumsum([len(r.pool) for r in s.rounds])[:-1])


def row_logp(rnd: RecordedRound, kind: str) -> np.ndarray | None:
    """(k,) a retained row's log-probabilities at the round's first-level tokens (`exact`: the root row's
    softmax), or None when the round lacks it."""
    if kind == "exact":
        soft = rnd.first_soft
        return None if soft is None or not np.all(np.isfinite(soft)) else np.log(np.maximum(soft, 0.0))
    if not holds_rows(rnd):
        return None
    at = rnd.rows.of(kind)
    return rnd.rows.logp[at[0]].astype(np.float64) if len(at) else None


def mixed_first(rnd: RecordedRound, kind: str, weight: float) -> np.ndarray:
    """(k,) the first factor q1^(1 - w) p^w of a row p with weight w (1: the row itself), or q1 without it."""
    q = rnd.pool.logp[rnd.first].astype(np.float64)
    p = row_logp(rnd, kind)
    return np.exp(q if p is None else weight * p + (1 - weight) * q)  # the preceding row's -inf stays -inf


def first_values(s: StudyRounds, firsts: Sequence[np.ndarray], budgets: np.ndarray) -> np.ndarray:
    """(R, K) the value at each budget of the tree ranked with each round's first-level factors (k,)."""
    out = np.empty((len(s.rounds), len(budgets)))
    for i, (rnd, sc, first) in enumerate(zip(s.rounds, s.scored, firsts)):
        probs = np.zeros(len(rnd.pool))
        probs[rnd.first] = first
        out[i] = Curve(0.0, sc.mass[root_order(sc.pool, probs)]).at(budgets)
    return out


def edge_values(s: StudyRounds, edges: Sequence[np.ndarray], budgets: np.ndarray) -> np.ndarray:
    """(R, K) the value at each budget of the tree ranked by the products of each round's factors (N,)."""
    return np.array([Curve(0.0, sc.mass[oracle_order(sc.pool, e)]).at(budgets) for sc, e in zip(s.scored, edges)])


def base_values(s: StudyRounds, budgets: np.ndarray) -> dict[str, np.ndarray]:
    """`draft` and `root`: (R, K) each."""
    return {"draft": np.array([Curve(0.0, sc.mass[sc.draft]).at(budgets) for sc in s.scored]),
            "root": np.array([value_root(sc).at(budgets) for sc in s.scored])}


def chosen_weight(values: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """values (W, R, K): each weight's value at every round and budget -> (R, K) each half's values at the
    weight whose mean value per round is highest on the other half (budget by budget; the smaller weight on a
    tie), and (2, K) the index of the weight each half got."""
    out = np.empty(values.shape[1:])
    picks = np.zeros((2, values.shape[2]), np.int64)
    for h in (0, 1):
        test = half == h
        picks[h] = np.argmax(values[:, ~test].mean(1), axis=0)
        for k, w in enumerate(picks[h]):
            out[test, k] = values[w, test, k]
    return out, picks


def _split(flat: np.ndarray, rounds: Sequence[RecordedRound]) -> list[np.ndarray]:
    """Per round, its first-level candidates' entries of `flat` (rounds in order)."""
    return np.split(flat, np.cumsum([len(r.first) for r in rounds])[:-1])

