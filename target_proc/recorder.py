"""Recording rounds for the rules compared at shared contexts (DESIGN.md section 8): after each round of a
decode, one measurement pass of the target under the tree mask gives the target's probability of every
pool edge. A candidate's edge is read in its parent's row, so the pass needs the root and the expanded
candidates only (the others are leaves): 1 + 70 rows at the paper's pool of 710, within the largest
captured bucket on a GPU. The pass runs after the round's commit and outside its timed phases, and leaves
the committed cache untouched, so the decode's output and timings are those of a decode without it."""

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
        parents = Tree.from_pool(pool, np.flatnonzero(pool.expanded))  # every candidate's parent, or the root
        logits = self.target.score_pool(parents, root, context)  # row 0 the root's, 1 + j parents.node[j]'s
        logits = filtered(logits, self.temperature, self.filters)  # the law the decode's draws follow
        row = np.zeros(len(pool), np.int64)
        inner = pool.parent >= 0
        row[inner] = 1 + np.searchsorted(parents.node, pool.parent[inner])  # tree nodes are in pool order
        edge = edge_probs(logits, pool.token, row, self.temperature)  # host read: a sync
        self.rounds.append(RecordedRound(budget, len(step.accepted), np.asarray(step.emitted, np.int64), pool.token,
                                         pool.parent, pool.logp, pool.expanded, edge, time.perf_counter() - t0))

    @staticmethod
    def slots(pool_size: int) -> int:
        """KV slots the measurement pass may need past a round's tree: a copy of the root and the pool's
        expanded candidates (at most the whole pool)."""
        return 1 + pool_size
