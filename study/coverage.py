"""Coverage on recorded rounds (DESIGN.md section 12; the paper's Theorems 1-2, Tables 1 and 21): for every
rule's tree, every scored set containing it and every stopping rule, exactly, the probability that the pass
scored the continuation's address, the expected accepted tokens and the shortfall from exhaustive traversal of
the scored trie, at every budget at once.

Each event a stopping rule turns on is an interval of budgets per candidate, so each figure is a sum of path
masses over intervals (one count, then a running sum over the budgets); only the first frontier candidates in
draft order take a (candidates, budgets) mask. The draw rules' trees are merged into one trie in which every
first-level candidate u heads its own draw's tree: a candidate v beneath u weighs m(u) * m(v) / m(u) = m(v),
so summing path masses over it takes the expectation over X1 = u."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from evaluation.rounds import RecordedDecode
from study.values import BUDGETS, VALUED, Averages, by_temperature
from pipeline.pool import ROOT
from pipeline.select import descendants_order, root_order, top1
from pipeline.value import Scored
from pipeline.verify import STOPPINGS, Stopping

SCORED_TOP = 100  # M: the tree and the M highest-ranked pool candidates in draft order
SCORED_FRONTIER = 40  # N: the tree and its first N frontier candidates in draft order
NEVER = np.iinfo(np.int64).max // 4  # the rank of a candidate no tree of the rule holds
CAPS = tuple(sorted({s.cap for s in STOPPINGS.values() if s.cap is not None}))


def scored_names(top: int = SCORED_TOP, frontier: int = SCORED_FRONTIER) -> tuple[str, ...]:
    """The scored sets, each containing the tree: the tree alone, with the `top` highest-ranked candidates,
    with the first `frontier` frontier candidates, with the whole frontier, the whole pool."""
    return ("tree", f"top-{top}", f"frontier-{frontier}", "frontier", "pool")


# -- each rule's tree at every budget, as ranks -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Member:
    """A rule's trees at every budget of one round: candidate v is in the tree at budget B when rank[v] < B.
    rank: (N,) int64, a parent's below its children's. drawn: a draw rule (its first level all rank 0, each candidate's
    tree the one beneath the draw of its first-level ancestor)."""

    rank: np.ndarray
    drawn: bool


def _inverse(order: np.ndarray) -> np.ndarray:
    """(N,) each candidate's place in `order`, a permutation of the pool."""
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank


def _beneath(s: Scored, order: np.ndarray) -> np.ndarray:
    """(N,) ranks of the trees beneath each draw: first level 0, a deeper candidate its 1-based place among
    the descendants of its first-level ancestor in `order` (a permutation of the pool)."""
    below = order[s.pool.depth[order] > 1]
    grouped = below[np.argsort(s.pool.top[below], kind="stable")]  # each draw's descendants, order kept
    tops = s.pool.top[grouped]
    starts = np.flatnonzero(np.r_[True, tops[1:] != tops[:-1]]) if len(grouped) else np.zeros(0, np.int64)
    rank = np.zeros(len(s.pool), np.int64)
    rank[grouped] = np.arange(len(grouped)) - np.repeat(starts, np.diff(np.r_[starts, len(grouped)])) + 1
    return rank


def _pearl_top1(s: Scored) -> np.ndarray:
    """(N,) `pearl-top1`: the drafter's top first token with its descendants in draft order; any other draw
    is verified alone."""
    rank = np.where(s.pool.depth > 1, NEVER, 0)
    below = descendants_order(s.pool, top1(s.pool))
    rank[below] = np.arange(1, len(below) + 1)
    return rank


# Every valued rule of pipeline.rules and both ceilings (study.values.VALUED), by name.
MEMBERS: dict[str, Callable[[Scored], Member]] = {
    "draft": lambda s: Member(_inverse(s.draft), False),
    "pearl": lambda s: Member(np.where(s.pool.depth > 1, _inverse(s.draft), 0), True),
    "pearl-top1": lambda s: Member(_pearl_top1(s), True),
    "root-draw": lambda s: Member(_beneath(s, s.draft), True),
    "root": lambda s: Member(_inverse(root_order(s.pool, s.edge)), False),
    "oracle": lambda s: Member(_inverse(s.oracle), False),
    "oracle-draw": lambda s: Member(_beneath(s, s.oracle), True),
}


# -- one round ----------------------------------------------------------------------------------------------

LEVELS = max(CAPS) + 2  # depths told apart in sums: 1, 2, ..., LEVELS - 1, and LEVELS or deeper


class _Pool:
    """What every rule's figures read of one round: the budgets, the pool's shape, the masses, the scored sets.
    budgets: (K,) ascending. kind: (N,) each candidate's class in sums, by depth (LEVELS of them) and whether it is
    among the first `top` candidates in draft order. reach: (J, N) the weights summed over the exits that a mask, not a
    sum by class, gives (the first frontier candidates): m, m at depth <= k + 1 for each cap k, and 1 (a count, which a
    draw rule's block replaces by the probability of the candidate's draw)."""

    def __init__(self, s: Scored, budgets: np.ndarray, top: int, frontier: int) -> None:
        pool, m = s.pool, s.mass
        self.n, self.budgets, self.frontier_n, self.off_pool, self.mass = len(pool), budgets, frontier, s.off_pool, m
        self.first, self.parent, self.top = pool.parent == ROOT, np.maximum(pool.parent, 0), pool.top
        in_top = np.zeros(self.n, bool)
        in_top[s.draft[:top]] = True
        self.scored_top = min(top, self.n)
        self.kind = 2 * (np.minimum(pool.depth, LEVELS) - 1) + in_top
        self.reach = np.stack([m] + [m * (pool.depth <= k + 1) for k in CAPS] + [np.ones(self.n)])
        kids = np.flatnonzero(~self.first)
        self.kids = kids[np.argsort(pool.parent[kids], kind="stable")]  # children grouped by parent
        heads = pool.parent[self.kids]
        self.starts = np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]]) if len(kids) else np.zeros(0, np.int64)
        self.heads = heads[self.starts]
        self.draft = s.draft
        self.by_draw = s.draft[np.argsort(pool.top[s.draft], kind="stable")]  # draft order within each draw
        tops = pool.top[self.by_draw]
        change = np.r_[True, tops[1:] != tops[:-1]]
        self.draw_start = np.maximum.accumulate(np.where(change, np.arange(self.n), 0))  # first place of its draw

    def place(self, bound: np.ndarray) -> np.ndarray:
        """The index of the first budget above each of `bound`'s values (K past the last)."""
        return np.searchsorted(self.budgets, bound, side="right")

    def sums(self, spans: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[np.ndarray]) -> np.ndarray:
        """(W, E, R, K, LEVELS, 2): for each of W (N,) weights and each of E (first, end) spans of (R, N) budget
        indices, at each budget, the sum of the weights of the candidates whose budgets run from `first` to before
        `end`, by depth and by whether in the top set.
        A candidate's budgets are one interval: its weight is added at the interval's first budget and taken off at its
        end (one count over every span at once), and a running sum over the budgets does the rest."""
        first = np.stack([f for f, _ in spans])  # (E, R, N)
        end = np.maximum(np.stack([e for _, e in spans]), first)
        e, r, n = first.shape
        k, c = len(self.budgets), 2 * LEVELS
        row = (k + 1) * np.arange(e * r).reshape(e, r, 1)
        cells = np.concatenate([(row + first) * c + self.kind, (row + end) * c + self.kind], 2).ravel()
        steps = np.stack([np.bincount(cells, np.broadcast_to(np.concatenate([w, -w]), (e, r, 2 * n)).ravel(),
                                      e * r * (k + 1) * c) for w in weights])
        return np.cumsum(steps.reshape(len(weights), e, r, k + 1, LEVELS, 2), 3)[:, :, :, :k]


@dataclass(frozen=True, slots=True)
class _Bounds:
    """A block of rules' trees, (R, N) each: a candidate is in the tree at budget b when rank < b, on its
    frontier when up < b <= rank, has a child in it when first_child < b, and its parent is the root or has a
    child in it when up_open < b (the root's children: up = up_open = -1)."""

    rank: np.ndarray
    up: np.ndarray
    first_child: np.ndarray
    up_open: np.ndarray


def _bounds(p: _Pool, rank: np.ndarray) -> _Bounds:
    first_child = np.full(rank.shape, NEVER)
    if len(p.kids):
        first_child[:, p.heads] = np.minimum.reduceat(rank[:, p.kids], p.starts, axis=1)
    up = np.where(p.first, -1, rank[:, p.parent])
    return _Bounds(rank, up, first_child, np.where(p.first, -1, first_child[:, p.parent]))


def _first_frontier(p: _Pool, t: _Bounds, drawn: bool) -> np.ndarray:
    """(R, N, K) the first p.frontier_n frontier candidates of each tree in draft order (for a draw rule, of the
    tree beneath each draw, whose frontier lies beneath it). Which they are changes with the budget in no
    interval, so this one is a mask over (candidates, budgets)."""
    order = p.by_draw if drawn else p.draft
    b = p.budgets
    f = (t.up[:, order, None] < b) & (t.rank[:, order, None] >= b)
    count = np.cumsum(f, axis=1, dtype=np.int32)
    if drawn:  # less the frontier candidates of the draws placed before
        start = p.draw_start
        count -= np.where(start[:, None] > 0, count[:, np.maximum(start - 1, 0)], 0)
    keep = np.empty_like(f)
    keep[:, order] = f & (count <= p.frontier_n)
    return keep


def _total(x: np.ndarray, top_only: bool = False, depth: int = LEVELS) -> np.ndarray:
    """(R, K) of (R, K, LEVELS, 2) sums by class: over depths up to `depth`, in the top set or all."""
    return x[:, :, :depth, 1 if top_only else 0:].sum((2, 3))


@dataclass(frozen=True, slots=True)
class _Masses:
    """A block's sums: over its trees, and over each scored set's exits (the candidates outside the tree
    where exhaustive traversal ends, their parent in the tree)."""

    tree: np.ndarray  # (R, K) m over the tree
    tree_top: np.ndarray  # (R, K) ... and over its part in the top set
    capped: np.ndarray  # (R, C, K) m over the tree's nodes at depth <= k, for each cap k
    next_level: np.ndarray  # (R, C, K) ... at depth k + 1
    has_child: np.ndarray  # (R, K) m over the tree's nodes with a child in it
    reach: np.ndarray  # (R, S, J, K) _Pool.reach over each scored set's exits
    open_reach: np.ndarray  # (R, S, K) m over the scored exits whose parent is the root or has a child in the tree
    count: np.ndarray  # (R, 2, K) the count (the draw's probability for a draw rule) over the tree, its top part


def _masses(p: _Pool, rank: np.ndarray, drawn: bool) -> _Masses:
    """The sums of a block of rules whose (R, N) ranks are all draw rules' (`drawn`) or all fixed trees'."""
    t = _bounds(p, rank)
    weight = p.mass[p.top] if drawn else np.ones(p.n)  # the probability that the draw makes the candidate's tree
    inside, out, child, opening = (p.place(x) for x in (rank, t.up, t.first_child, t.up_open))
    never = np.full(rank.shape, len(p.budgets))
    (tree, exits, opened, parents), (counted, counted_exits, _, _) = p.sums(
        [(inside, never), (out, inside), (np.maximum(out, opening), inside), (child, never)], [p.mass, weight])

    def rows(top_only: bool) -> np.ndarray:  # (R, J, K) the reach weights over the exits
        return np.stack([_total(exits, top_only)] + [_total(exits, top_only, k + 1) for k in CAPS]
                        + [_total(counted_exits, top_only)], 1)

    keep = _first_frontier(p, t, drawn)
    first = np.concatenate([p.reach[:-1], weight[None]]) @ keep  # (R, J, K)
    first_open = p.mass @ (keep & (t.up_open[..., None] < p.budgets))
    every, none = rows(False), np.zeros_like(first)
    reach = np.stack([none, rows(True), first, every, every], 1)
    opens = np.stack([none[:, 0], _total(opened, True), first_open, _total(opened), _total(opened)], 1)
    capped = np.stack([_total(tree, depth=k) for k in CAPS], 1)
    next_level = np.stack([_total(tree[:, :, k: k + 1]) for k in CAPS], 1)
    return _Masses(_total(tree), _total(tree, True), capped, next_level, _total(parents), reach, opens,
                   np.stack([_total(counted), _total(counted, True)], 1))


@dataclass(frozen=True, slots=True)
class RoundCoverage:
    """One round's figures for rules R, scored sets S (scored_names), stopping rules P (STOPPINGS) and
    budgets K; the draw rules' figures are expectations over the draw X1."""

    coverage: np.ndarray  # (R, S, P, K) probability that the pass scored the continuation's address
    value: np.ndarray  # (R, S, P, K) expected accepted tokens (the draw X1 counted for the draw rules)
    shortfall: np.ndarray  # (R, S, P, K) exhaustive value of the scored trie minus `value`
    added: np.ndarray  # (R, S, K) expected candidates the scored set holds beyond the tree


def _block(p: _Pool, rank: np.ndarray, drawn: bool) -> RoundCoverage:
    """The figures of rules whose (R, N) ranks are all draw rules' (`drawn`) or all fixed trees'."""
    got = _masses(p, rank, drawn)
    off = p.off_pool if drawn else 0.0
    zero = np.zeros_like(got.tree)
    top_mass = p.mass[p.kind % 2 == 1].sum()
    beyond = np.stack([zero, top_mass - got.tree_top, got.reach[:, 2, 0], got.reach[:, 3, 0], p.mass.sum() - got.tree],
                      1)  # (R, S, K): the scored trie's exhaustive value beyond the tree's
    values, covers = [], []
    for stopping in STOPPINGS.values():
        value, cover = _stopping(stopping, off, got)
        values.append(np.broadcast_to(value[:, None], beyond.shape))
        covers.append(np.broadcast_to(cover, beyond.shape))
    value = np.stack(values, 2)
    coverage = np.clip(np.stack(covers, 2), 0.0, 1.0)  # a probability; the running sums round by ~1e-16
    shortfall = (off + got.tree[:, None] + beyond)[:, :, None] - value
    added = np.stack([zero, p.scored_top - got.count[:, 1], got.reach[:, 2, -1], got.reach[:, 3, -1],
                      p.n - got.count[:, 0]], 1)
    return RoundCoverage(coverage, value, shortfall, added)


def _stopping(stopping: Stopping, off: float, got: _Masses) -> tuple[np.ndarray, np.ndarray]:
    """A stopping rule's (R, K) value and (R, S, K) coverage."""
    if stopping.cap is not None and stopping.leaf:
        raise ValueError("coverage has no formula for a cap and sampled-leaf stopping together")
    if stopping.cap is not None:  # accepts the tree's first `cap` levels; the next draw ends the walk
        i = CAPS.index(stopping.cap)
        return off + got.capped[:, i], got.reach[:, :, 1 + i] + got.next_level[:, None, i]
    if stopping.leaf:  # accepts the nodes with a child in the tree; a leaf reached is the covered continuation
        return got.has_child, (got.tree - got.has_child + off)[:, None] + got.open_reach
    return off + got.tree, got.reach[:, :, 0]  # exhaustive: covered exactly when the exit is scored


def round_coverage(s: Scored, budgets: Sequence[int], *, rules: Sequence[str] = tuple(MEMBERS),
                   top: int = SCORED_TOP, frontier: int = SCORED_FRONTIER) -> RoundCoverage:
    """Every figure of one recorded round for `rules` (names of MEMBERS), at `budgets` (K,) at once."""
    for name, count in (("top", top), ("frontier", frontier)):
        if not (isinstance(count, (int, np.integer)) and count >= 0):
            raise ValueError(f"`{name}` must be a count of candidates (an integer >= 0), got {count!r}")
    p = _Pool(s, np.asarray(budgets, np.int64), top, frontier)
    members = [MEMBERS[name](s) for name in rules]
    blocks, places = [], []
    for drawn in (False, True):
        block = [i for i, member in enumerate(members) if member.drawn == drawn]
        if block:
            blocks.append(_block(p, np.stack([members[i].rank for i in block]), drawn))
            places += block
    back = np.argsort(places)  # the rules' places in `rules`
    return RoundCoverage(*(np.concatenate([getattr(b, f.name) for b in blocks])[back] for f in fields(RoundCoverage)))


# -- recorded runs ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CoverageTable:
    """The mean figures per round (all rounds pooled) of one temperature's recorded rounds: a RoundCoverage's
    arrays averaged, rules by `rules`, scored sets by `scored`, stopping rules by STOPPINGS; and each prompt's
    sums of them, for intervals over resampled prompts."""

    temperature: float
    budgets: np.ndarray  # (K,) the budgets reported (capped by the largest pool)
    rules: tuple[str, ...]
    scored: tuple[str, ...]
    rounds: int
    coverage: np.ndarray  # (R, S, P, K)
    value: np.ndarray  # (R, S, P, K)
    shortfall: np.ndarray  # (R, S, P, K)
    added: np.ndarray  # (R, S, K)
    # (Q,) each prompt's rounds, prompts in study.values.PerRound.of's order (so resamples pair with its figures)
    prompt_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prompt_sums: dict[str, np.ndarray] = field(default_factory=dict)  # figure -> (Q, *its shape) each prompt's sum

    def at(self, rule: str, scored: str, stopping: str, budget: int) -> tuple[float, float, float]:
        """(coverage, value, shortfall) of one cell."""
        i, j = self.rules.index(rule), self.scored.index(scored)
        p, k = list(STOPPINGS).index(stopping), self.budgets.tolist().index(budget)
        return float(self.coverage[i, j, p, k]), float(self.value[i, j, p, k]), float(self.shortfall[i, j, p, k])

    def intervals(self, *, n_resamples: int = 2000, confidence: float = 0.95,
                  seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each figure (FIGURES) -> its paired prompt-bootstrap interval's (low, high) ends, shaped as the figure:
        the mean per round over resampled prompts, every cell with the same resamples."""
        q = len(self.prompt_rounds)
        avg = Averages.of_totals({name: sums.reshape(q, -1) for name, sums in self.prompt_sums.items()},
                                 self.prompt_rounds, n_resamples=n_resamples, confidence=confidence, seed=seed)
        out = {}
        for name in FIGURES:
            ends = np.array([(e.low, e.high) for e in avg.mean(name)])  # (cells, 2)
            shape = getattr(self, name).shape
            out[name] = (ends[:, 0].reshape(shape), ends[:, 1].reshape(shape))
        return out


FIGURES = tuple(f.name for f in fields(RoundCoverage))  # coverage, value, shortfall, added


def coverage_tables(decodes: Iterable[RecordedDecode], budgets: Sequence[int] = BUDGETS, *, top: int = SCORED_TOP,
                    frontier: int = SCORED_FRONTIER) -> list[CoverageTable]:
    """Every rule's coverage figures over the recorded rounds, one table per temperature (warm-ups left out)."""
    rules = tuple(name for name in VALUED if name in MEMBERS)
    out = []
    for temperature, found in by_temperature(decodes).items():
        kept = reported_budgets(found, budgets)
        sums = [0.0, 0.0, 0.0, 0.0]
        prompts: dict[str, int] = {}
        by_prompt: list[list[np.ndarray]] = []  # each prompt's sums of FIGURES
        prompt_rounds: list[int] = []
        rounds = 0
        for d in found:
            q = prompts.setdefault(str(d.key["prompt_id"]), len(prompts))
            for rnd in d.rounds:
                figures = round_coverage(rnd.scored(), kept, rules=rules, top=top, frontier=frontier)
                arrays = [getattr(figures, name) for name in FIGURES]
                sums = [total + x for total, x in zip(sums, arrays)]
                if q == len(by_prompt):
                    by_prompt.append([np.zeros_like(x) for x in arrays])
                    prompt_rounds.append(0)
                by_prompt[q] = [total + x for total, x in zip(by_prompt[q], arrays)]
                prompt_rounds[q] += 1
                rounds += 1
        out.append(CoverageTable(temperature, kept, rules, scored_names(top, frontier), rounds,
                                 *(total / rounds for total in sums), np.array(prompt_rounds, np.float64),
                                 {name: np.stack([p[i] for p in by_prompt]) for i, name in enumerate(FIGURES)}))
    return out


def reported_budgets(decodes: Sequence[RecordedDecode], budgets: Sequence[int]) -> np.ndarray:
    """(K,) the budgets asked for, capped by the largest pool of `decodes`, as the values program reports them."""
    largest = max(len(r.pool) for d in decodes for r in d.rounds)
    return np.array(sorted({min(int(b), largest) for b in budgets}), np.int64)
