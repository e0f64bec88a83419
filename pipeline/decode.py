"""The round loop of every decoder (DESIGN.md section 5), written against two small interfaces.

`TargetRunner` is the target model with its KV cache; `DrafterClient` is the drafter, local or in another
process. The loop knows nothing of devices or sockets: the runner returns logits on its own device, the
loop draws on that device and reads back only the drawn ids (one host-device sync per pass).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from pipeline.config import ROOT_PASS_DECODERS, DecodeConfig
from pipeline.pool import ROOT, Pool
from pipeline.select import select_draft, select_pearl, select_pearl_top1, select_root, select_root_draw
from pipeline.tree import Tree
from pipeline.verify import RowDraws, draw, target_probs, traverse


class TargetRunner(Protocol):
    device: torch.device

    def prefill(self, tokens: Sequence[int], overlapped: bool = False) -> None:
        """Write the KV of the committed context except its last token (the first root).

        overlapped (here and in root_pass): the drafter works during this pass, so a CPU runner leaves
        it its share of the cores.
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

    def end(self) -> None:
        """End the request; the drafter drops its state."""


# Phases of a round, in Round.phases: the drafter's own time growing the pool, then the target's steps.
PHASES = ("draft", "root", "wait", "select", "tree", "commit")


@dataclass(slots=True)
class Round:
    accepted: int  # tree nodes accepted (a drawn first token that is a tree node counts)
    tree_size: int  # nodes verified in the tree pass; 0 when no tree pass ran
    emitted: int  # accepted + 1 continuation
    phases: dict[str, float]  # seconds per phase: draft (drafter side), root, wait, select, tree, commit
    available: int = 0  # with a first draw X1: X1 plus its pool descendants (the tree size cap c would give
    #                     is min(c, available)); 0 for decoders without a first draw


@dataclass(slots=True)
class DecodeResult:
    tokens: list[int]  # new tokens, up to and including the first end-of-sequence token
    rounds: list[Round]
    target_passes: int  # target passes after the prefill
    seconds: float  # start of the prefill to the last commit
    hit_limit: bool  # stopped by the output limit, not by an end-of-sequence token
    prefill_seconds: float = 0.0
    config: DecodeConfig = field(default_factory=DecodeConfig)

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


def decode(target: TargetRunner, drafter: DrafterClient | None, prompt: Sequence[int], config: DecodeConfig,
           eos: frozenset[int], generator: torch.Generator | None, *, sync_phases: bool = False) -> DecodeResult:
    """Run one decode of `prompt` (token ids, at least one) with the rule and settings of `config`.

    Phases that produce tokens end in a host read, so their host times include their device work. The
    commit's device work is queued asynchronously; `sync_phases` waits for it inside the commit phase
    (a host-device sync per round, for profiling runs only).
    """
    if len(prompt) < 1:
        raise ValueError("`prompt` must hold at least one token")
    if config.decoder != "ar" and drafter is None:
        raise ValueError(f"decoder {config.decoder!r} needs a drafter")
    temperature, budget = config.temperature, config.budget
    out: list[int] = []
    rounds: list[Round] = []
    passes = 0
    root = int(prompt[-1])
    lazy = target.device.type == "cpu"  # see RowDraws
    t_start = time.perf_counter()
    if config.decoder != "ar":
        drafter.start(prompt)  # the drafter's prefill overlaps the target's
    target.prefill(prompt[:-1], overlapped=config.decoder != "ar")
    target.synchronize()
    prefill_seconds = time.perf_counter() - t_start
    while True:
        phase = _Phases()
        draft_seconds = 0.0
        tree_size = available = 0
        if config.decoder == "ar":
            with phase("root"):
                continuation = int(draw(target.root_pass(root)[None], temperature, generator)[0])  # sync
            accepted_tokens: list[int] = []
            accepted: list[int] = []
            passes += 1
        elif config.decoder == "draft":
            with phase("wait"):
                pool, draft_seconds = drafter.pool()
            with phase("select"):
                tree = select_draft(pool, budget)
            with phase("tree"):  # row 0 is the root's, row 1 + i tree node i's
                draws = RowDraws(target.tree_pass(tree, root), temperature, generator, lazy)
                accepted, continuation = traverse(tree, draws[0], draws.shifted(1))
            passes += 1
            tree_size = len(tree)
            accepted_tokens = tree.token[accepted].tolist()
        else:
            assert config.decoder in ROOT_PASS_DECODERS
            with phase("root"):  # runs while the drafter grows the pool
                row = target.root_pass(root, overlapped=True)
                x1 = int(draw(row[None], temperature, generator)[0])  # sync
            passes += 1
            with phase("wait"):
                pool, draft_seconds = drafter.pool()
            with phase("select"):
                tree = select_tree(config.decoder, pool, budget, x1, row, temperature)
            u = pool.first_level(x1)
            available = 1 if u < 0 else int(np.count_nonzero(pool.top == u))
            if tree.child(ROOT, x1) < 0:  # `root` only: the draw is off the tree, it is the continuation
                accepted, continuation, accepted_tokens = [], x1, []
            else:
                with phase("tree"):
                    draws = RowDraws(target.tree_pass(tree, None), temperature, generator, lazy)
                    accepted, continuation = traverse(tree, x1, draws)  # host reads of the draws: syncs
                passes += 1
                tree_size = len(tree)
                accepted_tokens = tree.token[accepted].tolist()
        with phase("commit"):
            target.commit(accepted)
            if sync_phases:
                target.synchronize()
        emitted = accepted_tokens + [continuation]
        phase.times["draft"] = draft_seconds
        rounds.append(Round(len(accepted), tree_size, len(emitted), phase.times, available))
        stop = next((i for i, t in enumerate(emitted) if t in eos), None)
        out.extend(emitted if stop is None else emitted[: stop + 1])
        if stop is not None or len(out) >= config.max_new_tokens:
            break
        root = continuation
        if config.decoder != "ar":
            drafter.commit(emitted)
    target.synchronize()
    seconds = time.perf_counter() - t_start
    if config.decoder != "ar":
        drafter.end()
    return DecodeResult(out, rounds, passes, seconds, stop is None, prefill_seconds, config)


def select_tree(decoder: str, pool: Pool, budget: int, x1: int, root_row: torch.Tensor, temperature: float) -> Tree:
    if decoder == "root-draw":
        return select_root_draw(pool, budget, x1)
    if decoder == "pearl":
        return select_pearl(pool, budget, x1)
    if decoder == "pearl-top1":
        return select_pearl_top1(pool, budget, x1)
    # root: the target's law at the pool's first-level tokens replaces their draft factor
    first = np.flatnonzero(pool.parent < 0)
    probs = np.zeros(len(pool), np.float32)
    ids = torch.from_numpy(pool.token[first]).to(root_row.device)
    probs[first] = target_probs(root_row, temperature)[ids].cpu().numpy()  # small host read (k values)
    return select_root(pool, budget, probs)
