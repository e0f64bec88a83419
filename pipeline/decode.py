"""The round loop of every decoder (DESIGN.md section 5), written against two small interfaces.

`TargetRunner` is the target model with its KV cache; `DrafterClient` is the drafter, local or in another
process. The loop knows nothing of devices or sockets: the runner returns logits on its own device, the
loop draws on that device and reads back only the drawn ids (one host-device sync per pass).

A round is one of three flows: plain decoding (one target pass: `ar`, or any rule at budget 0), and by the
rule's row in pipeline.rules either a tree pass that scores the root with the tree, or a root pass while
the drafter works followed by a tree pass beneath the drawn first token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from pipeline.budget import AutoBudget, Experience, PassCosts, ranks_on_path
from pipeline.config import AUTO, DecodeConfig
from pipeline.pool import ROOT, Pool
from pipeline.rules import RULES, RootDraw, Rule
from pipeline.sampling import Filtered
from pipeline.tree import Tree
from pipeline.verify import RowDraws, draw, traverse


class TargetRunner(Protocol):
    device: torch.device

    def prefill(self, tokens: Sequence[int], overlapped: bool | Callable[[], bool] = False) -> None:
        """Write the KV of the committed context except its last token (the first root).

        overlapped (here and in root_pass): the drafter works during this pass, so a CPU runner leaves
        it its share of the cores; here also a check of whether the drafter still works.
        """

    def root_pass(self, root: int, overlapped: bool = False) -> torch.Tensor:
        """One-token pass on the root: writes its KV, returns its (V,) float32 logits."""

    def tree_pass(self, tree: Tree, root: int | None) -> torch.Tensor:
        """Score the tree under the tree mask -> (len(tree) [+1], V) float32 logits.

        With `root`, the root is scored in the same pass as row 0 (its KV is written too); without, its
        KV must already be there from `root_pass`.
        """

    def commit(self, accepted: Sequence[int]) -> None:
        """Keep the root and the accepted tree nodes (tree indices, a root path) in the KV cache."""

    def synchronize(self) -> None:
        """Wait for queued device work (a host-device sync)."""


class DrafterClient(Protocol):
    def start(self, prompt: Sequence[int]) -> None:
        """Begin a request; the drafter grows the pool of round 0 from the whole prompt."""

    def commit(self, tokens: Sequence[int]) -> None:
        """Send the tokens the last round emitted; the drafter grows the next round's pool."""

    def pool(self) -> tuple[Pool, float]:
        """Wait for the current round's pool -> (pool, drafter's seconds spent growing it)."""

    def has_pool(self) -> bool:
        """Whether the current round's pool has arrived (without waiting)."""

    def end(self) -> None:
        """End the request; the drafter drops its state."""


# Phases of a round, in Round.phases: the drafter's own time growing the pool, then the target's steps.
PHASES = ("draft", "root", "wait", "select", "tree", "commit")


@dataclass(slots=True)
class Round:
    accepted: int  # tree nodes accepted (a drawn first token that is a tree node counts)
    tree_size: int  # nodes verified in the tree pass; 0 when no tree pass ran
    emitted: int  # accepted + 1 continuation: the round's accept length, bonus token included
    phases: dict[str, float]  # seconds per phase: draft (drafter side), root, wait, select, tree, commit
    available: int = 0  # with a first draw X1: X1 plus its pool descendants (the tree size cap c would give
    #                     is min(c, available)); 0 for decoders without a first draw
    tried: int = 0  # tree depths at which a draw met candidate children: accepted, plus one when the walk
    #                 ended at a node that had children (a rejection rather than the end of the tree)
    budget: int = 0  # the budget this round ran with (budget auto's choice; 0: plain decoding)


@dataclass(slots=True)
class DecodeResult:
    tokens: list[int]  # the output: new tokens up to the first end-of-sequence token, at most the limit
    rounds: list[Round]
    target_passes: int  # target passes after the prefill
    seconds: float  # start of the prefill to the last commit
    hit_limit: bool  # the output was cut by the limit, not ended by an end-of-sequence token
    prefill_seconds: float = 0.0
    beyond: list[int] = field(default_factory=list)  # what the last round produced past the limit (up to
    #                                                  its end-of-sequence token): verified, not output

    @property
    def overshoot(self) -> int:
        return len(self.beyond)

    @property
    def round_tokens(self) -> int:
        """Tokens up to the first end-of-sequence token with the last round whole (the paper's count)."""
        return len(self.tokens) + self.overshoot

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0


class _Phases:
    """Host wall time per phase of one round. Phases end at a host read of device data or a sync."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - t0


@dataclass(slots=True)
class _Step:
    """What one round decided, before its commit."""

    tree: Tree | None  # None: no tree pass ran
    accepted: list[int]  # tree indices of the accepted root path
    continuation: int
    passes: int  # target passes this round
    draft_seconds: float = 0.0
    available: int = 0
    tried: int = 0  # see Round.tried
    on_path: np.ndarray | None = None  # (len(tree),) by rank, whether the node was accepted (budget auto)


def decode(target: TargetRunner, drafter: DrafterClient | None, prompt: Sequence[int], config: DecodeConfig,
           eos: frozenset[int], generator: torch.Generator | None, *, sync_phases: bool = False,
           costs: PassCosts | None = None, experience: Experience | None = None,
           on_tokens: Callable[[list[int]], None] | None = None) -> DecodeResult:
    """Run one decode of `prompt` (token ids, at least one) with the rule and settings of `config`.

    Each round's budget is config.budget, or with budget "auto" the choice of pipeline.budget from `costs`
    (this device's pass costs, which rounds refresh) and `experience` (what earlier decodes of the setting
    showed, which this one adds to). A round of budget 0 is plain decoding: it neither
    asks the drafter for a pool nor waits for one; the drafter learns its tokens with the next pool it grows.

    Phases that produce tokens end in a host read, so their host times include their device work. The
    commit's device work is queued asynchronously; `sync_phases` waits for it inside the commit phase
    (a host-device sync per round, for profiling runs only). `on_tokens` gets each round's new output
    tokens as the round commits them (streaming).
    """
    rule = RULES[config.decoder]
    if len(prompt) < 1:
        raise ValueError("`prompt` must hold at least one token")
    if rule.select is not None and drafter is None:
        raise ValueError(f"decoder {rule.name!r} needs a drafter")
    if config.budget == AUTO and rule.select is not None and costs is None:
        raise ValueError("budget auto needs the pass costs of this device")
    auto = AutoBudget(costs, config.budget_max, experience) if config.budget == AUTO and rule.select else None
    rounds = _Rounds(target, drafter, rule, config, generator)
    choose = (lambda switch, left, start: 0) if rule.select is None else auto.choose if auto else \
        (lambda switch, left, start: config.budget)
    history = [int(t) for t in prompt]  # the committed context
    told = 0  # tokens of `history` the drafter holds; 0 before its first pool
    out: list[int] = []
    log: list[Round] = []
    passes = 0
    t_start = time.perf_counter()
    budget = choose(0.0, config.max_new_tokens, auto.costs.start(len(history) - 1) if auto else 0.0)
    if budget:
        drafter.start(history)  # the drafter's prefill overlaps the target's, until its first pool is there
        told = len(history)
    target.prefill(history[:-1], overlapped=(lambda: not drafter.has_pool()) if budget else False)
    target.synchronize()
    prefill_seconds = time.perf_counter() - t_start
    previous, missed = None, 0  # the budget of the round before (None: none), tokens the drafter missed
    while True:
        rounds.phase = _Phases()
        step = rounds.run(history[-1], budget)
        with rounds.phase("commit"):
            target.commit(step.accepted)
            if sync_phases:
                target.synchronize()
        emitted = (step.tree.token[step.accepted].tolist() if step.accepted else []) + [step.continuation]
        rounds.phase.times["draft"] = step.draft_seconds
        log.append(Round(len(step.accepted), len(step.tree) if step.tree is not None else 0, len(emitted),
                         rounds.phase.times, step.available, step.tried, budget))
        if auto is not None:
            _observe(auto, step, budget, rounds.phase.times, previous, missed)
        passes += step.passes
        stop = next((i for i, t in enumerate(emitted) if t in eos), None)
        if on_tokens is not None:  # streaming: what this round adds to the output, cut at the limit
            new = (emitted if stop is None else emitted[: stop + 1])[: max(0, config.max_new_tokens - len(out))]
            if new:
                on_tokens(new)
        out.extend(emitted if stop is None else emitted[: stop + 1])
        if stop is not None or len(out) >= config.max_new_tokens:
            break
        history += emitted
        previous, missed = budget, len(history) - told if told else 0  # 0: the drafter has not started
        left = config.max_new_tokens - len(out)
        if auto and not told:  # a decode that started plain: the drafter's start serves the rest of it
            budget = choose(0.0, left, auto.costs.start(len(history), late=True))
        else:  # after plain rounds the drafter first ingests what it missed: that serves a run of rounds
            budget = choose(auto.costs.switch(missed) if auto and previous == 0 else 0.0, left, 0.0)
        if budget:  # ask for the next round's pool, with every token the drafter has not seen
            drafter.commit(history[told:]) if told else drafter.start(history)
            told = len(history)
    target.synchronize()
    seconds = time.perf_counter() - t_start
    if told:
        drafter.end()
    if auto is not None and experience is not None:
        experience.learn(auto)
    # The last round is verified whole (the paper's protocol); the output stops at the limit, as generate's
    # max_new_tokens and every serving API do.
    limit = config.max_new_tokens
    return DecodeResult(out[:limit], log, passes, seconds, len(out) >= limit and (stop is None or len(out) > limit),
                        prefill_seconds, out[limit:])


def _observe(auto: AutoBudget, step: _Step, budget: int, times: dict[str, float], previous: int | None,
             missed: int) -> None:
    """Feed one round to the budget's estimates: which ranks were accepted, and what the round cost. Its
    wait for the drafter is a steady one only when the round before speculated too: before the first round
    the drafter ingests the prompt (a cost of the prefill), after plain ones the `missed` tokens (a switch's
    cost, learnt apart; 0 when the drafter started only now, its prefill being a start's)."""
    if budget == 0:
        auto.observe(np.zeros(0, bool), 0, plain=times["root"] + times["commit"])
    else:
        front = times.get("root", 0.0) + times["wait"] + times["select"] + times["commit"]
        on_path = np.zeros(min(budget, auto.cap), bool)  # ranks the tree could not fill count as refused:
        on_path[: len(step.on_path)] = step.on_path     # a budget buys them only when the pool has them
        auto.observe(on_path, budget, front=front if previous else None, tree=times.get("tree"),
                     caught_up=(front, missed) if previous == 0 else None)


class _Rounds:
    """The three round flows of one decode, each a small function of the round's root and budget."""

    def __init__(self, target: TargetRunner, drafter: DrafterClient | None, rule: Rule, config: DecodeConfig,
                 generator: torch.Generator | None) -> None:
        if config.filters.active and config.temperature > 0:  # every draw takes the same transformed rows
            target = Filtered(target, config.temperature, config.filters)
        self.target, self.drafter, self.rule = target, drafter, rule
        self.temperature, self.generator = config.temperature, generator
        self.lazy = target.device.type == "cpu"  # see RowDraws
        self.track = config.budget == AUTO  # record which ranks were accepted
        self.phase = _Phases()

    def run(self, root: int, budget: int) -> _Step:
        if budget == 0:
            return self.plain(root)
        return self.pipelined(root, budget) if self.rule.root_pass else self.tree(root, budget)

    def plain(self, root: int) -> _Step:
        """`ar`, or a round of budget 0: one pass on the root, its draw is the round's only token."""
        with self.phase("root"):
            token = int(draw(self.target.root_pass(root)[None], self.temperature, self.generator)[0])  # sync
        return _Step(None, [], token, 1)

    def tree(self, root: int, budget: int) -> _Step:
        """Wait for the pool, select, then score the root and the tree in one pass."""
        with self.phase("wait"):
            pool, draft_seconds = self.drafter.pool()
        with self.phase("select"):
            tree = self.rule.select(pool, budget, None)
        with self.phase("tree"):  # row 0 is the root's, row 1 + i tree node i's
            accepted, continuation = verify(tree, self.target.tree_pass(tree, root), None, self.temperature,
                                            self.generator, self.lazy)
        return _Step(tree, accepted, continuation, 1, draft_seconds, tried=depths_tried(tree, accepted),
                     on_path=self._on_path(pool, tree, accepted))

    def pipelined(self, root: int, budget: int) -> _Step:
        """Root pass while the drafter works, draw X1, select beneath it, verify the tree in a second pass."""
        with self.phase("root"):
            first = root_draw(self.target, root, self.temperature, self.generator)
        with self.phase("wait"):
            pool, draft_seconds = self.drafter.pool()
        with self.phase("select"):
            tree = self.rule.select(pool, budget, first)
        u = pool.first_level(first.token)
        available = 1 if u < 0 else int(np.count_nonzero(pool.top == u))
        if tree.child(ROOT, first.token) < 0:  # `root` only: the draw is off the tree, it is the continuation
            return _Step(None, [], first.token, 1, draft_seconds, available, tried=1,
                         on_path=np.zeros(len(tree), bool) if self.track else None)
        with self.phase("tree"):
            accepted, continuation = verify(tree, self.target.tree_pass(tree, None), first.token,
                                            self.temperature, self.generator, self.lazy)
        return _Step(tree, accepted, continuation, 2, draft_seconds, available, depths_tried(tree, accepted),
                     self._on_path(pool, tree, accepted))

    def _on_path(self, pool: Pool, tree: Tree, accepted: list[int]) -> np.ndarray | None:
        if not self.track:
            return None
        inside = np.maximum(tree.node, 0)  # a drawn token the pool lacks ranks first: it is alone in its tree
        cum = np.where(tree.node >= 0, pool.cum[inside], 0.0)
        return ranks_on_path(cum, tree.depth, tree.node, accepted)


def root_draw(target: TargetRunner, root: int, temperature: float, generator: torch.Generator | None) -> RootDraw:
    """The root pass (it runs while the drafter grows the pool) and the target's draw X1 from its row."""
    row = target.root_pass(root, overlapped=True)
    return RootDraw(int(draw(row[None], temperature, generator)[0]), row, temperature)  # host read: a sync


def depths_tried(tree: Tree, accepted: list[int]) -> int:
    """Depths at which the walk compared a draw with candidate children: each accepted node's, plus the
    depth below the last node reached when that node has children in the tree."""
    last = accepted[-1] if accepted else ROOT
    return len(accepted) + int(bool(np.any(tree.parent == last)))


def verify(tree: Tree, logits: torch.Tensor, first: int | None, temperature: float,
           generator: torch.Generator | None, lazy: bool) -> tuple[list[int], int]:
    """Exhaustive target sampling over one tree pass -> (accepted tree indices, continuation).

    logits: (len(tree), V) rows of the tree's nodes when `first` (the root's draw) is given, else
    (1 + len(tree), V) with the root's row first. Reading a draw is a host read (a sync).
    """
    draws = RowDraws(logits, temperature, generator, lazy)
    if first is None:
        return traverse(tree, draws[0], draws.shifted(1))
    return traverse(tree, first, draws)
