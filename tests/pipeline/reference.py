"""Reference implementations the tests check the product against: a tree's value from its nodes' edges, the
edges from whole rows, and the oracle's tree by selection (the product computes all of them as prefix sums)."""

from __future__ import annotations

import numpy as np

from pipeline.pool import Pool
from pipeline.select import oracle_order
from pipeline.tree import Tree


def path_probs(tree: Tree, edge_probs: np.ndarray) -> np.ndarray:
    """(n,) target probability of each node's whole path, from (n,) target edge probabilities."""
    out = np.asarray(edge_probs, np.float64).copy()
    for i, p in enumerate(tree.parent.tolist()):  # parents precede children
        if p >= 0:
            out[i] *= out[p]
    return out


def tree_value(tree: Tree, edge_probs: np.ndarray, *, first_drawn: bool = False) -> float:
    """V(T) = sum of path probabilities of the non-root nodes.

    first_drawn: the first-level token was drawn from the exact root row before selection and counts as
    accepted, so its edge has probability one given the draw.
    """
    edge = np.asarray(edge_probs, np.float64).copy()
    if first_drawn:
        edge[tree.parent < 0] = 1.0
    return float(path_probs(tree, edge).sum())


def edge_probs_from_rows(tree: Tree, root_probs: np.ndarray, node_probs: np.ndarray) -> np.ndarray:
    """(n,) target probability of each tree edge from the rows at the root (V,) and at each node (n, V)."""
    parent_rows = np.where(tree.parent[:, None] >= 0, node_probs[np.maximum(tree.parent, 0)], root_probs[None])
    return parent_rows[np.arange(len(tree)), tree.token]


def select_oracle(pool: Pool, budget: int, edge_probs: np.ndarray) -> Tree:
    """Offline: the ancestor-closed B candidates of largest value V (edge_probs: see oracle_order)."""
    return Tree.from_pool(pool, oracle_order(pool, edge_probs)[:budget])
