"""Every rule's value at every budget of one recorded round (the expected number of accepted tokens under
exhaustive target sampling of the tree the rule keeps), as prefix sums along the rule's order; and each rule's
expected tree size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.pool import ROOT, Pool
from pipeline.select import depth_order, descendants_order, draft_order, log_path_mass, rank, root_order, top1


# -- every rule's value at every budget, from one recorded round (DESIGN.md section 8) -------------------


class Scored:
    """One recorded round: its pool and the target's probability of every pool edge at the run's temperature (at T = 0
    the greedy point mass: 1 where the candidate's token is the target's argmax after its path, else 0). A first-level
    edge's probability is the root row's at that token.
    edge: (N,) float64. mass: (N,) the path mass m(v), the product of edge probabilities down to v."""

    def __init__(self, pool: Pool, edge_probs: np.ndarray) -> None:
        self.pool = pool
        self.edge = np.minimum(np.asarray(edge_probs, np.float64), 1.0)  # float32 rounding may pass 1
        self.mass = path_mass(pool, self.edge)
        self._draft: np.ndarray | None = None
        self._oracle: np.ndarray | None = None
        self._log_mass: np.ndarray | None = None

    @property
    def draft(self) -> np.ndarray:
        """(N,) the draft order, computed once (most rules read it)."""
        if self._draft is None:
            self._draft = draft_order(self.pool)
        return self._draft

    @property
    def log_mass(self) -> np.ndarray:
        """(N,) float64 log path mass, computed once (the oracle's order and the depth-d rules read it)."""
        if self._log_mass is None:
            self._log_mass = log_path_mass(self.pool, self.edge)
        return self._log_mass

    @property
    def oracle(self) -> np.ndarray:
        """(N,) the order by target path mass, computed once (both ceilings read it)."""
        if self._oracle is None:
            self._oracle = rank(self.log_mass, self.pool.depth)
        return self._oracle

    @property
    def off_pool(self) -> float:
        """Probability that the root's draw X1 is not on the pool's first level."""
        return max(0.0, 1.0 - float(self.edge[self.pool.parent == ROOT].sum()))


@dataclass(frozen=True, slots=True)
class Curve:
    """A rule's value at every budget of one round: V(B) = base + gains[:B].sum(). gains[i] is what the i-th node of the
    budget adds in expectation (for the draw rules, summed over the draws X1, each draw's tree being a prefix of its own
    order); base is what every tree holds whatever its size (1 for the draw rules: X1 counts as accepted)."""

    base: float
    gains: np.ndarray  # (N,) float64

    def at(self, budgets) -> np.ndarray:
        """(len(budgets),) V at each budget (>= 1); a budget beyond the pool keeps the whole pool."""
        cum = np.cumsum(self.gains)
        return self.base + cum[np.minimum(np.asarray(budgets, np.int64), len(cum)) - 1]


def path_mass(pool: Pool, edge_probs: np.ndarray) -> np.ndarray:
    """(N,) float64 target probability of each candidate's whole path, one vectorized step per depth."""
    mass = np.asarray(edge_probs, np.float64).copy()
    for d in range(2, int(pool.depth.max()) + 1):
        level = np.flatnonzero(pool.depth == d)
        mass[level] *= mass[pool.parent[level]]
    return mass


def value_draft(s: Scored) -> Curve:
    """`draft`: the masses of its order."""
    return Curve(0.0, s.mass[s.draft])


def value_root(s: Scored) -> Curve:
    """`root`: the masses of its order, ranked with the root row in place of the first draft factor."""
    return Curve(0.0, s.mass[root_order(s.pool, s.edge)])


def value_root_draw(s: Scored) -> Curve:
    """`root-draw`: 1 for X1, plus, for each first-level u (drawn with probability m(u)), the conditional
    masses m(v)/m(u) of its B-1 best descendants: summed over u, position by position, the masses of
    each u's descendants in draft order, from budget position 1 on."""
    return Curve(1.0, _beneath(s, s.draft[s.pool.depth[s.draft] > 1]))


def value_pearl(s: Scored) -> Curve:
    """`pearl`: 1 for X1, plus the masses of the strict descendants of X1 inside `draft`'s B-node tree;
    summed over X1, every node of that tree below the first level, in draft order."""
    return Curve(1.0, np.where(s.pool.depth[s.draft] > 1, s.mass[s.draft], 0.0))


def value_pearl_top1(s: Scored) -> Curve:
    """`pearl-top1`: 1 for X1, plus, when X1 is the drafter's top first token u, its B-1 best descendants."""
    below = descendants_order(s.pool, top1(s.pool))
    gains = np.zeros(len(s.pool))
    gains[1: 1 + len(below)] = s.mass[below]
    return Curve(1.0, gains)


def value_oracle(s: Scored) -> Curve:
    """`oracle`: the best ancestor-closed B-node tree by target path mass (the ceiling of fixed trees)."""
    return Curve(0.0, s.mass[s.oracle])


def value_oracle_draw(s: Scored) -> Curve:
    """`oracle-draw`: for each draw X1 = u, u with the B-1 descendants of largest mass (the ceiling of trees
    chosen after the draw, X1 counted as accepted like the draw rules count it)."""
    return Curve(1.0, _beneath(s, s.oracle[s.pool.depth[s.oracle] > 1]))


def _beneath(s: Scored, below: np.ndarray) -> np.ndarray:
    """(N,) position-wise sums over first-level u of the masses of u's descendants, taken in the order of
    `below` (candidates of depth >= 2), placed from position 1 (position 0 is u itself)."""
    top = s.pool.top[below]
    grouped = below[np.argsort(top, kind="stable")]  # each u's descendants together, order kept
    tops = s.pool.top[grouped]
    starts = np.flatnonzero(np.r_[True, tops[1:] != tops[:-1]]) if len(grouped) else np.zeros(0, np.int64)
    runs = np.diff(np.r_[starts, len(grouped)])
    position = np.arange(len(grouped)) - np.repeat(starts, runs)
    return np.bincount(position + 1, weights=s.mass[grouped], minlength=len(s.pool))[: len(s.pool)]


CEILINGS = {"oracle": value_oracle, "oracle-draw": value_oracle_draw}


def value_depth(s: Scored, depth: int) -> Curve:
    """Depth-d selection: the target's exact probabilities for the first `depth` factors of every path, the
    draft's below (pipeline.select.depth_order); 1 ranks as `root`, the pool's depth as `oracle`."""
    return Curve(0.0, s.mass[depth_order(s.pool, s.log_mass, depth)])


# -- expected tree sizes at every budget ----------------------------------------------------------------


def sizes_fixed(s: Scored) -> np.ndarray:
    """(N,) nodes a fixed-tree rule keeps at budgets 1..N: B, up to the pool."""
    return np.arange(1, len(s.pool) + 1, dtype=np.float64)


def sizes_root_draw(s: Scored) -> np.ndarray:
    """(N,) expected nodes of `root-draw` (and `oracle-draw`) at budgets 1..N: the drawn X1 with up to B - 1
    of its descendants, X1 alone when the pool's first level lacks it."""
    first = np.flatnonzero(s.pool.parent == ROOT)
    below = np.bincount(s.pool.top[s.pool.depth > 1], minlength=len(s.pool))[first]  # (k,) descendants of each u
    budgets = np.arange(1, len(s.pool) + 1)
    kept = np.minimum(budgets[:, None], 1 + below[None])  # (N, k)
    return kept @ s.edge[first] + s.off_pool


def sizes_pearl(s: Scored) -> np.ndarray:
    """(N,) expected nodes of `pearl` at pre-draw budgets 1..N: X1 plus its strict descendants inside
    `draft`'s B-node tree (X1 precedes them in the draft order), X1 alone otherwise."""
    deep = s.pool.depth[s.draft] > 1
    return 1.0 + np.cumsum(np.where(deep, s.edge[s.pool.top[s.draft]], 0.0))


def top1_kept(s: Scored) -> tuple[int, np.ndarray]:
    """(the drafter's top first token u, (N,) the nodes a tree of u and up to B - 1 of its descendants keeps at
    budgets 1..N): what `pearl-top1` and `root-draw` keep when the draw X1 is u."""
    u = top1(s.pool)
    below = int(np.count_nonzero((s.pool.top == u) & (s.pool.depth > 1)))
    return u, np.minimum(np.arange(1, len(s.pool) + 1), 1 + below)


def sizes_pearl_top1(s: Scored) -> np.ndarray:
    """(N,) expected nodes of `pearl-top1`: the drafter's top first token with up to B - 1 descendants when X1
    is that token, X1 alone otherwise."""
    u, kept = top1_kept(s)
    return s.edge[u] * kept + (1.0 - s.edge[u])


def pearl_exceeds(s: Scored, cap: int) -> np.ndarray:
    """(N,) the probability that `pearl`'s tree at pre-draw budgets 1..N holds more than `cap` nodes: X1
    = u with more than cap - 1 of its descendants among draft's first B candidates."""
    deep = s.draft[s.pool.depth[s.draft] > 1]  # strict descendants, in draft order
    tops = s.pool.top[deep]
    grouped = np.argsort(tops, kind="stable")
    starts = np.flatnonzero(np.r_[True, tops[grouped][1:] != tops[grouped][:-1]]) if len(deep) else np.zeros(0, int)
    counts = np.diff(np.r_[starts, len(deep)])
    out = np.zeros(len(s.pool) + 1)
    has = counts >= cap  # u whose cap-th descendant exists: at budget past its position the tree exceeds cap
    at = grouped[starts[has] + cap - 1]  # positions in `deep` of each such u's cap-th descendant
    position = np.flatnonzero(s.pool.depth[s.draft] > 1)[at]  # its position in the whole draft order
    np.add.at(out, position + 1, s.edge[tops[grouped][starts[has]]])
    return np.cumsum(out)[1:]


def pearl_top1_exceeds(s: Scored, cap: int) -> np.ndarray:
    """(N,) the probability that `pearl-top1`'s tree at pre-draw budgets 1..N holds more than `cap` nodes: X1
    the drafter's top first token u, kept with more than cap - 1 of its descendants."""
    u, kept = top1_kept(s)
    return s.edge[u] * (kept > cap)


SIZES = {"draft": sizes_fixed, "root": sizes_fixed, "oracle": sizes_fixed, "root-draw": sizes_root_draw,
         "oracle-draw": sizes_root_draw, "pearl": sizes_pearl, "pearl-top1": sizes_pearl_top1}
