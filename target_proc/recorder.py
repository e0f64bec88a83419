"""Recording rounds for the rules compared at shared contexts (DESIGN.md section 8): after each round of a
decode, one measurement pass of the target over the round's whole pool gives the target's probability of
every pool edge. The pass runs after the round's commit and outside its timed phases, and leaves the
committed cache untouched, so the decode's output and timings are those of a decode without it."""

from __future__ import annotations

import time

import numpy as np

from evaluation.rounds import RecordedRound
from pipeline.decode import Step
from pipeline.sampling import filtered
from pipeline.settings import DecodeConfig
from pipeline.tree import Tree
from pipeline.verify import edge_probs
from target_proc.target import Target


class RoundRecorder:
    """An observer for pipeline.decode.decode that keeps every speculative round of one decode."""

    def __init__(self, target: Target, config: DecodeConfig) -> None:
        self.target, self.temperature, self.filters = target, config.temperature, config.filters
        self.rounds: list[RecordedRound] = []

    def __call__(self, step: Step, root: int, budget: int) -> None:
        pool = step.pool
        if pool is None:  # a plain round: no pool to measure
            return
        t0 = time.perf_counter()
        context = self.target.before_root - 1 - len(step.accepted)  # the committed tokens before this round's root
        whole = Tree.from_pool(pool, np.arange(len(pool)))  # tree index i is pool index i
        logits = self.target.score_pool(whole, root, context)
        logits = filtered(logits, self.temperature, self.filters)  # the law the decode's draws follow
        edge = edge_probs(logits, pool.token, pool.parent, self.temperature)  # host read: a sync
        self.rounds.append(RecordedRound(budget, len(step.accepted), np.asarray(step.emitted, np.int64), pool.token,
                                         pool.parent, pool.logp, pool.expanded, edge, time.perf_counter() - t0))

    @staticmethod
    def slots(pool_size: int) -> int:
        """KV slots the measurement pass needs past a round's tree: a copy of the root and the whole pool."""
        return 1 + pool_size
