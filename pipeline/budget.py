"""Budget `auto`: each round's tree size, chosen from measured acceptance and pass costs (pure, no devices).

Before each round the decode picks b from a small set (0, 1, 2, 4, 8, ... up to the cap) to maximise
expected tokens per second:

    tokens(b) = 1 + sum_{k < b} p[k]          cost(b) = front + tree(b) + switch     (b > 0)
    tokens(0) = 1                             cost(0) = plain

p[k] is the chance that the tree node of rank k (rank: the order the rules select in, cumulative draft
log-prob first) lies on the accepted path, estimated per decode from the rounds it verified: a prior worth
two rounds (optimistic, so that a decode starts speculating) plus what the rounds showed, older rounds
weighing less by `DECAY` a round. Across the decodes of one setting (decoder, temperature, cap) the
prior learns what earlier ones showed (Experience), so that a session whose speculation does not pay stops
starting each decode with it. Every round, the rounds seen so far and a learnt prior both drift back
toward the optimistic prior, so a decode that switched speculation off, or started without it, tries it
again now and then, the less often the surer it was.

`front` is what a steady speculative round spends before its tree pass (the root pass and the wait for the
drafter, or the wait alone), `tree(b)` the tree pass, `plain` a round of plain decoding (one pass); all come
from passes timed at start-up, then follow what rounds take (costs outlive a decode: they are the
device's). b = 0 rounds do not ask the drafter for a pool at all, so speculation switched off costs a plain
round. Switching speculation on costs more than a steady round: before a decode's first round the
drafter's prefill shares the device with the target's (`start`), after plain rounds the drafter ingests
the tokens it missed before it grows a pool (`catch_up`). `switch` is that extra, spread over the rounds
the switch is expected to serve: as many as the setting's speculative runs have lasted (a running mean,
`run`), at most as many as the rest of the decode takes. Where speculation pays throughout (a run lasts
the decode) a switch is nearly free; where runs end after a round or two, a switch must pay for itself
almost at once, so trying speculation again is rarer where it was tried in vain. Any tree is verified
exactly, so the choice never changes the output's law.
"""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass, field

import numpy as np

PRIOR_WEIGHT = 2.0  # the prior counts as this many rounds
DECAY = 1 / 64  # per round, the weight every earlier round loses
COST_RATE = 0.2  # weight of a round's timing in the cost estimates
RUN_RATE = 0.2  # weight of a finished run of speculative rounds in the mean run length
EXPERIENCE = 8.0  # at most, the rounds' worth of earlier decodes in a decode's prior


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
    """Seconds of a plain round, of a steady speculative round's part before the tree pass, and of tree
    passes by size (only the candidate sizes are needed); seconds per token of the target's prefill, alone
    and beside the drafter's (timed on one scratch prompt, so that their difference is the sharing's cost
    alone); and seconds per token the drafter missed, added to the wait of a speculative round that follows
    plain ones (learnt from such rounds: 0 until one ran)."""

    plain: float
    front: float
    tree: dict[int, float]
    prefill: float = 0.0
    prefill_shared: float = 0.0
    catch_up: float = 0.0

    def round(self, b: int) -> float:
        return self.plain if b == 0 else self.front + self.tree[b]

    def start(self, prompt: int) -> float:
        """What speculating from a decode's first round adds to the prefill of `prompt` tokens."""
        return max(0.0, self.prefill_shared - self.prefill) * prompt

    def switch(self, missed: int) -> float:
        """What a speculative round adds to a steady one's wait when the drafter missed `missed` tokens."""
        return self.catch_up * missed


@dataclass(slots=True)
class AutoBudget:
    """The running estimates of one decode and the costs of this device; `choose` picks the next round's b."""

    costs: PassCosts
    cap: int
    experience: InitVar[Experience | None] = None  # earlier decodes of the setting, for the prior
    sizes: tuple[int, ...] = field(init=False)
    optimistic: np.ndarray = field(init=False)  # (cap,) prior(cap), where a learnt prior drifts back to
    prior: np.ndarray = field(init=False)  # (cap,)
    hits: np.ndarray = field(init=False)  # (cap,) decayed count of rounds whose rank-k node was accepted
    seen: np.ndarray = field(init=False)  # (cap,) decayed count of rounds that verified a rank-k node
    run: float = field(init=False)  # mean rounds a run of speculative rounds lasted (inf: none ended yet)
    streak: int = field(init=False, default=0)  # speculative rounds since the last plain one

    def __post_init__(self, experience: Experience | None) -> None:
        self.sizes = candidate_sizes(self.cap)
        self.optimistic = prior(self.cap)
        self.prior = self.optimistic.copy() if experience is None else experience.prior()
        self.run = math.inf if experience is None else experience.run
        self.hits = np.zeros(self.cap)
        self.seen = np.zeros(self.cap)
        missing = [b for b in self.sizes if b and b not in self.costs.tree]
        assert not missing, f"no tree pass cost for sizes {missing}"

    @property
    def accept(self) -> np.ndarray:
        """(cap,) p[k]: the prior and the rounds, weighted by their counts."""
        return (PRIOR_WEIGHT * self.prior + self.hits) / (PRIOR_WEIGHT + self.seen)

    def expected_tokens(self, b: int) -> float:
        return 1.0 + float(self.accept[:b].sum())

    def choose(self, switch: float = 0.0, left: float = math.inf) -> int:
        """The candidate b of most expected tokens per second (the smaller b on a tie). switch: seconds
        switching speculation on would cost (PassCosts.start, PassCosts.switch; 0 while it is on), spread
        over the rounds it would serve: the mean run, at most the rounds that `left` tokens take."""
        tokens = np.cumsum(np.concatenate([[1.0], self.accept]))[list(self.sizes)]  # tokens(b), every b at once
        served = np.maximum(1.0, np.minimum(self.run, left / tokens))
        extra = np.where(np.array(self.sizes) > 0, switch / served, 0.0)
        rates = tokens / (np.array([self.costs.round(b) for b in self.sizes]) + extra)
        return self.sizes[int(np.argmax(rates))]

    def observe(self, on_path: np.ndarray, b: int, *, front: float | None = None, tree: float | None = None,
                plain: float | None = None, caught_up: tuple[float, int] | None = None) -> None:
        """One round that ran at budget b: on_path (n,) bool, whether its tree's node of rank k was accepted
        (n <= b: a tree may hold fewer nodes than its budget), and its timings (None: not run): `front` of a
        steady round, or `caught_up`, the front of a round after plain ones and the tokens the drafter missed."""
        n = len(on_path)
        assert n <= max(b, 1) and n <= self.cap, (n, b)
        self.hits *= 1 - DECAY
        self.seen *= 1 - DECAY
        self.prior += DECAY * (self.optimistic - self.prior)
        self.hits[:n] += on_path
        self.seen[:n] += 1
        if b:
            self.streak += 1
        else:
            self.end_run()
        c = self.costs
        if front is not None:
            c.front += COST_RATE * (front - c.front)
        if tree is not None and b in c.tree:
            c.tree[b] += COST_RATE * (tree - c.tree[b])
        if plain is not None:
            c.plain += COST_RATE * (plain - c.plain)
        if caught_up is not None and caught_up[1] > 0:
            seconds, missed = caught_up
            c.catch_up += COST_RATE * (max(0.0, seconds - c.front) / missed - c.catch_up)

    def end_run(self) -> None:
        """A run of speculative rounds ended (a plain round, or the decode's end): fold its length in."""
        if self.streak:
            self.run = self.streak if math.isinf(self.run) else self.run + RUN_RATE * (self.streak - self.run)
            self.streak = 0


@dataclass(slots=True)
class Experience:
    """What earlier decodes of one setting (decoder, temperature, cap) showed, for the next one's prior.

    The prior of a decode is the optimistic prior and the earlier decodes' acceptance by rank, these weighing
    at most EXPERIENCE rounds, so that a decode's own rounds soon outweigh them. Their counts halve with
    every decode that verified nothing, so their weight falls once they count fewer than EXPERIENCE rounds.
    """

    cap: int
    hits: np.ndarray = field(init=False)
    seen: np.ndarray = field(init=False)
    run: float = math.inf  # mean rounds a run of speculative rounds lasted (AutoBudget.run)

    def __post_init__(self) -> None:
        self.hits = np.zeros(self.cap)
        self.seen = np.zeros(self.cap)

    def prior(self) -> np.ndarray:
        weight = np.minimum(self.seen, EXPERIENCE)
        shown = np.divide(self.hits, self.seen, out=np.zeros(self.cap), where=self.seen > 0)
        return (PRIOR_WEIGHT * prior(self.cap) + weight * shown) / (PRIOR_WEIGHT + weight)

    def learn(self, decode: AutoBudget) -> None:
        """Fold a finished decode's estimates in (older decodes weigh half as much as it)."""
        decode.end_run()
        self.run = decode.run
        if not decode.seen.any():
            self.hits *= 0.5
            self.seen *= 0.5
            return
        self.hits = 0.5 * self.hits + decode.hits
        self.seen = 0.5 * self.seen + decode.seen


def ranks_on_path(cum: np.ndarray, depth: np.ndarray, index: np.ndarray, accepted: list[int]) -> np.ndarray:
    """(n,) bool by rank: whether the tree node of rank k was accepted. cum, depth, index: (n,) of the tree's
    nodes (cumulative draft log-prob, depth, pool index); accepted: tree indices of the accepted path."""
    order = np.lexsort((index, depth, -cum))  # rank -> tree index: the order the rules select in
    hit = np.zeros(len(cum), bool)
    hit[accepted] = True
    return hit[order]
