"""Context lookup (DESIGN.md section 16): candidates copied from the committed context, grafted into the
drafter's pool by the target before it selects.

The chain copies, LZ77-style, what followed the latest earlier occurrence of the context's longest suffix of
at most NGRAM tokens, and enters the pool as a path below the root. Each edge's log-prob is the share of this
decode's earlier chain tokens that the target's draws matched (Laplace prior, the first edge counted by the
match's length). Verification draws from the target's rows whatever the tree holds, so the law is unchanged."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.pool import ROOT, Pool

NGRAM = 3  # the longest context suffix looked up


class ContextLookup:
    """The committed context's n-gram index (n = 1 .. NGRAM), the chain grafted this round, and the counts its
    edges are scored by. `longest`: the most tokens a chain copies."""

    def __init__(self, context: Sequence[int], longest: int) -> None:
        if longest < 1:
            raise ValueError(f"a chain copies one token or more, not {longest}")
        self.longest = longest
        self.tokens: list[int] = []
        # n - 1 -> the n tokens -> index of the token after their latest occurrence that has one
        self.after: list[dict[tuple[int, ...], int]] = [{} for _ in range(NGRAM)]
        # edge classes: 0 .. NGRAM - 1, a chain's first edge after a match of n = class + 1 tokens; NGRAM, deeper
        self.tried = np.zeros(NGRAM + 1, np.int64)
        self.matched = np.zeros(NGRAM + 1, np.int64)
        self.chain: list[int] = []  # this round's chain (empty: none grafted)
        self.match = 0  # the length of the suffix its copy starts after
        self.merged = 0  # how many of its first tokens the drafter's pool held in their places
        self.extend(context)

    def extend(self, tokens: Sequence[int]) -> None:
        """The context grows by `tokens` (a round's emitted tokens)."""
        for t in tokens:
            i = len(self.tokens)
            for n in range(1, min(NGRAM, i) + 1):
                self.after[n - 1][tuple(self.tokens[i - n:i])] = i
            self.tokens.append(int(t))

    def propose(self) -> tuple[list[int], int]:
        """(the chain the context suggests next, the length of the suffix matched); ([], 0) where no suffix
        occurred before."""
        for n in range(min(NGRAM, len(self.tokens)), 0, -1):
            start = self.after[n - 1].get(tuple(self.tokens[-n:]))
            if start is not None:
                source = self.tokens[start:start + self.longest]  # overlapping: chain[i] = (context + chain)[start + i]
                chain = []
                while len(chain) < self.longest:
                    chain.append(source[len(chain)] if len(chain) < len(source) else chain[len(chain) - len(source)])
                return chain, n
        return [], 0

    def edge_logp(self, match: int, length: int) -> np.ndarray:
        """(length,) float32 log-probs of a chain's edges after a match of `match` tokens."""
        share = (self.matched + 1) / (self.tried + 2)
        logp = np.full(length, np.log(share[NGRAM]), np.float32)
        logp[:1] = np.log(share[match - 1])
        return logp

    def graft(self, pool: Pool) -> Pool:
        """The pool with this round's chain grafted below its root (the pool as it is where the context
        suggests none). Remembers the chain for `learn`."""
        self.chain, self.match = self.propose()
        if not self.chain:
            return pool
        grafted = graft(pool, self.chain, self.edge_logp(self.match, len(self.chain)))
        self.merged = len(self.chain) - (len(grafted) - len(pool))  # a new candidate's descendants are new
        return grafted

    def learn(self, emitted: Sequence[int], accepted: int) -> int:
        """Count this round's chain against the target's draws -> how many of the round's `accepted` tokens the
        chain alone proposed (its candidates that the drafter's pool lacked). `emitted`, the round's accepted
        tokens and then its continuation, are the target's draws along the path it took, so the chain's token
        at depth d was drawn against wherever the d - 1 before it were the path's."""
        same = 0
        for d, (token, drawn) in enumerate(zip(self.chain, emitted)):
            kind = self.match - 1 if d == 0 else NGRAM
            self.tried[kind] += 1
            if token != drawn:
                break
            self.matched[kind] += 1
            same += 1
        copied = max(0, min(same, accepted) - self.merged)
        self.chain, self.match, self.merged = [], 0, 0
        return copied


def graft(pool: Pool, chain: Sequence[int], logp: np.ndarray) -> Pool:
    """The pool with `chain` as a path below its root: a chain token that is already its parent's child there merges
    with that candidate (its edge log-prob the larger of the two), any other is a new candidate after the pool's, and so
    is every chain token below it; a candidate the chain continues below counts as expanded."""
    path = pool.path(chain)  # the chain's first tokens that the pool holds in their places
    merged, at = len(path), path[-1] if path else ROOT
    edge, expanded = pool.logp.copy(), pool.expanded.copy()
    edge[path] = np.maximum(edge[path], logp[:merged])
    expanded[path[:len(chain) - 1]] = True  # each the chain goes on below
    new = len(chain) - merged  # the rest of the chain: a path of new candidates below `at`
    parent = np.concatenate([[at], len(pool) + np.arange(new - 1)]) if new else np.zeros(0, np.int64)
    return Pool.from_edges(np.concatenate([pool.token, np.asarray(chain[merged:], np.int64)]),
                           np.concatenate([pool.parent, parent.astype(np.int64)]),
                           np.concatenate([edge, logp[merged:].astype(np.float32)]),
                           np.concatenate([expanded, np.arange(new) < new - 1]))
