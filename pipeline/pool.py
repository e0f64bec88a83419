"""The drafter's candidate pool (DESIGN.md section 2): a trie of candidates, its ranking and its growth.

A pool is stored as arrays indexed by pool index, parents before children. `token`, `parent`, `logp` and
`expanded` are its edges; `depth`, `cum` (cumulative draft log-prob) and `top` (first-level ancestor) are
derived from them by one function, so the drafter and the target compute identical scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.config import PoolConfig

if TYPE_CHECKING:
    import torch

ROOT = -1  # parent index of first-level candidates


class InvalidPool(ValueError):
    """The arrays do not describe a candidate trie."""


@dataclass(frozen=True, slots=True, eq=False)
class Pool:
    token: np.ndarray  # (N,) int64 candidate token ids
    parent: np.ndarray  # (N,) int64 parent pool index, ROOT for depth 1; parent[i] < i
    logp: np.ndarray  # (N,) float32 draft log-prob of the edge into the candidate
    expanded: np.ndarray  # (N,) bool, the drafter scored this candidate's children
    depth: np.ndarray  # (N,) int64, 1 for the root's children
    cum: np.ndarray  # (N,) float32 draft log-prob of the whole path
    top: np.ndarray  # (N,) int64 pool index of the path's first-level candidate

    @classmethod
    def from_edges(cls, token, parent, logp, expanded, *, vocab_size: int | None = None,
                   max_depth: int | None = None) -> Pool:
        """Validate the edges of a pool and derive its scores; raises InvalidPool naming the problem."""
        token = np.asarray(token)
        parent = np.asarray(parent)
        logp = np.asarray(logp)
        expanded = np.asarray(expanded)
        n = token.shape[0] if token.ndim == 1 else -1
        for name, arr in (("token", token), ("parent", parent), ("logp", logp), ("expanded", expanded)):
            if arr.ndim != 1 or arr.shape[0] != n:
                raise InvalidPool(f"`{name}` must be one-dimensional with one entry per candidate "
                                  f"(shape {arr.shape}, token shape {token.shape})")
        if n == 0:
            raise InvalidPool("the pool is empty")
        token = token.astype(np.int64)
        parent = parent.astype(np.int64)
        logp = logp.astype(np.float32)
        expanded = expanded.astype(bool)
        index = np.arange(n)
        if vocab_size is not None and (problem := out_of_vocab(token, vocab_size, "token")):
            raise InvalidPool(problem)
        if np.any((parent < ROOT) | (parent >= index)):
            bad = int(np.flatnonzero((parent < ROOT) | (parent >= index))[0])
            raise InvalidPool(f"candidate {bad} has parent {int(parent[bad])}: a parent must be the root "
                              f"(-1) or an earlier candidate")
        has_parent = parent >= 0
        if np.any(has_parent & ~expanded[np.maximum(parent, 0)]):
            bad = int(np.flatnonzero(has_parent & ~expanded[np.maximum(parent, 0)])[0])
            raise InvalidPool(f"candidate {bad} has parent {int(parent[bad])}, which is not expanded")
        if not np.all(np.isfinite(logp)) or np.any(logp > 1e-4):
            bad = int(np.flatnonzero(~np.isfinite(logp) | (logp > 1e-4))[0])
            raise InvalidPool(f"candidate {bad} has edge log-prob {float(logp[bad])}; it must be finite "
                              f"and at most 0")
        order = np.lexsort((token, parent))
        twin = (parent[order][1:] == parent[order][:-1]) & (token[order][1:] == token[order][:-1])
        if np.any(twin):
            i = order[int(np.flatnonzero(twin)[0]) + 1]
            raise InvalidPool(f"candidate {int(i)} repeats token {int(token[i])} under parent "
                              f"{int(parent[i])}: siblings must differ")
        logp = np.minimum(logp, np.float32(0))  # rounding can leave a probability-one edge at +1e-7
        depth, cum, top = _derive(parent, logp)
        if max_depth is not None and depth.max() > max_depth:
            raise InvalidPool(f"the pool reaches depth {int(depth.max())}, beyond the configured {max_depth}")
        return cls(token, parent, logp, expanded, depth, cum, top)

    def __len__(self) -> int:
        return self.token.shape[0]

    def first_levels(self, depth: int) -> Pool:
        """The pool cut after `depth` levels: its candidates that deep or shallower, the deepest of them not
        expanded (what grow_pool's `stop` gives when it answers true before level depth + 1)."""
        keep = self.depth <= depth
        index = np.cumsum(keep) - 1  # new index of each kept candidate
        parent = np.where(self.parent[keep] >= 0, index[np.maximum(self.parent[keep], 0)], ROOT)
        return Pool.from_edges(self.token[keep], parent, self.logp[keep],
                               self.expanded[keep] & (self.depth[keep] < depth))

    def first_level(self, token: int) -> int:
        """Pool index of the depth-1 candidate labelled `token`, or ROOT when there is none."""
        hit = np.flatnonzero((self.parent == ROOT) & (self.token == token))
        return int(hit[0]) if hit.size else ROOT

    def path(self, tokens: Sequence[int]) -> list[int]:
        """The pool indices of the longest path below the root whose tokens begin `tokens`: as many of them as a
        tree selected from the pool can accept."""
        nodes, at = [], ROOT
        for t in tokens:
            hit = np.flatnonzero((self.parent == at) & (self.token == t))
            if not hit.size:
                break
            at = int(hit[0])
            nodes.append(at)
        return nodes

    def first_rank(self, token: int) -> int:
        """The rank of `token` among the root's children by edge log-prob (1: the likeliest; ties go to the
        earlier candidate), or 0 where the pool has no such child."""
        at = self.first_level(token)
        if at == ROOT:
            return 0
        first = self.parent == ROOT
        return 1 + int(np.count_nonzero(first & (self.logp > self.logp[at]))) + int(
            np.count_nonzero(first[:at] & (self.logp[:at] == self.logp[at])))


def out_of_vocab(tokens: np.ndarray, vocab_size: int, what: str) -> str | None:
    """Why (n,) token ids are not all in [0, vocab_size), naming the first bad one; None when they are."""
    bad = (tokens < 0) | (tokens >= vocab_size)
    if not bad.any():
        return None
    i = int(np.flatnonzero(bad)[0])
    return f"{what}[{i}] = {int(tokens[i])} is outside the vocabulary [0, {vocab_size})"


def _derive(parent: np.ndarray, logp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth, cumulative log-prob and first-level ancestor, one vectorized step per level."""
    n = parent.shape[0]
    depth = np.zeros(n, np.int64)
    walk = parent.copy()
    while np.any(walk >= 0):  # at most pool-depth iterations
        up = walk >= 0
        depth += up
        walk[up] = parent[walk[up]]
    depth += 1
    cum = np.zeros(n, np.float32)
    top = np.arange(n)
    for d in range(1, int(depth.max()) + 1):
        level = np.flatnonzero(depth == d)
        if d == 1:
            cum[level] = logp[level]
        else:
            cum[level] = cum[parent[level]] + logp[level]
            top[level] = top[parent[level]]
    return depth, cum, top


def rank(score: np.ndarray, depth: np.ndarray, candidates: np.ndarray | None = None) -> np.ndarray:
    """Candidates (pool indices) best first: score descending, then shallower, then lower pool index.
    Scores never increase along a path, so every prefix of this order is ancestor-closed."""
    if candidates is None:
        candidates = np.arange(score.shape[0])
    order = np.lexsort((candidates, depth[candidates], -score[candidates]))
    return candidates[order]


ExpandFn = Callable[[np.ndarray, np.ndarray, np.ndarray, int], "torch.Tensor"]


def grow_pool(root_logprobs: torch.Tensor, expand: ExpandFn, config: PoolConfig,
              stop: Callable[[], bool] | None = None, ids: torch.Tensor | None = None) -> Pool:
    """Grow a pool from the drafter's root row. root_logprobs: (V,) draft log-probs at the root. expand(nodes, tokens,
    parents, depth) -> (len(nodes), V) draft log-probs at those candidates; it is called once per level with that
    level's expanded candidates (pool indices, their tokens, their parents' pool indices), parents always expanded in an
    earlier call. stop: asked before each level after the first; when it answers true the pool ends at the levels grown
    (a cut pool: each level is the full pool's level, and the deepest is not expanded). ids: (V,) the token id of each
    column of the rows (an EAGLE-3 head's draft vocabulary); None: the column is the token id."""
    k = min(config.topk, root_logprobs.shape[-1])
    logp, token = _top_children(root_logprobs[None], k, ids)
    parent = [np.full(k, ROOT, np.int64)]
    tokens, logps, cum = [token], [logp], logp.copy()
    frontier = _best(np.arange(k), cum, config.expand)
    expanded = []
    for depth in range(1, config.depth):
        if stop is not None and stop():
            break
        if depth > 1:  # the frontier is the previous level's best new candidates
            new = np.arange(cum.shape[0] - len(tokens[-1]), cum.shape[0])
            frontier = _best(new, cum, config.expand)
        all_token, all_parent = np.concatenate(tokens), np.concatenate(parent)
        logp, token = _top_children(expand(frontier, all_token[frontier], all_parent[frontier], depth), k, ids)
        expanded.append(frontier)
        child_parent = np.repeat(frontier, k)
        cum = np.concatenate([cum, cum[child_parent] + logp])
        tokens.append(token)
        logps.append(logp)
        parent.append(child_parent)
    is_expanded = np.zeros(cum.shape[0], bool)
    if expanded:
        is_expanded[np.concatenate(expanded)] = True
    return Pool.from_edges(np.concatenate(tokens), np.concatenate(parent), np.concatenate(logps), is_expanded)


def _top_children(rows: torch.Tensor, k: int, ids: torch.Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The k best tokens of each of (E, V) log-prob rows, flattened row by row -> (logp, token), (E * k,); with `ids`
    (V,), column c is token ids[c]. One host read for both: token ids are exact in float64, and the next pass's inputs
    depend on them (a host-device sync per level)."""
    import torch  # here, not at the top: the pool's ranking and the rule table import without torch

    logp, token = torch.topk(rows.float(), k, dim=-1)
    if ids is not None:
        token = ids[token]
    both = torch.stack([logp.double(), token.double()]).cpu().numpy()  # (2, E, k)
    return _finite(both[0].reshape(-1)), both[1].reshape(-1).astype(np.int64)


def _best(nodes: np.ndarray, cum: np.ndarray, count: int) -> np.ndarray:
    """The `count` nodes with the highest cumulative log-prob, ties to the lower pool index."""
    return nodes[np.lexsort((nodes, -cum[nodes]))[:count]]


def _finite(logp: np.ndarray) -> np.ndarray:
    """float32 log-probs with -inf (tokens a model masks out) floored to a finite value."""
    return np.maximum(logp.astype(np.float32), np.float32(-1e30))
