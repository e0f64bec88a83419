"""The drafter's loop body: extend the committed context, then grow the round's pool with tree passes.

Cache layout: slots [0, L) hold the committed context, the root last; a pool's candidates take scratch slots
after L (position L - 1 + depth), which the next round's commit overwrites. Drafting ahead (pipeline.ahead)
writes the predicted tokens at slots [L, L + k), where a commit of them would put them, and grows from there:
a commit of exactly those tokens takes that pool; any other keeps the K/V of the prefix it shares with them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from models.passes import prefill
from models.runner import ModelRunner
from pipeline.ahead import HIT, MISSED, NOT_TRIED, Drafted
from pipeline.config import CapacityError, PoolConfig
from pipeline.pool import grow_pool
from pipeline.tree import ancestor_matrix


class Abandoned(Exception):
    """Growing a pool ahead stopped: something came that the prediction does not serve."""


class Drafter:
    """A drafter started on the context's last tokens only (DecodeConfig.drafter_window) puts the first of
    them at position 0: its rows are those of those tokens as a prompt of their own."""

    def __init__(self, runner: ModelRunner, config: PoolConfig) -> None:
        self.runner = runner
        self.config = config
        self.through_root = 0  # L: committed tokens in the cache, the root last (Target.before_root: without it)
        self.written: np.ndarray = np.zeros(0, np.int64)  # tokens drafting ahead wrote at slots [L, L + k)
        self.held: Drafted | None = None  # the pool grown ahead from `written`, until the next commit

    def start(self, prompt: Sequence[int], between: Callable[[], bool] | None = None) -> Drafted:
        """New request: the pool of round 0 from the prompt."""
        self.through_root = 0
        self._drop_ahead()
        return self.commit(prompt, between)

    def commit(self, tokens: Sequence[int], between: Callable[[], bool] | None = None) -> Drafted:
        """Append newly committed tokens and grow the next pool (or take the one grown ahead from them).
        between: called between levels; when it answers true the pool ends at the levels grown (a cut pool)."""
        t0 = time.perf_counter()
        tokens = np.asarray(tokens, np.int64)
        tried, held, written = self.held is not None or len(self.written) > 0, self.held, self.written
        self._drop_ahead()
        if held is not None and np.array_equal(tokens, written):
            self.through_root += len(tokens)
            return Drafted(held.pool, 0.0, HIT, held.ahead_seconds)
        base = self.through_root
        self._check(base + len(tokens))
        # Slots [base, base + kept) hold these tokens already; the last one is passed again for its row.
        kept = min(_shared_prefix(tokens, written), len(tokens) - 1)
        root_row = prefill(self.runner, tokens[kept:], base + kept)
        pool = grow_pool(torch.log_softmax(root_row.float(), -1), self._expander(base + len(tokens)), self.config,
                         between)  # grow_pool read the last ids back, so the device is idle
        self.through_root = base + len(tokens)  # only now: a commit that fails leaves the context as it was
        return Drafted(pool, time.perf_counter() - t0, MISSED if tried else NOT_TRIED)

    def ahead(self, path: Sequence[int], between: Callable[[], bool] | None = None) -> bool:
        """Grow the pool that committing `path` and then this drafter's most probable next token would ask
        for, without committing them (pipeline.ahead) -> whether it was grown (not when the cache cannot
        hold it, or when `between()`, called between levels, raised Abandoned; when it answers true the
        pool ends at the levels grown, as commit's)."""
        t0 = time.perf_counter()
        path = np.asarray(path, np.int64)
        self._drop_ahead()
        length = self.through_root + len(path) + 1
        if len(path) == 0 or length + self.config.n_expanded > self.runner.capacity:
            return False
        row = prefill(self.runner, path, self.through_root)
        tokens = np.append(path, int(row.argmax()))  # a host read
        root_row = prefill(self.runner, tokens[-1:], length - 1)
        self.written = tokens
        try:
            pool = grow_pool(torch.log_softmax(root_row.float(), -1), self._expander(length), self.config, between)
        except Abandoned:
            return False
        self.held = Drafted(pool, 0.0, HIT, time.perf_counter() - t0)
        return True

    def _drop_ahead(self) -> None:
        self.written, self.held = np.zeros(0, np.int64), None

    def _check(self, committed: int) -> None:
        if committed + self.config.n_expanded > self.runner.capacity:
            raise CapacityError(f"the drafter's KV cache of {self.runner.capacity} slots cannot hold "
                                f"{committed} committed tokens and a pool's "
                                f"{self.config.n_expanded} scratch slots (raise `max_context`)")

    def _expander(self, length: int):
        """The expand callback of grow_pool for a pool grown after `length` cached tokens, with its scratch
        bookkeeping."""
        slot_of: dict[int, int] = {}
        fed_parent: list[int] = []  # per fed candidate: the fed index of its parent, -1 for the root

        def expand(nodes: np.ndarray, tokens: np.ndarray, parents: np.ndarray, depth: int) -> torch.Tensor:
            start = len(fed_parent)
            for node, parent in zip(nodes.tolist(), parents.tolist()):
                fed_parent.append(slot_of[parent] - length if parent >= 0 else -1)
                slot_of[node] = length + len(fed_parent) - 1
            cols = length + np.arange(len(fed_parent))
            vis = ancestor_matrix(np.asarray(fed_parent))[start:]
            positions = np.full(len(nodes), length - 1 + depth)
            logits = self.runner.forward(tokens, positions, cols[start:], length, cols, vis)
            return torch.log_softmax(logits.float(), -1)

        return expand


def _shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens a and b share."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
