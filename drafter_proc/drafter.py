"""The drafter's loop body: extend the committed context, then grow the round's pool with tree passes.

Cache layout: slots [0, L) hold the committed context, the root last. Growing a pool writes each
expanded candidate at the next scratch slot after L (position L - 1 + depth); the next round writes its
committed tokens from slot L again, so the scratch is dropped without any copy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from models.passes import prefill
from pipeline.config import CapacityError, PoolConfig
from pipeline.pool import Pool, grow_pool
from pipeline.tree import ancestor_matrix


class Drafter:
    """prompt_window: 0, or how many of a prompt's last tokens the drafter sees (a bounded drafting context:
    a shorter prefill and cheaper passes for fewer accepted tokens). Its positions restart at 0 at the
    window's first token; rotary attention depends on position differences only, so the rows are those of
    the window as a prompt of its own."""

    def __init__(self, runner, config: PoolConfig, prompt_window: int = 0) -> None:
        assert prompt_window >= 0, prompt_window
        self.runner = runner
        self.config = config
        self.prompt_window = prompt_window
        self.through_root = 0  # L: committed tokens in the cache, the root last (Target.before_root: without it)

    def start(self, prompt: Sequence[int]) -> tuple[Pool, float]:
        """New request: the pool of round 0 from the prompt (its last prompt_window tokens) -> (pool, seconds)."""
        self.through_root = 0
        return self.commit(prompt[-self.prompt_window:] if self.prompt_window else prompt)

    def commit(self, tokens: Sequence[int]) -> tuple[Pool, float]:
        """Append newly committed tokens and grow the next pool -> (pool, seconds)."""
        t0 = time.perf_counter()
        base = self.through_root
        if base + len(tokens) + self.config.n_expanded > self.runner.capacity:
            raise CapacityError(f"the drafter's KV cache of {self.runner.capacity} slots cannot hold "
                                f"{base + len(tokens)} committed tokens and a pool's "
                                f"{self.config.n_expanded} scratch slots (raise `max_context`)")
        root_row = prefill(self.runner, tokens, base)
        self.through_root = base + len(tokens)
        pool = grow_pool(torch.log_softmax(root_row.float(), -1), self._expander(), self.config)
        return pool, time.perf_counter() - t0  # grow_pool read the last ids back, so the device is idle

    def _expander(self):
        """The expand callback of grow_pool for this round, with its scratch-slot bookkeeping."""
        length = self.through_root
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
