"""Budget `auto`: each round's tree size, chosen from measured acceptance and pass costs (pure, no devices).

Before each round the decode picks b from a small set (0, 1, 2, 4, 8, ... up to the cap) to maximise
expected tokens per second, a speculative b counting only when it beats plain decoding by MARGIN:

    tokens(b) = 1 + sum_{k < b} p[k]          cost(b) = front + tree(b) + switching on   (b > 0)
    tokens(0) = 1                             cost(0) = plain

A round's tokens vary a lot (one round accepts the whole tree, the next nothing), so a b whose expected
rate only ties with plain decoding's would be a gamble that loses as often as it wins; the margin leaves
such a setting plain.

p[k] is the chance that the tree node of rank k (rank: the order the rules select in, cumulative draft
log-prob first) lies on the accepted path, estimated per decode from the rounds it verified over an anchor
worth two rounds. The anchor is an optimistic prior (so that a decode starts speculating where a round costs
less than the tokens the prior promises) beside what the setting's rounds showed (decoder, temperature, cap:
the earlier decodes' (Experience) and this decode's own, at most EXPERIENCE rounds' worth), so that a
session whose speculation does not pay stops starting each decode with it, and a decode whose first rounds
show it losing stops trying it. Recent rounds weigh more: every earlier round loses `DECAY` of its weight
with a speculative round, and with a plain one `FORGET` times the share of EXPERIENCE rounds the anchor
rests on, so that while speculation is off the estimate returns to the anchor: fast where it rests on many
rounds, slowly where the prior still makes up much of it (a few losing rounds, and a prior that, over them,
would call for another try). Where the setting's rounds showed speculation paying (a dip in acceptance
switched it off) the decode soon tries it again; where they showed it losing it stays off: the anchor
forgets them only by `LINGER` a plain round (a decode of a few hundred plain rounds tries again) and, across
decodes, by `RECALL` a decode, the later the more rounds had shown it losing. Each try costs a round dearer
than a plain one, so tries must be rare for a decode never to fall much below plain decoding: a ledger
(AutoBudget.ledger) keeps what tries lost within TRY_SHARE of plain rounds' time, and a try whose start or
catch-up the ledger cannot cover (the int8 drafter started beside a long prompt's prefill) is not made.

`front` is what a steady speculative round spends before its tree pass (the root pass and the wait for the
drafter, or the wait alone), `tree(b)` the tree pass, `plain` a round of plain decoding (one pass); all come
from passes timed at start-up, the drafter's pool included (a round waits for it: a drafter that costs as
much as the target makes its rounds dearer than any acceptance pays for, and the first round is already
plain), then follow what rounds take (costs outlive a decode: they are the device's), a round's timing
counting as at most SPIKE times the estimate it moves and tree passes of every size sharing one scale, so
that a moment in which another process took the cores neither makes speculation look dear for long nor
makes one tree size look cheaper than the others. A
plain round's cost is timed by plain rounds, and, for rules with a root pass, also by the root pass of
speculative ones (the same one-token pass, scaled by the ratio of the two timed at start-up), so that a plain
cost that one slow moment made look dear does not keep speculation on for good; `draft`'s rounds, which have no
root pass, bring it down by their tree passes (the plain pass start-up timed, at the scale they show), so that
a plain cost learnt on a long prompt's context does not keep a short prompt's decode speculating. A round's
cost also counts the target's work between rounds, outside the phases (asking the drafter for the next pool,
with a head's features). b = 0 rounds do not ask the drafter for a pool at all, so speculation switched off
costs a plain round. Switching speculation on costs more than a steady round: before a decode's first round
the drafter's prefill shares the device with the target's (`start`), after plain rounds the drafter ingests
the tokens it missed before it grows a pool (`catch_up`). The catch-up is spread over the rounds it is
expected to serve: as many as the setting's speculative runs have lasted (a running mean, `run`), at most as
many as the rest of the decode takes. Where
speculation pays throughout (a run lasts the decode) a switch is nearly free; where runs end after a round or
two, a switch must pay for itself almost at once. Starting the drafter (before the first round, or later in a
decode that started plain) is spread the same way, over at least START_ROUNDS: it serves the rest of the
decode only where speculation lasts, and where the setting's runs end after a few rounds (a drafter as costly
as the target, whose start beside a long prompt's prefill costs more than its few rounds gain) a long prompt's
decode starts plain; what it adds to the target's prefill follows decodes' prefills, those beside a starting
drafter and those alone (start-up times the target's prefill of a scratch prompt alone and beside a
standalone drafter's start on it, its prefill and first pool, as a decode's first round starts it).
Any tree is verified exactly, so the choice never changes the output's law.
"""

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


def anchored(optimistic: np.ndarray, hits: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """(cap,) the optimistic prior (worth PRIOR_WEIGHT rounds) beside what rounds showed, `hits` of `seen` by
    rank (worth at most EXPERIENCE rounds, so that a decode's own recent rounds soon outweigh them)."""
    weight = np.minimum(seen, EXPERIENCE)
    shown = np.divide(hits, seen, out=np.zeros(len(seen)), where=seen > 0)
    return (PRIOR_WEIGHT * optimistic + weight * shown) / (PRIOR_WEIGHT + weight)


def capped(seen: float, estimate: float) -> float:
    """A timing as it moves `estimate`: at most SPIKE times it (an estimate of 0 is not yet one). A moment in
    which another process took the cores (a tree pass of seconds where it takes 50 ms) would otherwise make a
    pass look dear for many rounds, and a size that looks dear is not chosen, so not timed again; a lasting
    slowdown still raises the estimate round by round."""
    return min(seen, SPIKE * estimate) if estimate > 0 else seen


@dataclass(frozen=True, slots=True)
class MeasuredPasses:
    """This device's pass times, timed once at start-up (target_proc.costs.measure): seconds of a plain pass, of
    a root pass beside the drafter (`overlapped`), of tree passes by candidate size without (`tree`, the
    root-pass rules) and with (`tree_with_root`, `draft`) the root's row, seconds per token of the prefill,
    alone and beside the drafter, and seconds from asking the drafter for a pool after a one-token commit to
    having it (`pool`; 0: not timed)."""

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
    passes by size as timed at start-up (only the candidate sizes are needed), which take `scale` times
    that now; seconds per token of the target's prefill, alone and beside the drafter's (timed on one scratch
    prompt, so that their difference is the sharing's cost alone, then following decodes' prefills); and
    seconds per token the drafter missed, added to the wait of a speculative round that follows plain ones
    (learnt from such rounds: 0 until one ran).

    The speculative costs follow what steady rounds take, and a plain round, which cannot time them, moves
    them back toward their typical values (the median of recent timings, itself returning slowly to what
    start-up timed): a load spike at the moment speculation went off, or a drafter slowed by a long context,
    does not stay frozen in them. A tree pass of
    any size moves the one `scale` of all: sizes keep the proportions timed at start-up, so that a size
    whose last passes met a slow moment does not look dearer than the others, and lose its turn, for good."""

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
        adds to the target's; `late` (a decode that started plain), the wait for its prefill, taken to be
        as long as the target's own beside it."""
        return (self.prefill_shared if late else max(0.0, self.prefill_shared - self.prefill)) * tokens

    def prefilled(self, tokens: int, seconds: float, started: int = 0) -> None:
        """A decode's prefill of `tokens` took `seconds`, beside a drafter starting on `started` tokens (0: the
        drafter was not started): the per-token cost it witnesses moves COST_RATE of the way to it. Beside a
        drafter, what the prefill took beyond the alone cost is charged to the drafter's tokens, as start()
        charges it."""
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
        """A speculative round's timings (None: not a steady one's, or not run); its root pass, scaled by
        `solo`, moves the plain cost ROOT_RATE of the way. In a round without one (`draft`'s), the plain pass
        start-up timed, at the scale the tree pass shows, moves it down only: a plain cost learnt on a longer
        context (dearer passes) must not keep a short one's decode speculating where plain rounds would be
        faster, while a slow moment of tree passes (load, or a drafter sharing the device) says nothing of
        plain rounds, which time themselves."""
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
        """A plain round: each speculative cost moves `rate` of the way back to its typical value, which itself
        moves LINGER of the way back to what start-up timed: timings that a burst of load made dear keep
        speculation off for a few hundred plain rounds, not for the rest of the session."""
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
        """The candidate b of most expected tokens per second (the smaller b on a tie), a speculative b's
        discounted by MARGIN. switch: seconds the
        drafter's catch-up would cost (PassCosts.switch; 0 while speculation is on), spread over the rounds
        it would serve: the mean run, at most the rounds that `left` tokens take; start: seconds starting
        the drafter would cost (PassCosts.start), spread the same way over at least START_ROUNDS. While the
        ledger is in debt (`balance` below 0), or cannot cover what switching on costs beyond its round (see
        `affordable`), speculation is not switched on: see `ledger`."""
        if self.streak == 0 and (self.balance < 0 or not self.affordable(switch + start, left)):
            return 0
        tokens = np.cumsum(np.concatenate([[1.0], self.accept]))[list(self.sizes)]  # tokens(b), every b at once
        rounds = np.maximum(1.0, left / tokens)
        extra = switch / np.minimum(self.run, rounds) + start / np.minimum(max(self.run, START_ROUNDS), rounds)
        extra[0] = 0.0  # sizes[0] is 0: a plain round switches nothing on
        rates = tokens / (np.array([self.costs.round(b) for b in self.sizes]) + extra)
        rates[1:] /= 1 + MARGIN  # speculation must promise more than plain decoding to be worth its spread
        return self.sizes[int(np.argmax(rates))]

    def affordable(self, seconds: float, left: float) -> bool:
        """Whether a try may spend `seconds` switching speculation on (the drafter's start or catch-up), which
        it loses whatever its rounds accept: only what the ledger holds and TRY_SHARE of the plain rounds that
        the `left` tokens of the decode would take. A drafter as costly as the target, started beside a long
        prompt's prefill, costs about ten plain rounds on two CPU cores: spread over the rounds it would
        serve it may look worth it, and where those rounds merely break even the decode loses it all."""
        return seconds <= self.balance + TRY_SHARE * self.costs.plain * left

    def observe(self, on_path: np.ndarray, b: int, *, front: float | None = None, tree: float | None = None,
                plain: float | None = None, caught_up: tuple[float, int] | None = None,
                root: float | None = None) -> None:
        """One round that ran at budget b: on_path (n,) bool, whether its tree's node of rank k was accepted
        (n <= b: a tree may hold fewer nodes than its budget), and its timings (None: not run): `front` of a
        steady round, or `caught_up`, the front of a round after plain ones and the tokens the drafter missed;
        `root`, a speculative round's root pass with its commit (what a plain round's pass would be)."""
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
        """Keep the account of what tries of speculation saved: a try (the first round of a run of speculative
        rounds, which pays the drafter's catch-up) adds what its tokens would have cost in plain rounds less
        what it took (its wait and its tree pass, at most SPIKE times their estimates once a catch-up has
        been timed; the estimates where untimed), a plain round TRY_SHARE of what it took. A try that loses
        puts the account in debt, and speculation stays off until plain rounds have paid it back: what tries
        lose stays within TRY_SHARE of plain decoding's time (and one try), however often the estimates call
        for one (a drafter as costly as the target on a shared machine, whose slow moments make plain rounds
        look dear), while tries that paid leave the decode free to try again at once after a dip. A try that
        started the drafter beside the prefill has paid its start (AutoPolicy.prefilled), and the rounds of
        its run pay it back; the later rounds of other runs are the estimates' to judge: they switch
        speculation off when it stops paying. A try switches speculation on only where the account, with
        TRY_SHARE of the decode's plain rounds still to come, covers the start or catch-up it would pay
        (`affordable`), so what a decode's tries lose stays within TRY_SHARE of its plain time, one try's
        rounds, and what earlier decodes' speculation saved: plain rounds' shares never pass to the next."""
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
    """What earlier decodes of one setting (decoder, temperature, cap) showed, for the next one's anchor.

    The anchor of a decode is the optimistic prior and the setting's acceptance by rank, the rounds weighing
    at most EXPERIENCE rounds. Each decode adds all the rounds it verified (its speculation switching off
    after a dip does not leave the dip to stand for it), and what the decodes before it showed keeps RECALL
    of its weight, so with every decode that verified nothing their weight falls once they count fewer
    than EXPERIENCE rounds.
    """

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
    or the pool it waits for when that takes longer (the drafter drafts during the root pass); `draft` waits
    for the pool, then scores the root in its tree pass. Without `whole_pool` (cut pools: a round takes the
    levels grown by the end of its root pass) the pool's time is not what a round waits: rounds teach it."""
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
        then what it took beyond the prefill alone (at most SPIKE times the start's estimate: a start priced
        at nothing, a head's or one on a device of its own, is charged nothing) is the try's, and the ledger
        pays it."""
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
        """Feed one round to the estimates: which ranks were accepted, and what the round cost: its phases,
        and `outside` them the target's work between it and the round before (asking the drafter for its
        pool, with the target's features for a head: a few ms a round on a CPU, where a head's whole round
        costs little more than a plain one). Its wait for the drafter is a steady one only when the round
        before speculated too: before the first round the drafter ingests the prompt (a cost of the
        prefill), after plain ones the tokens it missed (a switch's cost, learnt apart; none when the drafter
        started only now, its prefill being a start's)."""
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
    """What budget auto keeps across a session's decodes: this device's pass times per cap (timed once, by
    `measure(cap)`), the costs per (decoder, cap, drafting) that rounds refresh, and each setting's Experience.
    `drafting` (DecodeConfig.drafting: how the drafter works) changes what rounds cost and accept, so decodes
    drafting otherwise learn apart."""

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
