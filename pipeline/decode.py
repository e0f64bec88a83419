"""The round loop of every decoder (DESIGN.md section 5), written against two small interfaces.

`TargetRunner` is the target model with its KV cache; `DrafterClient` is the drafter, local or in another
process. The loop knows nothing of devices or sockets: the runner returns logits on its own device, the loop
draws there and reads back only the drawn ids (one host-device sync per pass). A round runs the flow its rule's
row in pipeline.rules names (pipeline.rules.Flow): plain, tree pass with the root, pipelined, or covering."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from pipeline.ahead import NOT_TRIED, Drafted, predicted_tokens
from pipeline.budget import Experience, PassCosts, budget_policy, ranks_on_path
from pipeline.config import ConfigError
from pipeline.cut import NOW, WEIGH
from pipeline.pool import ROOT, Pool
from pipeline.feed import DrafterFeed
from pipeline.lookup import ContextLookup
from pipeline.result import DecodeResult, Phases, Round
from pipeline.rules import RULES, Flow, RootDraw, Rule
from pipeline.sampling import Filtered
from pipeline.settings import DecodeConfig
from pipeline.tree import Tree
from pipeline.verify import STOPPINGS, draw, verify_tree

SAMPLED_LEAF = STOPPINGS["sampled-leaf"]


class TargetRunner(Protocol):
    device: torch.device

    def prefill(self, tokens: Sequence[int], overlapped: bool | Callable[[], bool] = False) -> None:
        """Write the KV of the committed context except its last token (the first root).
        overlapped (here and in root_pass): the drafter works during this pass, so a CPU runner leaves it its share of
        the cores; here also a check of whether the drafter still works."""

    def root_pass(self, root: int, overlapped: bool = False) -> torch.Tensor:
        """One-token pass on the root: writes its KV, returns its (V,) float32 logits."""

    def tree_pass(self, tree: Tree, root: int | None, overlapped: bool = False) -> torch.Tensor:
        """Score the tree under the tree mask -> (len(tree) [+1], V) float32 logits.
        With `root`, the root is scored in the same pass as row 0 (its KV is written too); without, its KV must already
        be there from `root_pass`. overlapped: the drafter drafts ahead meanwhile."""

    def commit(self, accepted: Sequence[int], keep: int | None = None) -> None:
        """Keep the root and the accepted tree nodes (tree indices, a root path) in the KV cache; with `keep`
        (a tree node of the last pass, the continuation), its K/V as the next round's root, so that the next
        tree pass need not score the root."""

    def synchronize(self) -> None:
        """Wait for queued device work (a host-device sync)."""

    def features(self, start: int, stop: int) -> torch.Tensor:
        """(stop - start, F) the kept inputs of the layers an EAGLE-3 drafter fuses, at committed positions
        [start, stop); called only for a drafter that takes them (DrafterClient.wants_features)."""


class Observer(Protocol):
    def __call__(self, step: Step, root: int, budget: int) -> None:
        """See decode's `observe`: the round's step (its commit done), its root token and its budget."""


class StopCheck(Protocol):
    def __call__(self, output: Sequence[int], new: Sequence[int]) -> int | None:
        """The index in `new` of the first token at which the output (`output`, then `new`) ends, or None.
        Called with each round's tokens before they join `output`; decode passes no token twice."""


class DrafterClient(Protocol):
    wants_features: bool  # an EAGLE-3 head: start and commit carry the target's features (pipeline.feed)

    def start(self, prompt: Sequence[int], features: torch.Tensor | None = None) -> None:
        """Begin a request; the drafter grows its first pool from these tokens (the context, or its last
        DecodeConfig.drafter_window tokens), as a prompt of their own. features: (len(prompt) - 1, F) those of
        the prompt's tokens but the last, for a drafter that takes them."""

    def commit(self, tokens: Sequence[int], features: torch.Tensor | None = None) -> None:
        """Send the tokens the last round emitted; the drafter grows the next round's pool. features:
        (len(tokens), F) those of the token before each, for a drafter that takes them."""

    def ahead(self, tokens: Sequence[int]) -> None:
        """The path this round will most probably accept (pipeline.ahead): the drafter may grow the next
        round's pool from there while the target verifies. Only called with DecodeConfig.ahead."""

    def waiting(self, cut: int = 0) -> None:
        """This side is about to wait for the current round's pool with nothing else to do: a drafter that
        shares its CPU may take its cores until it sends the pool. With `cut` (DecodeConfig.cut_pools:
        pipeline.cut's NOW, or WEIGH with cut_weigh), it asks for the pool now and takes its first levels: the
        drafter ends it at the level in progress (NOW), or grows on while a level pays (WEIGH)."""

    def pool(self) -> Drafted:
        """Wait for the current round's pool, with the drafter's seconds on it."""

    def has_pool(self) -> bool:
        """Whether the current round's pool has arrived (without waiting)."""

    def end(self) -> None:
        """End the request; the drafter drops its state."""


class _Phases:
    """Host wall time per phase of one round. Phases end at a host read of device data or a sync."""

    def __init__(self) -> None:
        self.times = Phases()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.times.add(name, time.perf_counter() - t0)


@dataclass(slots=True, kw_only=True)
class Step:
    """What one round did, its commit included: what it verified, what it accepted and what it cost."""

    tree: Tree | None  # None: no tree pass ran
    accepted: list[int]  # tree indices of the accepted root path
    continuation: int
    passes: int  # target passes this round
    draft_seconds: float = 0.0
    available: int = 0
    tried: int = 0  # see Round.tried
    on_path: np.ndarray | None = None  # (len(tree),) by rank, whether the node was accepted (budget auto)
    pool: Pool | None = None  # the drafter's pool (None: a plain round)
    ahead: int = NOT_TRIED  # whether this round's pool was grown ahead (pipeline.ahead: HIT, MISSED)
    ahead_seconds: float = 0.0  # on a hit, the drafting done before the round before committed
    root_row: torch.Tensor | None = None  # (V,) the root's logits: the root pass's, or row 0 of draft's tree pass
    tree_rows: torch.Tensor | None = None  # (len(tree), V) the tree pass's logits of the tree's nodes, valid
    #                                         until the target's next pass (a measurement copies what it keeps)
    keep: int | None = None  # a tree node whose K/V the commit keeps as the next root's (`cover`, covered)
    held: bool = False  # the round drew from its root's row held from the pass before (no root scored)
    copied: int = 0  # accepted tokens the context lookup's chain alone proposed
    pool_depth: int = 0  # levels of the pool the drafter sent (0: a plain round)
    phases: Phases = field(default_factory=Phases)

    @property
    def emitted(self) -> list[int]:
        """The accepted tree tokens, then the continuation."""
        return (self.tree.token[self.accepted].tolist() if self.accepted else []) + [self.continuation]

    def round(self, budget: int, feature_bytes: int = 0) -> Round:
        """The round's record; feature_bytes: what the request for its pool carried of the target's features."""
        tree_size = len(self.tree) if self.tree is not None else 0
        return Round(accepted=len(self.accepted), tree_size=tree_size, emitted=len(self.accepted) + 1,
                     phases=self.phases, available=self.available, tried=self.tried, budget=budget,
                     ahead=self.ahead, ahead_seconds=self.ahead_seconds, pool_depth=self.pool_depth,
                     held_row=self.held, feature_bytes=feature_bytes if self.pool is not None else 0,
                     copied=self.copied)


def decode(target: TargetRunner, drafter: DrafterClient | None, prompt: Sequence[int], config: DecodeConfig,
           eos: frozenset[int], generator: torch.Generator | None, *, sync_phases: bool = False,
           costs: PassCosts | None = None, experience: Experience | None = None,
           observe: Observer | None = None, on_tokens: Callable[[list[int]], None] | None = None,
           stop_check: StopCheck | None = None) -> DecodeResult:
    """One decode of `prompt` (token ids, at least one) by `config`'s rule: the paper's round until the limit.
    The output ends at its first `eos` token (unless `config.ignore_eos`) or `config.stop_token_ids` token, or at the
    token from which `stop_check` (the caller's stop strings, checked on the text) says it ends, that token included;
    the round that reaches it is the last, and the tokens it verified after that stop are dropped, as after an
    end-of-sequence token. Stopping changes no law: a decode stops at the same token whatever its rule. Budgets:
    pipeline.budget's policy (auto: from `costs`, this device's, and `experience`, the setting's earlier decodes).
    Phases end in a host read; `sync_phases` also waits for each commit (a sync a round). `observe` sees each round
    after its commit (a measurement, left out of the decode's time); `on_tokens` gets what each round adds to the
    output, as it commits it (streaming)."""
    rule = RULES[config.decoder]
    _check(rule, prompt, drafter, config)
    policy = budget_policy(rule.select is not None, config.budget, config.budget_max, costs, experience)
    history = [int(t) for t in prompt]
    lookup = ContextLookup(history, config.lookup) if config.lookup and rule.select is not None else None
    rounds = _Rounds(target, drafter, rule, config, generator, policy.tracks, sync_phases, observe, lookup)
    feed = DrafterFeed(drafter, config.drafter_window, target.features if takes_features(drafter) else None)
    stops = _Stops(frozenset() if config.ignore_eos else eos, frozenset(config.stop_token_ids), stop_check)
    out, log, passes, t_start = [], [], 0, time.perf_counter()
    budget = policy.first(feed, len(history) - 1, config.max_new_tokens)
    prefill_seconds = _prefill(target, feed, history, budget, t_start)
    policy.prefilled(feed, len(history) - 1, prefill_seconds)
    rounds.mark = time.perf_counter()
    while True:
        step = rounds.run(history[-1], budget)
        log.append(step.round(budget, feed.feature_bytes))  # the last request asked for this round's pool
        policy.observe(step.on_path, budget, step.phases, feed, rounds.outside(step))
        passes += step.passes
        emitted = step.emitted
        stop = _extend(out, emitted, stops, config.max_new_tokens, on_tokens)
        if stop is not None or len(out) >= config.max_new_tokens:
            break
        history += emitted
        if lookup is not None:
            lookup.extend(emitted)
        feed.ran(budget, history)
        budget = policy.next(feed, len(history), config.max_new_tokens - len(out))
        if budget:
            feed.ask(history)
    target.synchronize()
    seconds = time.perf_counter() - t_start - rounds.observed
    feed.end()
    policy.end()
    return _result(out, config.max_new_tokens, stop, log, passes, seconds, prefill_seconds)


@dataclass(frozen=True, slots=True)
class _Stops:
    """Where a round's tokens end the output: an end-of-sequence token, a stop token id, or `check`'s word."""

    eos: frozenset[int]
    ids: frozenset[int]
    check: StopCheck | None

    def first(self, output: list[int], emitted: list[int]) -> tuple[int, str] | None:
        """(index in `emitted` of the first token the output ends with, its FINISHES reason), or None."""
        found = next(((i, "eos" if t in self.eos else "stop_token_id") for i, t in enumerate(emitted)
                      if t in self.eos or t in self.ids), None)
        if self.check is not None:
            within = emitted if found is None else emitted[: found[0]]  # a string completed before the token
            if (i := self.check(output, within)) is not None:
                return i, "stop_string"
        return found


def _extend(out: list[int], emitted: list[int], stops: _Stops, limit: int,
            on_tokens: Callable[[list[int]], None] | None) -> str | None:
    """Append a round's tokens, up to its first stop (included), to `out` -> that stop's FINISHES reason, or
    None. `on_tokens` gets what the output gains, cut at the limit."""
    stop = stops.first(out, emitted)
    new = emitted if stop is None else emitted[: stop[0] + 1]
    if on_tokens is not None and (shown := new[: max(0, limit - len(out))]):
        on_tokens(shown)
    out.extend(new)
    return None if stop is None else stop[1]


def _prefill(target: TargetRunner, feed: DrafterFeed, history: list[int], budget: int, t_start: float) -> float:
    """The target's prefill of the context before the root -> seconds since t_start. With a first budget the
    drafter's prefill overlaps the target's, until its first pool is there; a drafter that takes the target's
    features starts after the prefill that computes them (its first pool overlaps the root pass)."""
    if budget and feed.features is None:
        feed.ask(history)
    target.prefill(history[:-1], overlapped=feed.waiting if budget and feed.features is None else False)
    if budget and feed.features is not None:
        feed.ask(history)
    target.synchronize()
    return time.perf_counter() - t_start


def _check(rule: Rule, prompt: Sequence[int], drafter: DrafterClient | None, config: DecodeConfig) -> None:
    if len(prompt) < 1:
        raise ValueError("`prompt` must hold at least one token")
    if rule.select is not None and drafter is None:
        raise ValueError(f"decoder {rule.name!r} needs a drafter")
    if takes_features(drafter):
        refuse_for_head(config)
        if len(prompt) < 2 or config.drafter_window == 1:
            raise ValueError("an EAGLE-3 drafter starts from two tokens at least (the features of one beside the "
                             "embedding of the next): `prompt` and `drafter_window` must hold two or more")


def takes_features(drafter: DrafterClient | None) -> bool:
    """Whether the drafter is an EAGLE-3 head, told the target's features with each commit."""
    return bool(getattr(drafter, "wants_features", False))


def refuse_for_head(config: DecodeConfig) -> None:
    """What an EAGLE-3 drafter cannot do, refused before any pass: drafting ahead grows a pool from tokens the
    target has not scored, whose features do not exist yet."""
    if config.ahead:
        raise ConfigError("ahead", "drafts from tokens the target has not scored yet, whose features an EAGLE-3 "
                          "drafter needs: it works with standalone drafters only")


def _result(out: list[int], limit: int, stop: str | None, log: list[Round], passes: int, seconds: float,
            prefill_seconds: float) -> DecodeResult:
    """The last round is verified whole (the paper's protocol); the output stops at the limit, as generate's
    max_new_tokens and every serving API do. A stop past the limit does not count: the limit cut first."""
    finish = "limit" if stop is None or len(out) > limit else stop
    return DecodeResult(out[:limit], log, passes, seconds, finish, prefill_seconds, out[limit:])


class _Rounds:
    """The round flows of one decode (pipeline.rules.Flow), each a method named for its flow and a small
    function of the round's root and budget."""

    def __init__(self, target: TargetRunner, drafter: DrafterClient | None, rule: Rule, config: DecodeConfig,
                 generator: torch.Generator | None, track: bool, sync: bool, observe: Observer | None,
                 lookup: ContextLookup | None = None) -> None:
        if config.filters.active and config.temperature > 0:  # every draw takes the same transformed rows
            target = Filtered(target, config.temperature, config.filters)
        self.target, self.drafter, self.rule = target, drafter, rule
        self.observe, self.observed = observe, 0.0  # observed: seconds spent in `observe` (not the decode's)
        self.mark, self.marked = 0.0, 0.0  # when the last round ended, and `observed` then (outside)
        self.temperature, self.generator = config.temperature, generator
        self.lazy = target.device.type == "cpu"  # see RowDraws
        self.track = track  # record which ranks were accepted (budget auto)
        self.sync = sync
        self.ahead = config.ahead and drafter is not None
        self.lend = config.lend_cores and self.lazy  # on the CPU: the drafter may share this side's cores
        # with cut pools the pool is asked for once the root pass is done (0: not)
        self.cut = (WEIGH if config.cut_weigh else NOW) if config.cut_pools and drafter is not None else 0
        self.lookup = lookup  # context lookup: its chain grafted into each pool (DecodeConfig.lookup)
        self.pool_depth = 0  # levels of the last pool the drafter sent (a grafted chain may reach deeper)
        self.held: torch.Tensor | None = None  # (V,) the next root's row when the last pass scored it (`cover`)
        # The rule's round when its budget is above 0 (a round of budget 0 is plain whatever the rule)
        self.flow = {Flow.PLAIN: None, Flow.TREE: self.tree, Flow.PIPELINED: self.pipelined,
                     Flow.COVERING: self.covering}[rule.flow]

    def run(self, root: int, budget: int) -> Step:
        """One round at `budget`, its commit included (and with `sync`, the commit's device work)."""
        phase = _Phases()
        if budget == 0 or self.flow is None:
            self.held = None  # a plain round scores its root again
            step = self.plain(root, phase)
        else:
            step = self.flow(root, budget, phase)
            step.pool_depth = self.pool_depth
            if self.lookup is not None:  # the chain grafted into this round's pool, against the target's draws
                step.copied = self.lookup.learn(step.emitted, len(step.accepted))
        with phase("commit"):
            self.target.commit(step.accepted, keep=step.keep)
            if self.sync:
                self.target.synchronize()
        phase.times.draft = step.draft_seconds
        step.phases = phase.times
        if self.observe is not None:  # after the commit and outside the phases: a measurement
            t0 = time.perf_counter()
            self.observe(step, root, budget)
            self.observed += time.perf_counter() - t0
        return step

    def outside(self, step: Step) -> float:
        """The target's seconds since the last round ended beyond this round's phases and measurements: the work
        between rounds (asking the drafter for this round's pool, with the target's features; its budget)."""
        now = time.perf_counter()
        seconds = now - self.mark - (self.observed - self.marked) - step.phases.on_target()
        self.mark, self.marked = now, self.observed
        return seconds

    def plain(self, root: int, phase: _Phases) -> Step:
        """`ar`, or a round of budget 0: one pass on the root, its draw is the round's only token."""
        with phase("root"):
            row = self.target.root_pass(root)
            token = int(draw(row[None], self.temperature, self.generator)[0])  # a host read: a sync
        return Step(tree=None, accepted=[], continuation=token, passes=1, root_row=row)

    def tree(self, root: int, budget: int, phase: _Phases) -> Step:
        """Wait for the pool, select, then score the root and the tree in one pass."""
        with phase("wait"):
            drafted = self._pool()
        with phase("select"):
            pool = self._graft(drafted)
            tree = self.rule.select(pool, budget, None)
            ahead = self._ahead(pool, tree, None)
        with phase("tree"):  # row 0 is the root's, row 1 + i tree node i's
            logits = self.target.tree_pass(tree, root, overlapped=ahead)
            accepted, continuation = verify_tree(tree, logits, None, self.temperature, self.generator, self.lazy)
        return Step(tree=tree, accepted=accepted, continuation=continuation, passes=1, draft_seconds=drafted.seconds,
                    tried=depths_tried(tree, accepted), on_path=self._on_path(pool, tree, accepted), pool=pool,
                    root_row=logits[0], tree_rows=logits[1:], ahead=drafted.ahead,
                    ahead_seconds=drafted.ahead_seconds)

    def pipelined(self, root: int, budget: int, phase: _Phases) -> Step:
        """Root pass while the drafter works, draw X1, select beneath it, verify the tree in a second pass."""
        with phase("root"):
            first = draw_root(self.target, root, self.temperature, self.generator)
        with phase("wait"):
            drafted = self._pool(self.cut)
        draft_seconds = drafted.seconds
        with phase("select"):
            pool = self._graft(drafted)
            tree = self.rule.select(pool, budget, first)
        u = pool.first_level(first.token)
        available = 1 if u < 0 else int(np.count_nonzero(pool.top == u))
        if tree.child(ROOT, first.token) < 0:  # `root` only: the draw is off the tree, it is the continuation
            return Step(tree=None, accepted=[], continuation=first.token, passes=1, draft_seconds=draft_seconds,
                        available=available, tried=1, on_path=np.zeros(len(tree), bool) if self.track else None,
                        pool=pool, root_row=first.row, ahead=drafted.ahead, ahead_seconds=drafted.ahead_seconds)
        with phase("select"):
            ahead = self._ahead(pool, tree, first.token)
        with phase("tree"):
            logits = self.target.tree_pass(tree, None, overlapped=ahead)
            accepted, continuation = verify_tree(tree, logits, first.token, self.temperature, self.generator,
                                                 self.lazy)
        return Step(tree=tree, accepted=accepted, continuation=continuation, passes=2, draft_seconds=draft_seconds,
                    available=available, tried=depths_tried(tree, accepted),
                    on_path=self._on_path(pool, tree, accepted), pool=pool, root_row=first.row, tree_rows=logits,
                    ahead=drafted.ahead, ahead_seconds=drafted.ahead_seconds)

    def covering(self, root: int, budget: int, phase: _Phases) -> Step:
        """`cover`: one tree pass a round, walked with sampled-leaf stopping. A round whose root's exact row the
        pass before scored (as a leaf it stopped at) draws X1 from that row and selects beneath it, scoring only
        the tree; any other verifies the rule's tree with the root scored in the same pass."""
        held, self.held = self.held, None
        first = None
        if held is not None:
            with phase("root"):  # no pass: the draw from the row already scored at this root
                first = RootDraw(int(draw(held[None], self.temperature, self.generator)[0]), held, self.temperature)
        with phase("wait"):
            drafted = self._pool()
        x1 = None if first is None else first.token
        with phase("select"):
            pool = self._graft(drafted)
            tree = self.rule.select(pool, budget, first)
            ahead = self._ahead(pool, tree, x1)
        with phase("tree"):
            logits = self.target.tree_pass(tree, root if first is None else None, overlapped=ahead)
            accepted, continuation = verify_tree(tree, logits, x1, self.temperature, self.generator, self.lazy,
                                                 SAMPLED_LEAF)
        rows = logits if first is not None else logits[1:]
        leaf = tree.child(accepted[-1] if accepted else ROOT, continuation)
        if leaf >= 0:  # covered: the next root's row, kept past any measurement pass before the next round
            self.held = rows[leaf].clone()
        available = 0 if x1 is None else 1 if (u := pool.first_level(x1)) < 0 else int(np.count_nonzero(pool.top == u))
        return Step(tree=tree, accepted=accepted, continuation=continuation, passes=1, draft_seconds=drafted.seconds,
                    available=available, tried=depths_tried(tree, accepted), on_path=self._on_path(pool, tree, accepted),
                    pool=pool, root_row=held if held is not None else logits[0], tree_rows=rows,
                    keep=leaf if leaf >= 0 else None, held=held is not None, ahead=drafted.ahead,
                    ahead_seconds=drafted.ahead_seconds)

    def _pool(self, cut: int = 0) -> Drafted:
        """Wait for the round's pool. On the CPU (with lend_cores) the drafter is told first, so it can take
        this side's cores; with `cut` it is asked for the pool at once, and sends the levels it has (told even
        when the pool is there: when the target asks is what a drafter that cuts its pools times them by)."""
        if cut or (self.lend and not self.drafter.has_pool()):
            self.drafter.waiting(cut)
        return self.drafter.pool()

    def _graft(self, drafted: Drafted) -> Pool:
        """The round's pool to select from: with context lookup, the drafter's with the context's chain grafted
        in (pipeline.lookup; in the select phase), its depth kept for the round's record."""
        self.pool_depth = int(drafted.pool.depth.max())
        return drafted.pool if self.lookup is None else self.lookup.graft(drafted.pool)

    def _ahead(self, pool: Pool, tree: Tree, first: int | None) -> bool:
        """With drafting ahead, tell the drafter where this round most probably ends -> whether it was told."""
        if not self.ahead or len(tokens := predicted_tokens(pool, tree, first, self.rule.covers)) == 0:
            return False
        self.drafter.ahead(tokens)
        return True

    def _on_path(self, pool: Pool, tree: Tree, accepted: list[int]) -> np.ndarray | None:
        if not self.track:
            return None
        inside = np.maximum(tree.node, 0)  # a drawn token the pool lacks ranks first: it is alone in its tree
        cum = np.where(tree.node >= 0, pool.cum[inside], 0.0)
        return ranks_on_path(cum, tree.depth, tree.node, accepted)


def draw_root(target: TargetRunner, root: int, temperature: float, generator: torch.Generator | None) -> RootDraw:
    """The root pass (it runs while the drafter grows the pool) and the target's draw X1 from its row."""
    row = target.root_pass(root, overlapped=True)
    return RootDraw(int(draw(row[None], temperature, generator)[0]), row, temperature)  # host read: a sync


def depths_tried(tree: Tree, accepted: list[int]) -> int:
    """Depths at which the walk compared a draw with candidate children: each accepted node's, plus the
    depth below the last node reached when that node has children in the tree."""
    last = accepted[-1] if accepted else ROOT
    return len(accepted) + int(bool(np.any(tree.parent == last)))
