"""Recording rounds for the rules compared at shared contexts (DESIGN.md section 8): after each round of a decode,
one measurement pass of the target under the tree mask gives the target's probability of every pool edge (the root
and the expanded candidates' rows, and the few addresses target_proc.retained keeps), and the root row's figures.
Every such pass runs after the round's commit, outside its timed phases and past the committed cache, so the
decode's output and timings are those of a decode without it."""

from __future__ import annotations

import time

import numpy as np
import torch

from evaluation.rounds import RecordedRound
from pipeline.decode import Step
from pipeline.pool import ROOT, Pool
from pipeline.sampling import filtered
from pipeline.select import draft_order
from pipeline.settings import DecodeConfig
from pipeline.tree import Tree
from pipeline.verify import edge_probs
from target_proc.retained import TOKEN_ONLY, Retained, entropy, soft
from target_proc.target import CONTEXT_CHUNK, Target

SCORED = 160  # the paper's scored set: the root, the tree, every expanded candidate and these highest-ranked
RECORDING = {"scored": SCORED, "token_only": TOKEN_ONLY, "rows": True}  # kept in the rounds file's run chunk


class RoundRecorder:
    """An observer for pipeline.decode.decode that keeps every speculative round of one decode.
    prompt: the decode's context (token ids); without it no retained rows are kept (schema 1's recording)."""

    def __init__(self, target: Target, config: DecodeConfig, prompt: list[int] | None = None) -> None:
        self.target, self.temperature, self.filters = target, config.temperature, config.filters
        self.rounds: list[RecordedRound] = []
        self.prompt = None if prompt is None else [int(t) for t in prompt]
        self.retained = Retained(config.temperature, config.filters) if prompt is not None else None
        self.position = 0  # output tokens before the current round

    def __call__(self, step: Step, root: int, budget: int) -> None:
        position, self.position = self.position, self.position + len(step.emitted)
        t0 = time.perf_counter()
        own = _Own(step)  # copied before any pass of ours: a captured graph's outputs are reused
        if self.retained is not None and self.retained.round == 0:
            self._score_context()
        if step.pool is None:  # a plain round: nothing to measure; the rows it computed are kept
            if self.retained is not None:
                self._keep(step, root, own, None)
            return
        pool = step.pool
        matched, others = self._addresses(step, pool) if self.retained is not None else (None, {})
        extra = np.array(([matched] if matched is not None else []) + list(others), np.int64)
        measured = np.union1d(np.flatnonzero(pool.expanded), extra)
        logits = self._measure(pool, measured, root, len(step.accepted))  # row 0 the root's, 1 + j measured[j]'s
        row = np.zeros(len(pool), np.int64)
        inner = pool.parent >= 0
        row[inner] = 1 + np.searchsorted(measured, pool.parent[inner])
        edge = edge_probs(logits, pool.token, row, self.temperature)  # host read: a sync
        rnd = RecordedRound(budget=budget, accepted=len(step.accepted), emitted=np.asarray(step.emitted, np.int64),
                            pool=pool, edge=edge, root=root, position=position)
        if self.retained is not None:
            self._root_figures(rnd, logits[0], own.root)
            def at(v: int) -> torch.Tensor:
                return logits[1 + int(np.searchsorted(measured, v))]

            self._keep(step, root, own, pool, matched=None if matched is None else at(matched),
                       scored=[(at(v), on_path) for v, on_path in others.items()])
        rnd.seconds = time.perf_counter() - t0
        self.rounds.append(rnd)

    def _measure(self, pool: Pool, nodes: np.ndarray, root: int, accepted: int) -> torch.Tensor:
        """(1 + len(nodes), V) the target law's logits at the root and at `nodes` (pool indices, ascending, an
        ancestor-closed set: every candidate's parent is expanded)."""
        context = self.target.before_root - 1 - accepted  # the committed tokens before this round's root
        logits = self.target.score_pool(Tree.from_pool(pool, nodes), root, context)
        return filtered(logits, self.temperature, self.filters)  # the law the decode's draws follow

    def _score_context(self) -> None:
        """The token-keyed cache before the first round: the row at every context position before the root."""
        tokens = self.prompt[:-1]
        for start, logits in self.target.score_context(tokens):
            self.retained.context(tokens[start: start + len(logits)], logits)

    def _addresses(self, step: Step, pool: Pool) -> tuple[int | None, dict[int, bool]]:
        """The pool indices whose rows the retained-row study keeps from this round, within the paper's scored
        set (the root, the tree, every expanded candidate, the SCORED best): the emitted address (None when
        the set lacks it), and up to TOKEN_ONLY others ending in the continuation token, in pool order, each
        with whether it lies on the accepted path."""
        path = [int(step.tree.node[i]) for i in step.accepted] if step.tree is not None else []
        if path and path[-1] == ROOT:  # a drawn token the pool lacks: nothing beneath it is in the pool
            return None, {}
        scored = np.zeros(len(pool), bool)
        scored[draft_order(pool)[:SCORED]] = True
        scored |= pool.expanded
        if step.tree is not None:
            scored[step.tree.node[step.tree.node >= 0]] = True
        c = step.continuation
        emitted = np.flatnonzero((pool.parent == (path[-1] if path else ROOT)) & (pool.token == c) & scored)
        matched = int(emitted[0]) if len(emitted) else None
        others = [int(v) for v in np.flatnonzero((pool.token == c) & scored) if int(v) != matched][:TOKEN_ONLY]
        return matched, {v: v in path for v in others}

    def _root_figures(self, rnd: RecordedRound, logits: torch.Tensor, own: torch.Tensor | None) -> None:
        """The measured root row's argmax, entropy and law at the first-level tokens; its agreement with the
        decoder's own root row (D.3: the two computations use batches of different sizes)."""
        probs = soft(logits, self.temperature, self.filters)
        first = torch.as_tensor(rnd.pool.token[rnd.first], dtype=torch.long, device=probs.device)
        rnd.root_argmax, rnd.root_entropy = int(probs.argmax()), entropy(probs)
        rnd.first_soft = probs[first].double().cpu().numpy()
        rnd.rows, rnd.prefix_root = self.retained.reduce(probs, rnd.pool.token[rnd.first])
        if own is not None:
            mine = self.retained.law(own)
            rnd.own_tv = float(0.5 * (mine - probs).abs().sum())
            rnd.own_agree = int(bool(mine.argmax() == probs.argmax()))

    def _keep(self, step: Step, root: int, own: _Own, pool: Pool | None, matched: torch.Tensor | None = None,
              scored: list | None = None) -> None:
        """Hand the round's rows to the retained-row keeper (see target_proc.retained.Retained.keep)."""
        tree = step.tree
        if tree is None or pool is None:
            tokens, rank = np.zeros(0, np.int64), np.zeros(0, np.int64)
        else:  # best first by draft rank, as the rules select
            tokens = tree.token
            rank = np.lexsort((tree.node, tree.depth, -pool.cum[np.maximum(tree.node, 0)]))
        self.retained.keep(root=root, c=step.continuation, own_root=own.root, tree_tokens=tokens,
                           tree_rows=own.tree, tree_rank=rank,
                           last_accepted=step.accepted[-1] if step.accepted else -1, scored=scored or [],
                           matched=matched)

    @staticmethod
    def slots(pool_size: int) -> int:
        """KV slots the measurement passes may need past a round's tree: a copy of the root and the pool's
        expanded candidates and kept addresses (at most the whole pool), or a chunk of the context."""
        return 1 + max(pool_size, CONTEXT_CHUNK)


class _Own:
    """Copies of the rows a round's own passes computed (the root's and the tree's), taken before any
    measurement pass: on CUDA a captured graph writes every pass of its size to the same output."""

    def __init__(self, step: Step) -> None:
        self.root = None if step.root_row is None else step.root_row.clone()
        self.tree = None if step.tree_rows is None else step.tree_rows.clone()
