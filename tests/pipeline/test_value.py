"""Tree value and exhaustive traversal on the paper's toy case (Appendix A): an IID uniform binary target
on the trie {a, b, aa, ab, ba, aaa, aab}."""

from __future__ import annotations

import math

import numpy as np
import torch

from pipeline.pool import ROOT
from pipeline.tree import Tree
from tests.pipeline.reference import edge_probs_from_rows, path_probs, tree_value
from pipeline.verify import draw, traverse

A, B = 0, 1  # the two tokens of the binary vocabulary
# Nodes in order a, b, aa, ab, ba, aaa, aab; the root's row is row 0 of a verification pass.
TOY_TOKEN = np.array([A, B, A, B, A, A, B], np.int64)
TOY_PARENT = np.array([ROOT, ROOT, 0, 0, 1, 2, 2], np.int64)
def toy_tree() -> Tree:
    return Tree(TOY_TOKEN, TOY_PARENT, np.arange(7, dtype=np.int64))


def test_toy_tree_value_is_two():
    tree = toy_tree()
    half = np.full(7, 0.5)
    # Path probabilities 1/2, 1/2, 1/4, 1/4, 1/4, 1/8, 1/8 are powers of two: the sum is exact.
    np.testing.assert_array_equal(path_probs(tree, half), [0.5, 0.5, 0.25, 0.25, 0.25, 0.125, 0.125])
    assert tree_value(tree, half) == 2.0


def test_toy_edge_probs_from_uniform_rows():
    tree = toy_tree()
    edge = edge_probs_from_rows(tree, np.array([0.5, 0.5]), np.full((7, 2), 0.5))
    assert tree_value(tree, edge) == 2.0


def test_edge_probs_read_the_parent_row():
    # Distinct rows per node, so reading the node's own row instead of its parent's gives other values.
    tree = toy_tree()
    root = np.array([0.9, 0.1])
    rows = np.stack([np.array([k + 1, 10 - k]) / 11 for k in range(7)])
    edge = edge_probs_from_rows(tree, root, rows)
    want = [root[A], root[B], rows[0, A], rows[0, B], rows[1, A], rows[2, A], rows[2, B]]
    np.testing.assert_allclose(edge, want)


def test_first_drawn_counts_the_first_token_as_accepted():
    # Given the first draw, the subtree under a has value 1 + 1/2 + 1/2 + 1/4 + 1/4 (drawn a counts).
    a_subtree = Tree(TOY_TOKEN[[0, 2, 3, 5, 6]], np.array([ROOT, 0, 0, 1, 1]), np.arange(5))
    assert tree_value(a_subtree, np.full(5, 0.5), first_drawn=True) == 2.5
    assert tree_value(a_subtree, np.full(5, 0.5)) == 1.25


def test_toy_monte_carlo_acceptance_matches_value():
    tree = toy_tree()
    n_rounds = 20_000
    generator = torch.Generator().manual_seed(20240611)
    # Uniform logits over {a, b} at the root and at every node: the IID uniform binary target.
    draws = draw(torch.zeros(n_rounds * 8, 2), 1.0, generator).numpy().reshape(n_rounds, 8)
    accepted = np.empty(n_rounds)
    for r in range(n_rounds):
        path, continuation = traverse(tree, int(draws[r, 0]), draws[r, 1:])
        assert tree.child(path[-1] if path else ROOT, continuation) == ROOT  # the continuation leaves the tree
        accepted[r] = len(path)
    # Acceptance is 1, 2 or 3 with probabilities 1/4, 1/2, 1/4 (b then b; ab or ba; aa then any), so its
    # variance is 1/2 and the mean of 20,000 rounds has standard error 0.005.
    se = math.sqrt(0.5 / n_rounds)
    assert abs(accepted.mean() - 2.0) < 5 * se
    counts = np.bincount(accepted.astype(int), minlength=4)
    assert counts[0] == 0
    np.testing.assert_allclose(counts[1:] / n_rounds, [0.25, 0.5, 0.25], atol=5 * math.sqrt(0.25 / n_rounds))
