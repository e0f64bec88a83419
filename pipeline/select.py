"""Selection rules (DESIGN.md section 3): which pool candidates the target verifies this round.

Every rule ranks by a score that never increases along a path, ties to the shallower candidate and then the
lower pool index, so its best B candidates are ancestor-closed. Each rule's tree at budget B is the first B of
one order (for the draw rules, one per draw): the `*_order` functions give those orders, which the selections cut
and pipeline.value sums along."""

from __future__ import annotations

import numpy as np

from pipeline.pool import ROOT, Pool, rank
from pipeline.tree import Tree


def draft_order(pool: Pool) -> np.ndarray:
    """(N,) every candidate, best first by cumulative draft log-prob."""
    return rank(pool.cum, pool.depth)


def root_order(pool: Pool, first_probs: np.ndarray) -> np.ndarray:
    """(N,) every candidate, best first once each path's first draft factor is the root row's probability.
    first_probs: (N,) target probability of each candidate's first-level token at the root (only the entries of
    first-level candidates are read)."""
    with np.errstate(divide="ignore"):
        first = np.log(first_probs[pool.top].astype(np.float64))
    score = pool.cum.astype(np.float64) - pool.logp[pool.top] + first
    return rank(score, pool.depth)


def oracle_order(pool: Pool, edge_probs: np.ndarray) -> np.ndarray:
    """(N,) every candidate, best first by its path's target probability (exact edge probabilities, (N,)).
    Path probabilities never increase along a path, so every prefix is ancestor-closed, and the first B maximize V among
    all ancestor-closed sets of B candidates."""
    return rank(log_path_mass(pool, edge_probs), pool.depth)


def log_path_mass(pool: Pool, edge_probs: np.ndarray) -> np.ndarray:
    """(N,) float64 log of each path's target probability, summed level by level (-inf on a zero edge)."""
    score = np.zeros(len(pool), np.float64)
    with np.errstate(divide="ignore"):
        log_edge = np.minimum(np.log(np.asarray(edge_probs, np.float64)), 0.0)
    for d in range(1, int(pool.depth.max()) + 1):
        level = np.flatnonzero(pool.depth == d)
        score[level] = log_edge[level] + (score[pool.parent[level]] if d > 1 else 0.0)
    return score


def depth_order(pool: Pool, log_mass: np.ndarray, depth: int) -> np.ndarray:
    """(N,) every candidate, best first when the first `depth` factors of each path are the target's exact
    probabilities and the rest the draft's (the paper's depth-d selection: 1 is `root`, the pool's depth is
    `oracle`). log_mass: (N,) log_path_mass. A path's score is its ancestor at that depth's exact log mass
    plus the draft log-probs below it, so a path no deeper keeps its exact score, bit for bit."""
    anchor = np.arange(len(pool))
    for _ in range(max(0, int(pool.depth.max()) - depth)):
        anchor = np.where(pool.depth[anchor] > depth, pool.parent[anchor], anchor)
    cum = pool.cum.astype(np.float64)
    return rank(log_mass[anchor] + (cum - cum[anchor]), pool.depth)


def top1(pool: Pool) -> int:
    """Pool index of the drafter's most probable first-level candidate."""
    return int(rank(pool.cum, pool.depth, np.flatnonzero(pool.parent == ROOT))[0])


def select_draft(pool: Pool, budget: int) -> Tree:
    """The B candidates with the highest cumulative draft log-prob (EAGLE-3's rule)."""
    return Tree.from_pool(pool, draft_order(pool)[:budget])


def select_root(pool: Pool, budget: int, first_probs: np.ndarray) -> Tree:
    """The B best after replacing each path's first draft factor with the target's root-row probability
    (first_probs: see root_order)."""
    return Tree.from_pool(pool, root_order(pool, first_probs)[:budget])


def select_root_draw(pool: Pool, budget: int, x1: int) -> Tree:
    """X1 with its B-1 highest-ranked pool descendants, or X1 alone when the pool's first level lacks it."""
    u = pool.first_level(x1)
    if u == ROOT:
        return Tree.single(x1)
    return Tree.from_pool(pool, np.concatenate([[u], descendants_order(pool, u)[: budget - 1]]))


def select_pearl(pool: Pool, budget: int, x1: int) -> Tree:
    """The part of draft selection's B-node tree beneath X1, or X1 alone when that tree lacks it."""
    u = pool.first_level(x1)
    kept = draft_order(pool)[:budget]
    if u == ROOT or u not in kept:
        return Tree.single(x1, u)
    return Tree.from_pool(pool, kept[pool.top[kept] == u])


def select_pearl_top1(pool: Pool, budget: int, x1: int) -> Tree:
    """The drafter's most probable first token with its B-1 best descendants; X1 alone if the draw differs."""
    u = top1(pool)
    if int(pool.token[u]) != x1:
        return Tree.single(x1, pool.first_level(x1))
    return Tree.from_pool(pool, np.concatenate([[u], descendants_order(pool, u)[: budget - 1]]))


def descendants_order(pool: Pool, u: int) -> np.ndarray:
    """Pool descendants of first-level candidate u, best first by cumulative draft log-prob."""
    below = np.flatnonzero((pool.top == u) & (pool.parent != ROOT))
    return rank(pool.cum, pool.depth, below)
