"""The selection figures beyond each rule's value (the paper's Figure 2 and Tables 9, 11-13, 15, 18, 29): depth-d
selection, each rule's expected tree size, every rule restricted to the M best candidates, and the PEARL-style
tree's size under a raised pre-draw budget; per round as curves over budgets 1..N, and the statistics built on
them (the matched PEARL baseline and the budgets that reach a value, redone in every prompt resample)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from evaluation.stats import resample_counts
from pipeline.select import root_order, top1
from pipeline.value import SIZES, Curve, Scored, pearl_exceeds, pearl_top1_exceeds, top1_kept, value_depth

RESTRICTED = (59, 100, 200, 400)  # M: every rule restricted to the M highest-ranked candidates (and the pool)
RESTRICTED_RULES = ("draft", "root", "oracle")
EXCEEDS = (8, 59)  # budgets B at which the matched PEARL's trees holding more than B nodes are counted
PEARLS = ("pearl", "pearl-top1")  # the PEARL variants; the stronger at a budget is raised to root-draw's size
DRAWN = (*PEARLS, "root-draw")  # the rules whose trees are split by the kind of draw (Table 12)
# Curves kept per prompt at every budget: what a search over budgets (Table 13, the matched PEARL) resamples.
# top1-size:RULE is the expected tree size counted only where X1 is the drafter's most probable first token;
# draw:top1 and draw:off the probabilities that X1 is that token and that it is off the pool's first level.
FULL = ("draft", "root", *DRAWN, *(f"size:{rule}" for rule in DRAWN), *(f"top1-size:{rule}" for rule in DRAWN),
        *(f"exceeds-{b}:{rule}" for b in EXCEEDS for rule in PEARLS), "draw:top1", "draw:off")


def round_curves(s: Scored, curves: dict[str, Curve], depth: int) -> dict[str, np.ndarray]:
    """Every selection figure of one round at budgets 1..N -> name -> (N,) float64.
    curves: the rules' value curves (pipeline.value), already computed; depth: the deepest pool of the run, so that
    every round has the same depth-d names (a shallower pool's deeper d ranks as its oracle does)."""
    n = len(s.pool)
    out = {}
    for d in range(1, depth + 1):
        out[f"depth-{d}"] = value_depth(s, d).at(np.arange(1, n + 1))
    for rule, sizes in SIZES.items():
        out[f"size:{rule}"] = sizes(s)
    for cap in EXCEEDS:
        out[f"exceeds-{cap}:pearl"] = pearl_exceeds(s, cap)
        out[f"exceeds-{cap}:pearl-top1"] = pearl_top1_exceeds(s, cap)
    out.update(top1_sizes(s))
    out["draw:top1"], out["draw:off"] = np.full(n, s.edge[top1(s.pool)]), np.full(n, s.off_pool)
    orders = {"draft": s.draft, "root": root_order(s.pool, s.edge), "oracle": s.oracle}
    rank = np.empty(n, np.int64)
    rank[s.draft] = np.arange(n)
    for m in RESTRICTED:
        for rule in RESTRICTED_RULES:
            order = orders[rule]
            kept = s.mass[order[rank[order] < m]]  # a prefix of a rule's order, cut to the M best, stays a tree
            out[f"restricted-{m}:{rule}"] = np.cumsum(np.pad(kept, (0, n - len(kept))))
    return out


def top1_sizes(s: Scored) -> dict[str, np.ndarray]:
    """DRAWN -> (N,) each rule's expected tree size at budgets 1..N counted only where the draw X1 is the
    drafter's most probable first token u (the paper splits the trees by the kind of draw): m(u) times the
    nodes kept after that draw. `root-draw` and `pearl-top1` keep u with up to B - 1 of its descendants,
    `pearl` u with its descendants among `draft`'s first B candidates."""
    u, kept = top1_kept(s)
    beneath = s.edge[u] * kept
    inside = (s.pool.top[s.draft] == u) & (s.pool.depth[s.draft] > 1)
    return {"top1-size:root-draw": beneath, "top1-size:pearl-top1": beneath.copy(),
            "top1-size:pearl": s.edge[u] * (1.0 + np.cumsum(inside))}


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
    """`root-draw` against a PEARL variant (`baseline`, one of PEARLS: the stronger at the budget) whose
    pre-draw budget is raised until its expected tree size is root-draw's (the paper's Table 12 and D.13), the
    matching redone in every resample; and both trees' mean sizes after each kind of draw."""

    budget: int
    raised: float  # the pre-draw budget, mixing the two whole budgets around it
    pearl_size: float  # expected nodes of the raised baseline (root-draw's, by construction)
    root_draw_size: float
    gain: float  # root-draw's value over the raised baseline's, minus 1
    low: float
    high: float
    exceeds: float  # expected share of rounds whose raised tree holds more than `budget` nodes (nan: not kept)
    baseline: str = "pearl"
    top1_share: float = float("nan")  # the probability that X1 is the drafter's most probable first token
    # mean nodes after that draw, and after a draw of another first-level token (nan: no such draw)
    after_top1: float = float("nan")
    after_other: float = float("nan")
    root_draw_after_top1: float = float("nan")
    root_draw_after_other: float = float("nan")


def match_pearl(full: dict[str, np.ndarray], rounds: np.ndarray, counts: np.ndarray, budget: int,
                tail: float, baseline: str = "pearl") -> Matched:
    """full: per-prompt totals (P, N) of FULL's curves; rounds: (P,) rounds per prompt; counts: (n_res, P)
    resampled prompt counts; tail: (1 - confidence) / 2; baseline: the PEARL variant raised (PEARLS). Where even
    the baseline's tree over the whole pool is smaller than root-draw's, nothing matches: NaN figures (and a
    resample short of a match leaves the interval)."""
    def stat(weights: np.ndarray):
        """weights (W, P) -> per weighting (W,): the gain, the budget column b and the weight lam of the two
        whole budgets around the match, and the mean curves (name -> (W, N), computed when asked for)."""
        r = weights @ rounds
        means: dict[str, np.ndarray] = {}

        def mean(name: str) -> np.ndarray:
            if name not in means:
                means[name] = (weights @ full[name]) / r[:, None]
            return means[name]

        target = mean("size:root-draw")[:, budget - 1]
        size = mean(f"size:{baseline}")  # (W, N), non-decreasing in the budget
        b = np.clip((size < target[:, None]).sum(1), 1, size.shape[1] - 1)  # size[b-1] < target <= size[b]
        rows = np.arange(len(b))
        lo, hi = size[rows, b - 1], size[rows, b]
        lam = np.clip(np.where(hi > lo, (hi - target) / np.where(hi > lo, hi - lo, 1.0), 0.0), 0.0, 1.0)

        def mix(name: str) -> np.ndarray:  # the two budgets around the match, weighted to its size
            return lam * mean(name)[rows, b - 1] + (1 - lam) * mean(name)[rows, b]

        short = size[:, -1] < target * (1 - 1e-9)  # even the whole pool keeps smaller trees: no match
        gain = np.where(short, np.nan, mean("root-draw")[:, budget - 1] / mix(baseline) - 1)
        return gain, np.where(short, np.nan, b + (1 - lam)), mix, mean

    gain, raised, mix, mean = stat(np.ones((1, len(rounds))))
    if not np.isfinite(gain[0]):
        nan = float("nan")
        return Matched(budget, nan, nan, float(mean("size:root-draw")[0, budget - 1]), nan, nan, nan, nan, baseline)
    boot = stat(counts)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # every resample short of a match: no interval
        low, high = np.nanquantile(boot, [tail, 1 - tail])
    exceeds = mix(f"exceeds-{budget}:{baseline}")[0] if f"exceeds-{budget}:{baseline}" in full else np.nan
    top1, off = float(mean("draw:top1")[0, 0]), float(mean("draw:off")[0, 0])
    size, after = float(mix(f"size:{baseline}")[0]), float(mix(f"top1-size:{baseline}")[0])
    rd_size, rd_after = (float(mean(name)[0, budget - 1]) for name in ("size:root-draw", "top1-size:root-draw"))
    other = 1.0 - off - top1  # the probability of a draw of another first-level token
    split = lambda whole, part: (part / top1 if top1 > 0 else np.nan,  # noqa: E731
                                 (whole - off - part) / other if other > 1e-12 else np.nan)
    (after_top1, after_other), (rd_top1, rd_other) = split(size, after), split(rd_size, rd_after)
    return Matched(budget, float(raised[0]), size, rd_size, float(gain[0]), float(low), float(high), float(exceeds),
                   baseline, top1, float(after_top1), float(after_other), float(rd_top1), float(rd_other))


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


def quintiles(entropy: np.ndarray) -> np.ndarray:
    """(R,) each round's quintile of the root row's entropy over the rounds given, 0 the lowest; ties go to the
    lower quintile."""
    return np.searchsorted(np.quantile(entropy, [0.2, 0.4, 0.6, 0.8]), entropy, side="left")


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
