"""Budget `auto`: each round's tree size, chosen from measured acceptance and pass costs (pure, no devices).

Before each round the decode picks b from a small set (0, 1, 2, 4, 8, ... up to the cap) to maximise
expected tokens per second, a speculative b counting only when it beats plain decoding by MARGIN:

    tokens(b) = 1 + sum_{k < b} p[k]          cost(b) = front + tree(b) + switching on   (b > 0)
    tokens(0) = 1                             cost(0) = plain

p[k] is the chance that the tree node of rank k (cumulative draft log-prob first) lies on the accepted path,
estimated per decode over an anchor (the optimistic prior beside the setting's rounds); `front` is a steady
speculative round's part before its tree pass, `tree(b)` the tree pass, `plain` one plain pass, all timed at
start-up and then following rounds; switching on (the drafter's start, or its catch-up after plain rounds) is
spread over the rounds it serves, and a ledger keeps what tries lose within TRY_SHARE of plain rounds' time.
docs/budget-auto.md gives the whole model and why each part is there. Any tree is verified exactly, so the
choice never changes the output's law."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field

import numpy as np

from pipeline.feed import DrafterFeed
from pipeline.result import Phases

PRIOR_WEIGHT = 2.0  # the anchor counts as this many rounds beside a decode's recent ones, and the optimistic
                    # prior as many in the anchor
DECAY = 1 / 64  # per speculative round, the weight every earlier round loses
FORGET = 1 / 8  # per plain round, the same, for an anchor that rests on EXPERIENCE rounds (less on fewer)
COST_RATE = 0.2  # weight of a round's timing in the cost estimates
TYPICAL = 64  # the recent timings whose median is a speculative cost's typical value
RUN_RATE = 0.2  # weight of a finished run of speculative rounds in the mean run length
EXPERIENCE = 8.0  # at most, the rounds' worth of the setting's rounds in a decode's anchor
RECALL = 0.8  # per decode, the weight that what the decodes before it showed keeps in the session prior
MARGIN = 0.1  # the share by which speculation's expected tokens per second must beat plain decoding's
LINGER = 1 / 128  # per plain round, the weight that what the setting's rounds showed loses in a decode's anchor
SPIKE = 2.0  # a round's timing counts as at most this multiple of the estimate it moves
ROOT_RATE = 0.05  # weight of a speculative round's root pass (scaled) in the plain cost: a plain round's is
                  # COST_RATE, the root pass, which runs beside the drafter, is a less direct witness
START_ROUNDS = 8  # the rounds a start of the drafter is spread over at least, however short the runs: the
                  # decode's later runs use the drafter it started, and one unlucky round must not price it out
TRY_SHARE = 1 / 32  # the share of plain rounds' time that speculation may lose to plain decoding by trying


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


def cautious(cap: int) -> np.ndarray:
    """(cap,) a conservative acceptance by rank, for a run's budget chosen before any round: 0.4 * 0.6^k
    (τ 1.98 at b = 8, below what `draft` reached in the embedded pair's committed default run)."""
    return 0.4 * 0.6 ** np.arange(cap)


def expected_tokens(accept: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """(len(sizes),) tokens(b) = 1 + sum_{k < b} p[k] for every b of `sizes` at once; accept: (cap,) p[k]."""
    return np.cumsum(np.concatenate([[1.0], accept]))[list(sizes)]


def steady_rates(costs: list[PassCosts], accept: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """(len(sizes),) expected tokens per second of steady rounds at each of `sizes` (each above 0, in
    every costs' `tree`), the mean over `costs` (one per rule) at acceptance `accept` ((cap,) p[k]). A larger tree
    never counts as cheaper than a smaller one (a noisy cheap large tree must not win)."""
    tokens = expected_tokens(accept, sizes)
    rounds = [np.maximum.accumulate([c.round(b) for b in sizes]) for c in costs]
    return np.mean([tokens / r for r in rounds], axis=0)


def anchored(optimistic: np.ndarray, hits: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """(cap,) the optimistic prior (worth PRIOR_WEIGHT rounds) beside what rounds showed, `hits` of `seen` by
    rank (worth at most EXPERIENCE rounds, so that a decode's own recent rounds soon outweigh them)."""
    weight = np.minimum(seen, EXPERIENCE)
    shown = np.divide(hits, seen, out=np.zeros(len(seen)), where=seen > 0)
    return (PRIOR_WEIGHT * optimistic + weight * shown) / (PRIOR_WEIGHT + weight)


def capped(seen: float, estimate: float) -> float:
    """A timing as it moves `estimate`: at most SPIKE times it (an estimate of 0 is not yet one), so that a
    moment of load does not make a pass look dear for many rounds."""
    return min(seen, SPIKE * estimate) if estimate > 0 else seen


@dataclass(frozen=True, slots=True)
class MeasuredPasses:
    """This device's pass times, timed once at start-up (target_proc.costs.measure): seconds of a plain pass,
    of a root pass beside the drafter (`overlapped`), of tree passes by size without (`tree`) and with
    (`tree_with_root`, `draft`) the root's row, per token of the prefill alone and beside the drafter, and of a
    pool after a one-token commit (`pool`; 0: not timed)."""

    plain: float
    overlapped: float
    tree: dict[int, float]
    tree_with_root: dict[int, float]
    prefill: float
    prefill_shared: float
    pool: float = 0.0

    def __post_init__(self) -> None:
        for name in ("plain", "overlapped", "prefill", "prefill_shared", "pool"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"`{name}` must be finite seconds, at least 0, got {getattr(self, name)!r}")
        if set(self.tree) != set(self.tree_with_root):
            raise ValueError(f"`tree` and `tree_with_root` must time the same sizes, got {sorted(self.tree)} and "
                             f"{sorted(self.tree_with_root)}")
        if not all(math.isfinite(t) and t >= 0 for t in [*self.tree.values(), *self.tree_with_root.values()]):
            raise ValueError("`tree` and `tree_with_root` must hold finite seconds, at least 0")


@dataclass(slots=True)
class PassCosts:
    """Seconds of a plain round, of a steady speculative round's part before the tree pass, and of tree
    passes by size as timed at start-up, which take `scale` times that now (one scale for all sizes); per token of
    the target's prefill, alone and beside the drafter's; and per token the drafter missed (`catch_up`, learnt
    from rounds after plain ones). Plain rounds move the speculative costs back to their typical values (the
    median of recent timings, itself returning to what start-up timed)."""

    plain: float
    front: float
    tree: dict[int, float]
    prefill: float = 0.0
    prefill_shared: float = 0.0
    catch_up: float = 0.0
    solo: float = 1.0  # a plain pass over a root pass beside the drafter, timed at start-up (both one token)
    scale: float = 1.0  # what tree passes take now over `tree`
    recent: dict[str, deque] = field(default_factory=dict, repr=False)  # "front", "scale" -> timings
    typical: dict[str, float] = field(default_factory=dict, repr=False)  # their medians, once asked
    timed: dict[str, float] = field(init=False, repr=False)  # "front", "scale", "plain" as start-up timed them

    def __post_init__(self) -> None:
        self.timed = {"front": self.front, "scale": self.scale, "plain": self.plain}

    def round(self, b: int) -> float:
        return self.plain if b == 0 else self.front + self.tree_pass(b)

    def tree_pass(self, b: int) -> float:
        """Seconds of a tree pass of size b now."""
        return self.scale * self.tree[b]

    def start(self, tokens: int, late: bool = False) -> float:
        """What starting the drafter on `tokens` of context costs: before the first round, what its prefill
        adds to the target's; `late` (a decode that started plain), the wait for its prefill."""
        return (self.prefill_shared if late else max(0.0, self.prefill_shared - self.prefill)) * tokens

    def prefilled(self, tokens: int, seconds: float, started: int = 0) -> None:
        """A decode's prefill of `tokens` took `seconds`, beside a drafter starting on `started` tokens (0:
        none); beside a drafter, what it took beyond the alone cost is charged to the drafter's tokens."""
        if tokens <= 0:
            return
        if started:
            shared = self.prefill + (seconds - self.prefill * tokens) / started
            self.prefill_shared += COST_RATE * (capped(shared, self.prefill_shared) - self.prefill_shared)
        else:
            self.prefill += COST_RATE * (capped(seconds / tokens, self.prefill) - self.prefill)

    def switch(self, missed: int) -> float:
        """What a speculative round adds to a steady one's wait when the drafter missed `missed` tokens."""
        return self.catch_up * missed

    def follow(self, front: float | None, b: int, tree: float | None, root: float | None = None) -> None:
        """A speculative round's timings (None: not a steady one's, or not run). Its root pass, scaled by `solo`,
        moves the plain cost ROOT_RATE of the way; without one (`draft`), the start-up plain pass at the tree passes'
        scale moves it down only."""
        if root is not None:
            self.plain += ROOT_RATE * (capped(self.solo * root, self.plain) - self.plain)
        if front is not None:
            front = capped(front, self.front)
            self.front += COST_RATE * (front - self.front)
            self._remember("front", front)
        if tree is not None and self.tree.get(b, 0) > 0:
            scale = capped(tree / self.tree[b], self.scale)
            self.scale += COST_RATE * (scale - self.scale)
            self._remember("scale", scale)
            if root is None and (witness := self.timed["plain"] * scale) < self.plain:
                self.plain += ROOT_RATE * (witness - self.plain)

    def relax(self, rate: float) -> None:
        """A plain round: each speculative cost moves `rate` of the way back to its typical value, which moves
        LINGER of the way back to what start-up timed."""
        for key, times in self.recent.items():
            if key not in self.typical:  # new timings since the last plain round
                self.typical[key] = float(np.median(times))
            self.typical[key] += LINGER * (self.timed[key] - self.typical[key])
            if key == "front":
                self.front += rate * (self.typical[key] - self.front)
            else:
                self.scale += rate * (self.typical[key] - self.scale)

    def _remember(self, key: str, seconds: float) -> None:
        self.recent.setdefault(key, deque(maxlen=TYPICAL)).append(seconds)
        self.typical.pop(key, None)


@dataclass(slots=True)
class AutoBudget:
    """The running estimates of one decode and the costs of this device; `choose` picks the next round's b."""

    costs: PassCosts
    cap: int
    experience: InitVar[Experience | None] = None  # earlier decodes of the setting, for the anchor
    sizes: tuple[int, ...] = field(init=False)
    prior: np.ndarray = field(init=False)  # (cap,) the optimistic prior
    hits: np.ndarray = field(init=False)  # (cap,) decayed count of rounds whose rank-k node was accepted
    seen: np.ndarray = field(init=False)  # (cap,) decayed count of rounds that verified a rank-k node
    total_hits: np.ndarray = field(init=False)  # (cap,) the same counts undecayed, for the session prior
    total_seen: np.ndarray = field(init=False)
    shown_hits: np.ndarray = field(init=False)  # (cap,) the setting's rounds for the anchor: the earlier
    shown_seen: np.ndarray = field(init=False)  # decodes' and this one's, fading by LINGER a plain round
    run: float = field(init=False)  # mean rounds a run of speculative rounds lasted (inf: none ended yet)
    streak: int = field(init=False, default=0)  # speculative rounds since the last plain one
    balance: float = field(init=False)  # seconds tries may still lose before speculation is tried again (ledger)
    banked: float = field(init=False, default=0.0)  # what this decode's plain rounds added to `balance`
    started: bool = field(init=False, default=False)  # the run under way follows a start of the drafter the
                                                      # ledger paid: its rounds pay it back

    def __post_init__(self, experience: Experience | None) -> None:
        self.sizes = candidate_sizes(self.cap)
        self.prior = prior(self.cap)
        self.run = math.inf if experience is None else experience.run
        self.balance = 0.0 if experience is None else experience.balance
        self.hits, self.seen = np.zeros(self.cap), np.zeros(self.cap)
        self.total_hits, self.total_seen = np.zeros(self.cap), np.zeros(self.cap)
        self.shown_hits = np.zeros(self.cap) if experience is None else experience.hits.copy()
        self.shown_seen = np.zeros(self.cap) if experience is None else experience.seen.copy()
        missing = [b for b in self.sizes if b and b not in self.costs.tree]
        assert not missing, f"no tree pass cost for sizes {missing}"

    @property
    def anchor(self) -> np.ndarray:
        """(cap,) what the estimate returns to while speculation is off: the optimistic prior beside what the
        setting's rounds showed, this decode's included."""
        return anchored(self.prior, self.shown_hits, self.shown_seen)

    @property
    def founded(self) -> float:
        """How far the anchor rests on rounds rather than on the prior: the rounds it holds of EXPERIENCE."""
        return float(min(self.shown_seen[0], EXPERIENCE)) / EXPERIENCE

    @property
    def accept(self) -> np.ndarray:
        """(cap,) p[k]: the anchor and the recent rounds, weighted by their counts."""
        return (PRIOR_WEIGHT * self.anchor + self.hits) / (PRIOR_WEIGHT + self.seen)

    def choose(self, switch: float = 0.0, left: float = math.inf, start: float = 0.0) -> int:
        """The candidate b of most expected tokens per second (the smaller on a tie), a speculative b's
        discounted by MARGIN. switch: seconds of the drafter's catch-up (PassCosts.switch), spread over the mean run
        (at most the rounds `left` tokens take); start: seconds of starting the drafter, spread over at least
        START_ROUNDS. No speculation is switched on while the ledger is in debt or cannot afford it."""
        if self.streak == 0 and (self.balance < 0 or not self.affordable(switch + start, left)):
            return 0
        tokens = expected_tokens(self.accept, self.sizes)
        rounds = np.maximum(1.0, left / tokens)
        extra = switch / np.minimum(self.run, rounds) + start / np.minimum(max(self.run, START_ROUNDS), rounds)
        extra[0] = 0.0  # sizes[0] is 0: a plain round switches nothing on
        rates = tokens / (np.array([self.costs.round(b) for b in self.sizes]) + extra)
        rates[1:] /= 1 + MARGIN  # speculation must promise more than plain decoding to be worth its spread
        return self.sizes[int(np.argmax(rates))]

    def affordable(self, seconds: float, left: float) -> bool:
        """Whether a try may spend `seconds` switching speculation on: at most what the ledger holds and
        TRY_SHARE of the plain rounds that the `left` tokens would take."""
        return seconds <= self.balance + TRY_SHARE * self.costs.plain * left

    def observe(self, on_path: np.ndarray, b: int, *, front: float | None = None, tree: float | None = None,
                plain: float | None = None, caught_up: tuple[float, int] | None = None,
                root: float | None = None) -> None:
        """One round that ran at budget b: on_path (n,) bool, whether its tree's node of rank k was accepted
        (n <= b), and its timings (None: not run): `front` of a steady round, or `caught_up` (front, missed tokens)
        of a round after plain ones; `root`, a speculative round's root pass with its commit."""
        n = len(on_path)
        assert n <= max(b, 1) and n <= self.cap, (n, b)
        self.ledger(on_path, b, front, tree, plain, caught_up)
        keep = 1 - (DECAY if b else FORGET * self.founded)
        self.hits *= keep
        self.seen *= keep
        self.hits[:n] += on_path
        self.seen[:n] += 1
        self.total_hits[:n] += on_path
        self.total_seen[:n] += 1
        self.shown_hits[:n] += on_path
        self.shown_seen[:n] += 1
        if b:
            self.streak += 1
        else:
            self.shown_hits *= 1 - LINGER
            self.shown_seen *= 1 - LINGER
            self.end_run()
        c = self.costs
        c.follow(front, b, tree, root if b else None)
        if not b:
            c.relax(FORGET)
        if plain is not None:
            c.plain += COST_RATE * (capped(plain, c.plain) - c.plain)
        if caught_up is not None and caught_up[1] > 0:
            seconds, missed = caught_up
            c.catch_up += COST_RATE * (capped(max(0.0, seconds - c.front) / missed, c.catch_up) - c.catch_up)

    def ledger(self, on_path: np.ndarray, b: int, front: float | None, tree: float | None, plain: float | None,
               caught_up: tuple[float, int] | None) -> None:
        """The account of what tries of speculation saved: a try (a run's first round, or every round of a run
        that started the drafter) adds what its tokens would have cost in plain rounds less what it took (capped by
        SPIKE once a catch-up is timed), a plain round TRY_SHARE of what it took. In debt, no try starts."""
        c = self.costs
        if not b:
            share = TRY_SHARE * (c.plain if plain is None else plain)
            self.balance += share
            self.banked += share
            return
        if self.streak and not self.started:
            return
        missed = 0 if caught_up is None else caught_up[1]
        wait = caught_up[0] if caught_up is not None else front
        took = (c.front if wait is None else wait) + (c.tree_pass(b) if tree is None else tree)
        if c.catch_up or not missed:  # a catch-up not yet timed has no estimate to cap it
            took = capped(took, c.round(b) + c.switch(missed))
        self.balance += c.plain * (1 + int(on_path.sum())) - took

    def end_run(self) -> None:
        """A run of speculative rounds ended (a plain round, or the decode's end): fold its length in."""
        if self.streak:
            self.run = self.streak if math.isinf(self.run) else self.run + RUN_RATE * (self.streak - self.run)
            self.streak = 0
        self.started = False


@dataclass(slots=True)
class Experience:
    """What earlier decodes of one setting (decoder, temperature, cap) showed, for the next one's anchor:
    every decode adds all the rounds it verified, and the decodes before it keep RECALL of their weight."""

    cap: int
    hits: np.ndarray = field(init=False)
    seen: np.ndarray = field(init=False)
    run: float = math.inf  # mean rounds a run of speculative rounds lasted (AutoBudget.run)
    balance: float = 0.0  # the ledger a decode starts from (AutoBudget.ledger): the last one's debt in full,
                          # what its speculation saved at RECALL (its plain rounds' shares pay debts, never pass on)

    def __post_init__(self) -> None:
        self.hits = np.zeros(self.cap)
        self.seen = np.zeros(self.cap)

    def prior(self) -> np.ndarray:
        """(cap,) the anchor the next decode starts from."""
        return anchored(prior(self.cap), self.hits, self.seen)

    def learn(self, decode: AutoBudget) -> None:
        """Fold a finished decode's rounds in (the decodes before it weigh RECALL as much as they did)."""
        decode.end_run()
        self.run = decode.run
        self.balance = decode.balance if decode.balance < 0 else RECALL * max(0.0, decode.balance - decode.banked)
        self.hits = RECALL * self.hits + decode.total_hits
        self.seen = RECALL * self.seen + decode.total_seen


def ranks_on_path(cum: np.ndarray, depth: np.ndarray, index: np.ndarray, accepted: list[int]) -> np.ndarray:
    """(n,) bool by rank: whether the tree node of rank k was accepted. cum, depth, index: (n,) of the tree's
    nodes (cumulative draft log-prob, depth, pool index); accepted: tree indices of the accepted path."""
    order = np.lexsort((index, depth, -cum))  # rank -> tree index: the order the rules select in
    hit = np.zeros(len(cum), bool)
    hit[accepted] = True
    return hit[order]


def costs_for(root_pass: bool, measured: MeasuredPasses, whole_pool: bool = True) -> PassCosts:
    """A rule's starting costs from the passes timed at start-up: a root-pass rule's front is its root pass,
    or the pool it waits for if longer; `draft` waits for the pool, then scores the root in its tree pass. Without
    `whole_pool` (cut pools) the pool's wait is learnt from rounds."""
    m = measured
    pool = m.pool if whole_pool else 0.0
    if root_pass:
        return PassCosts(plain=m.plain, front=max(m.overlapped, pool), tree=dict(m.tree), prefill=m.prefill,
                         prefill_shared=m.prefill_shared, solo=m.plain / m.overlapped if m.overlapped > 0 else 1.0)
    return PassCosts(plain=m.plain, front=pool, tree=dict(m.tree_with_root), prefill=m.prefill,
                     prefill_shared=m.prefill_shared)


class FixedBudget:
    """Every round at one budget: the configured one, or 0 (plain rounds) for a rule without a drafter."""

    tracks = False  # no round needs its accepted ranks

    def __init__(self, budget: int) -> None:
        self.budget = budget

    def first(self, feed: DrafterFeed, context: int, left: int) -> int:
        return self.budget

    def next(self, feed: DrafterFeed, context: int, left: int) -> int:
        return self.budget

    def prefilled(self, feed: DrafterFeed, tokens: int, seconds: float) -> None:
        pass

    def observe(self, on_path: np.ndarray | None, budget: int, times: Phases, feed: DrafterFeed,
                outside: float = 0.0) -> None:
        pass

    def end(self) -> None:
        pass


class AutoPolicy:
    """Budget auto over one decode: the first budget, each next one, what each round teaches, and at the end
    what the decode adds to its setting's Experience."""

    tracks = True  # rounds report which ranks they accepted

    def __init__(self, costs: PassCosts, cap: int, experience: Experience | None) -> None:
        self.auto = AutoBudget(costs, cap, experience)
        self.experience = experience

    def first(self, feed: DrafterFeed, context: int, left: int) -> int:
        """Before the prefill of `context` tokens: starting the drafter now shares the prefill's device."""
        return self.auto.choose(0.0, left, self.auto.costs.start(feed.start_tokens(context)))

    def prefilled(self, feed: DrafterFeed, tokens: int, seconds: float) -> None:
        """The decode's prefill of `tokens` took `seconds`, beside the drafter's if the first round speculates:
        then what it took beyond the prefill alone (at most SPIKE times the start's estimate) is the try's, charged
        to the ledger."""
        costs, started = self.auto.costs, feed.start_tokens(tokens) if feed.told else 0
        if started:
            self.auto.balance -= max(0.0, min(seconds - costs.prefill * tokens, SPIKE * costs.start(started)))
            self.auto.started = True
        costs.prefilled(tokens, seconds, started)

    def next(self, feed: DrafterFeed, context: int, left: int) -> int:
        """After a round: in a decode that started plain the drafter's start serves the rest of it; after
        plain rounds the drafter first ingests what it missed, which serves a run of rounds."""
        costs = self.auto.costs
        if not feed.told:
            return self.auto.choose(0.0, left, costs.start(feed.start_tokens(context), late=True))
        return self.auto.choose(costs.switch(feed.missed) if feed.previous == 0 else 0.0, left, 0.0)

    def observe(self, on_path: np.ndarray | None, budget: int, times: Phases, feed: DrafterFeed,
                outside: float = 0.0) -> None:
        """Feed one round to the estimates: the ranks accepted, its phases, and `outside` them the target's work
        since the round before (asking for the pool, with a head's features). Its wait is a steady one only after a
        speculative round: before it the drafter ingested the prompt or the tokens it missed."""
        auto, outside = self.auto, max(0.0, outside)
        if budget == 0:
            auto.observe(np.zeros(0, bool), 0, plain=times.seconds("root") + times.seconds("commit") + outside)
            return
        front = (times.seconds("root") + times.seconds("wait") + times.seconds("select") + times.seconds("commit")
                 + outside)
        hit = np.zeros(min(budget, auto.cap), bool)  # ranks the tree could not fill count as refused:
        hit[: len(on_path)] = on_path                # a budget buys them only when the pool has them
        root = times.root + times.seconds("commit") if times.root else None  # rules with a root pass
        auto.observe(hit, budget, front=front if feed.previous else None, tree=times.tree,
                     caught_up=(front, feed.missed) if feed.previous == 0 else None, root=root)

    def end(self) -> None:
        if self.experience is not None:
            self.experience.learn(self.auto)


def budget_policy(speculative: bool, budget: int | str, cap: int, costs: PassCosts | None,
                  experience: Experience | None = None) -> FixedBudget | AutoPolicy:
    """The policy of a decode whose rule is `speculative` (it has a drafter) at `budget` (an integer or
    "auto"; auto needs this device's `costs`)."""
    if not speculative:
        return FixedBudget(0)
    if budget != "auto":
        return FixedBudget(budget)
    if costs is None:
        raise ValueError("budget auto needs the pass costs of this device")
    return AutoPolicy(costs, cap, experience)


class SessionBudgets:
    """What budget auto keeps across a session's decodes: pass times per cap (timed once, by `measure(cap)`),
    costs per (decoder, cap, drafting) and each setting's Experience; decodes drafting otherwise learn apart."""

    def __init__(self, measure: Callable[[int], MeasuredPasses]) -> None:
        self.measure = measure
        self.measured: dict[int, MeasuredPasses] = {}  # cap -> pass times
        self.costs: dict[tuple, PassCosts] = {}  # (decoder, cap, drafting) -> costs
        self.experience: dict[tuple, Experience] = {}  # (decoder, temperature, cap, drafting) -> earlier decodes

    def timings(self, cap: int) -> MeasuredPasses:
        """This device's pass times at `cap`, timed at the first call (a run calls it before its first decode,
        so that the wait is not inside one)."""
        if cap not in self.measured:
            self.measured[cap] = self.measure(cap)
        return self.measured[cap]

    def for_decode(self, decoder: str, root_pass: bool, temperature: float, cap: int, session_prior: bool,
                   drafting: tuple = (), whole_pool: bool = True) -> tuple[PassCosts, Experience | None]:
        """The costs a decode of budget auto starts from, and with the session prior its setting's Experience.
        whole_pool: a round waits for the drafter's whole pool (not with cut pools; see costs_for)."""
        if (decoder, cap, drafting) not in self.costs:
            self.costs[decoder, cap, drafting] = costs_for(root_pass, self.timings(cap), whole_pool)
        costs = self.costs[decoder, cap, drafting]
        if not session_prior:
            return costs, None
        return costs, self.experience.setdefault((decoder, temperature, cap, drafting), Experience(cap))
