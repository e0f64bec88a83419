"""Drafting ahead (DESIGN.md section 9): where a round will most probably end, and how often that is right.

The prediction is the draft's greedy path through the tree (from the root, or the drawn X1, the drafter's most
probable child while the tree holds it), continued by the drafter's most probable token after it. The target
sends the path; the drafter appends that token itself. Verification is untouched, so every law holds with it
on; how often the prediction is right is measured (hit_probability on recorded rounds), not assumed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.pool import ROOT, Pool
from pipeline.tree import Tree

NOT_TRIED, MISSED, HIT = -1, 0, 1  # Drafted.ahead: no prediction for this pool's round; a wrong one; a right one


@dataclass(frozen=True, slots=True)
class Drafted:
    """A round's pool as the drafter delivers it."""

    pool: Pool
    seconds: float  # the drafter's time on this pool once the round's commit reached it (what a round can wait for)
    ahead: int = NOT_TRIED  # whether the pool was grown ahead from a prediction (HIT) or a prediction missed
    ahead_seconds: float = 0.0  # on a hit, the drafting done before the commit reached the drafter


def greedy_path(pool: Pool, tree: Tree, first: int | None) -> list[int]:
    """Tree indices of the draft's greedy path (see the module docstring).
    first: the round's first draw X1 when a root pass drew it (the path starts there; it must be in the tree), None when
    the tree pass scores the root and draws the first token itself."""
    path, at = [], ROOT
    if first is not None:
        at = tree.child(ROOT, first)
        assert at >= 0, "the drawn first token must be in the tree"
        path.append(at)
    while (best := top_child(pool, ROOT if at == ROOT else int(tree.node[at]), at != ROOT)) is not None:
        nxt = tree.child(at, int(pool.token[best]))
        if nxt < 0:
            break
        path.append(nxt)
        at = nxt
    return path


def top_child(pool: Pool, node: int, below_root: bool = True) -> int | None:
    """Pool index of the drafter's most probable child of pool candidate `node` (the root's with
    below_root False), or None when the pool holds none (an unexpanded candidate, or a drawn token the pool
    lacks: node ROOT with below_root)."""
    if below_root and node < 0:
        return None
    children = np.flatnonzero(pool.parent == (node if below_root else ROOT))
    if len(children) == 0:
        return None
    return int(children[np.lexsort((children, -pool.logp[children]))[0]])  # ties: the lower pool index


def predicted_tokens(pool: Pool, tree: Tree, first: int | None, leaf_stops: bool = False) -> np.ndarray:
    """(k,) the tokens of the greedy path, X1 first when drawn: what the target tells the drafter.
    leaf_stops: the walk stops at a leaf it draws (sampled-leaf stopping), which is then the continuation: a path that
    ends at a leaf is told without it, the leaf being the drafter's own next token there."""
    path = greedy_path(pool, tree, first)
    if leaf_stops and path and tree.is_leaf(path[-1]):
        path = path[:-1]
    return tree.token[path]


def hit_probability(pool: Pool, tree: Tree, first: int | None, edge_probs: np.ndarray) -> float | None:
    """The probability that the round emits the greedy path and then the drafter's most probable token,
    under exhaustive target sampling (X1, when drawn, is given); None when the path ends at a candidate the pool did
    not expand. edge_probs: (N,) the target's probability of each candidate's edge (pipeline.value's edges)."""
    path = greedy_path(pool, tree, first)
    nodes = tree.node[path[1:] if first is not None else path]
    end = ROOT if not path else int(tree.node[path[-1]])
    c = top_child(pool, end, bool(path))
    if c is None:
        return None
    return float(np.prod(edge_probs[nodes])) * float(edge_probs[c])
