"""The selection figures beyond each rule's value (the paper's Figure 2 and Tables 9, 11-13, 15, 18, 29): depth-d
selection, each rule's expected tree size, every rule restricted to the M best candidates, and the PEARL-style
tree's size under a raised pre-draw budget; per round at every budget, and the statistics built on them (the
matched PEARL baseline and the budgets that reach a value, redone in every prompt resample).

A round's figures are curves over budgets 1..N (its pool's size); a caller keeps them at its reported budgets
and, for the names in FULL, sums them per prompt at every budget, which is what a search over budgets needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluation.stats import resample_counts
from pipeline.select import root_order, top1
from pipeline.value import SIZES, Curve, Scored, pearl_exceeds, value_depth

RESTRICTED = (59, 100, 200, 400)  # M: every rule restricted to the M highest-ranked candidates (and the pool)
RESTRICTED_RULES = ("draft", "root", "oracle")
EXCEEDS = (8, 59)  # budgets B at which the matched PEARL's trees holding more than B nodes are counted
# Curves kept per prompt at every budget: what a search over budgets (Table 13, the matched PEARL) resamples.
FULL = ("draft", "root", "pearl", "root-draw", "size:pearl", "size:root-draw", *(f"exceeds-{b}:pearl" for b in EXCEEDS))


def round_curves(s: Scored, curves: dict[str, Curve], depth: int) -> dict[str, np.ndarray]:
    """Every selection figure of one round at budgets 1..N -> name -> (N,) float64.

    curves: the rules' value curves (pipeline.value), already computed; depth: the deepest pool of the run, so
    that every round has the same depth-d names (a shallower pool's deeper d ranks as its oracle does)."""
    n = len(s.pool)
    out = {}
    for d in range(1, depth + 1):
        out[f"depth-{d}"] = value_depth(s, d).at(np.arange(1, n + 1))
    for rule, sizes in SIZES.items():
        out[f"size:{rule}"] = sizes(s)
    for cap in EXCEEDS:
        out[f"exceeds-{cap}:pearl"] = pearl_exceeds(s, cap)
    orders = {"draft": s.draft, "root": root_order(s.pool, s.edge), "oracle": s.oracle}
    rank = np.empty(n, np.int64)
    rank[s.draft] = np.arange(n)
    for m in RESTRICTED:
        for rule in RESTRICTED_RULES:
            order = orders[rule]
            kept = s.mass[order[rank[order] < m]]  # a prefix of a rule's order, cut to the M best, stays a tree
            out[f"restricted-{m}:{rule}"] = np.cumsum(np.pad(kept, (0, n - len(kept))))
    return out


def first_agrees(s: Scored, root_argmax: int) -> bool:
    """Whether the drafter's most probable first token is the target's most probable token at the root (the
    paper's first-token split, Table 15)."""
    return int(s.pool.token[top1(s.pool)]) == root_argmax


def padded(curve: np.ndarray, n: int) -> np.ndarray:
    """(n,) a curve over budgets 1..len(curve) extended to budgets 1..n: a budget past the pool keeps it all."""
    return curve if len(curve) >= n else np.concatenate([curve, np.full(n - len(curve), curve[-1])])


# -- statistics over resampled prompts ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Matched:
    """`root-draw` against a PEARL whose pre-draw budget is raised until its expected tree size is root-draw's
    (the paper's Table 12 and D.13), the matching redone in every resample."""

    budget: int
    raised: float  # the pre-draw budget, mixing the two whole budgets around it
    pearl_size: float  # expected nodes of the matched PEARL (root-draw's, by construction)
    root_draw_size: float
    gain: float  # root-draw's value over the matched PEARL's, minus 1
    low: float
    high: float
    exceeds: float  # expected share of rounds whose matched PEARL tree holds more than `budget` nodes (nan: not kept)


def match_pearl(full: dict[str, np.ndarray], rounds: np.ndarray, counts: np.ndarray, budget: int,
                tail: float) -> Matched:
    """full: per-prompt totals (P, N) of FULL's curves; rounds: (P,) rounds per prompt; counts: (n_res, P)
    resampled prompt counts; tail: (1 - confidence) / 2."""
    def stat(weights: np.ndarray) -> tuple[np.ndarray, ...]:
        """weights (W, P) -> per weighting (W,): gain, raised budget, sizes, exceed share."""
        r = weights @ rounds
        mean = {name: (weights @ full[name]) / r[:, None] for name in FULL if name in full}
        target = mean["size:root-draw"][:, budget - 1]
        size = mean["size:pearl"]  # (W, N), non-decreasing in the budget
        b = np.clip((size < target[:, None]).sum(1), 1, size.shape[1] - 1)  # size[b-1] < target <= size[b]
        rows = np.arange(len(b))
        lo, hi = size[rows, b - 1], size[rows, b]
        lam = np.clip(np.where(hi > lo, (hi - target) / np.where(hi > lo, hi - lo, 1.0), 0.0), 0.0, 1.0)

        def mix(name: str) -> np.ndarray:  # the two budgets around the match, weighted to its size
            return lam * mean[name][rows, b - 1] + (1 - lam) * mean[name][rows, b]

        gain = mean["root-draw"][:, budget - 1] / mix("pearl") - 1
        exceeds = mix(f"exceeds-{budget}:pearl") if f"exceeds-{budget}:pearl" in mean else np.full(len(b), np.nan)
        return gain, b + (1 - lam), mix("size:pearl"), target, exceeds

    gain, raised, size, target, exceeds = stat(np.ones((1, len(rounds))))
    boot = stat(counts)[0]
    low, high = np.nanquantile(boot, [tail, 1 - tail])
    return Matched(budget, float(raised[0]), float(size[0]), float(target[0]), float(gain[0]), float(low),
                   float(high), float(exceeds[0]))


def reach_budgets(full: dict[str, np.ndarray], rounds: np.ndarray, counts: np.ndarray, rule: str, target: str,
                  budget: int, tail: float) -> tuple[int | None, float, float]:
    """The smallest budget at which `rule`'s mean value per round reaches `target`'s at `budget`, searching
    every budget up to the pool, with its percentile interval from the search redone in every resample (a
    resample that never reaches counts as beyond the pool) -> (budget or None, low, high)."""
    def search(weights: np.ndarray) -> np.ndarray:
        r = weights @ rounds
        have, goal = (weights @ full[rule]) / r[:, None], (weights @ full[target])[:, budget - 1] / r
        hit = have >= goal[:, None] - 1e-12
        return np.where(hit.any(1), hit.argmax(1) + 1, full[rule].shape[1] + 1).astype(np.float64)

    point = int(search(np.ones((1, len(rounds))))[0])
    low, high = np.quantile(search(counts), [tail, 1 - tail])
    return (point if point <= full[rule].shape[1] else None), float(low), float(high)


def matched_cap(full: dict[str, np.ndarray], rounds: np.ndarray, budget: int = 59) -> int | None:
    """The smallest `root-draw` cap whose mean expected tree size reaches `pearl`'s at `budget` (the paper's
    Table 29 from recorded rounds), or None when no cap does."""
    r = rounds.sum()
    size_rd, size_pearl = full["size:root-draw"].sum(0) / r, full["size:pearl"].sum(0) / r
    hit = np.flatnonzero(size_rd >= size_pearl[budget - 1] - 1e-12)
    return int(hit[0]) + 1 if len(hit) else None


def entropy_quintiles(entropy: np.ndarray, gain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rounds split into quintiles of the root row's entropy (over the rounds given) -> ((5,) mean gain per
    quintile, lowest first, (5,) rounds in each). Ties go to the lower quintile."""
    edges = np.quantile(entropy, [0.2, 0.4, 0.6, 0.8])
    which = np.searchsorted(edges, entropy, side="left")
    counts = np.bincount(which, minlength=5)
    sums = np.bincount(which, weights=gain, minlength=5)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts, counts


def stratified_counts(groups: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, P) prompt counts resampled within each group of prompts (groups: (P,) labels): every
    resample keeps each group's size."""
    counts = np.zeros((n_resamples, len(groups)))
    for i, g in enumerate(np.unique(groups)):
        members = np.flatnonzero(groups == g)
        counts[:, members] = resample_counts(np.random.default_rng(seed + i), n_resamples, len(members))
    return counts


def task_weighted_gain(a: np.ndarray, b: np.ndarray, rounds: np.ndarray, groups: np.ndarray, counts: np.ndarray,
                       tail: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gain of totals `a` over `b` ((P, K) per-prompt sums, rounds (P,)) with every group weighted the same:
    each group's value per round, averaged over the groups -> (point, low, high), each (K,); counts: resampled
    within groups (stratified_counts)."""
    def stat(weights: np.ndarray) -> np.ndarray:  # (W, P) -> (W, K)
        va, vb = [], []
        for g in np.unique(groups):
            m = groups == g
            r = weights[:, m] @ rounds[m]
            va.append((weights[:, m] @ a[m]) / r[:, None])
            vb.append((weights[:, m] @ b[m]) / r[:, None])
        return np.mean(va, 0) / np.mean(vb, 0) - 1

    point = stat(np.ones((1, len(rounds))))[0]
    low, high = np.nanquantile(stat(counts), [tail, 1 - tail], axis=0)
    return point, low, high
