"""Budget `auto`: each round's tree size, chosen from measured acceptance and pass costs (pure, no devices).

Before each round the decode picks b from a small set (0, 1, 2, 4, 8, ... up to the cap) to maximise
expected tokens per second:

    tokens(b) = 1 + sum_{k < b} p[k]          cost(b) = front + tree(b)     (b > 0)
    tokens(0) = 1                             cost(0) = plain

p[k] is the chance that the tree node of rank k (rank: the order the rules select in, cumulative draft
log-prob first) lies on the accepted path, a running estimate kept per decode: each verified rank moves
it a step `rate` toward what the round showed, and every rank not verified in a round moves a smaller step
`relax` back toward an optimistic prior, so that a decode that switched speculation off tries it again now
and then. `front` is what a speculative round spends before its tree pass (the root pass and the wait for
the drafter, or the wait alone), `tree(b)` the tree pass, `plain` a round of plain decoding (one pass);
all come from passes timed at start-up, then follow what rounds take. b = 0 rounds do not ask the drafter
for a pool at all, so speculation switched off costs a plain round. Any tree is verified exactly, so the
choice never changes the output's law.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

RATE = 0.25  # weight of a round's observation of a rank
RELAX = 1 / 64  # per round, how far an unobserved rank drifts back to the prior
COST_RATE = 0.2  # weight of a round's timing in the cost estimates


def candidate_sizes(cap: int) -> tuple[int, ...]:
    """0, 1, 2, 4, 8, ... below `cap`, and `cap` itself."""
    sizes, b = [0], 1
    while b < cap:
        sizes.append(b)
        b *= 2
    return tuple(sizes + [cap])


def prior(cap: int) -> np.ndarray:
    """(cap,) an optimistic acceptance by rank, so that a decode starts speculating: 0.9 * 0.75^k."""
    return 0.9 * 0.75 ** np.arange(cap)


@dataclass(slots=True)
class PassCosts:
    """Seconds of a plain round, of a speculative round's part before the tree pass, and of tree passes by
    size (only the candidate sizes are needed)."""

    plain: float
    front: float
    tree: dict[int, float]

    def round(self, b: int) -> float:
        return self.plain if b == 0 else self.front + self.tree[b]


@dataclass(slots=True)
class AutoBudget:
    """The running estimates of one decode and the costs of this device; `choose` picks the next round's b."""

    costs: PassCosts
    cap: int
    accept: np.ndarray = field(init=False)  # (cap,) p[k]
    sizes: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.accept = prior(self.cap)
        self.sizes = candidate_sizes(self.cap)
        missing = [b for b in self.sizes if b and b not in self.costs.tree]
        assert not missing, f"no tree pass cost for sizes {missing}"

    def expected_tokens(self, b: int) -> float:
        return 1.0 + float(self.accept[:b].sum())

    def choose(self) -> int:
        """The candidate b of most expected tokens per second (the smaller b on a tie)."""
        rates = [self.expected_tokens(b) / self.costs.round(b) for b in self.sizes]
        return self.sizes[int(np.argmax(rates))]

    def observe(self, on_path: np.ndarray, b: int, *, front: float | None = None, tree: float | None = None,
                plain: float | None = None) -> None:
        """One round that ran at budget b: on_path (n,) bool, whether its tree's node of rank k was accepted
        (n <= b: a tree may hold fewer nodes than its budget), and its timings (None: not run).

        Ranks the round verified move toward what it showed; the others drift back toward the prior.
        """
        n = len(on_path)
        assert n <= max(b, 1) and n <= self.cap, (n, b)
        self.accept[:n] += RATE * (on_path - self.accept[:n])
        self.accept[n:] += RELAX * (prior(self.cap)[n:] - self.accept[n:])
        c = self.costs
        if front is not None:
            c.front += COST_RATE * (front - c.front)
        if tree is not None and b in c.tree:
            c.tree[b] += COST_RATE * (tree - c.tree[b])
        if plain is not None:
            c.plain += COST_RATE * (plain - c.plain)


def ranks_on_path(cum: np.ndarray, depth: np.ndarray, index: np.ndarray, accepted: list[int]) -> np.ndarray:
    """(n,) bool by rank: whether the tree node of rank k was accepted. cum, depth, index: (n,) of the tree's
    nodes (cumulative draft log-prob, depth, pool index); accepted: tree indices of the accepted path."""
    order = np.lexsort((index, depth, -cum))  # rank -> tree index: the order the rules select in
    hit = np.zeros(len(cum), bool)
    hit[accepted] = True
    return hit[order]
