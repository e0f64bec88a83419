"""Selection rules on pools grown from mock rows: tree shape, sizes, and the value orderings that follow
from each rule's definition (DESIGN.md section 3)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from models.mock import MockModel
from pipeline.config import PoolConfig
from pipeline.pool import ROOT, Pool
from pipeline.select import (select_draft, select_pearl, select_pearl_top1, select_root,
                             select_root_draw)
from pipeline.tree import Tree
from tests.pipeline.reference import select_oracle, tree_value

VOCAB = 32
NOISE = 1.5
BUDGETS = (1, 2, 8, 59, 1000)
POOLS = [PoolConfig(topk=5, depth=4, expand=3), PoolConfig()]


@pytest.fixture(scope="module")
def grown(mock_pool):
    """Pools of both shapes at several random contexts, with exact target edge probabilities."""
    target, drafter = MockModel(VOCAB, 3), MockModel(VOCAB, 3, NOISE)
    rng = np.random.default_rng(17)
    out = []
    for config in POOLS:
        for _ in range(6):
            context = rng.integers(1, VOCAB, size=int(rng.integers(1, 9))).tolist()
            out.append(mock_pool(target, drafter, context, config))
    return out


def assert_tree_of_pool(tree: Tree, pool: Pool) -> None:
    """Every node is a distinct pool candidate (or a drawn token the pool lacks) whose tree parent is its
    pool parent: the node set is ancestor-closed."""
    nodes = tree.node.tolist()
    assert len(set(nodes)) == len(nodes)
    for i, (node, parent) in enumerate(zip(nodes, tree.parent.tolist())):
        if node != ROOT:
            assert tree.token[i] == pool.token[node]
        if parent == ROOT:
            assert node == ROOT or pool.parent[node] == ROOT
        else:
            assert nodes[parent] != ROOT and pool.parent[node] == nodes[parent]


def edges(tree: Tree, g) -> np.ndarray:
    """(n,) exact target probability of each tree edge; a drawn token outside the pool is a root edge."""
    return np.where(tree.node >= 0, g.edge_probs[np.maximum(tree.node, 0)], g.root_probs[tree.token])


def path_log_probs(g) -> np.ndarray:
    """(N,) log of each candidate's target path probability."""
    out = np.log(g.edge_probs)
    for i, p in enumerate(g.pool.parent.tolist()):
        if p >= 0:
            out[i] += out[p]
    return out


def root_scores(pool: Pool, first_probs: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return pool.cum.astype(np.float64) - pool.logp[pool.top] + np.log(first_probs[pool.top])


def draw_rules(pool: Pool, budget: int, x1: int) -> dict[str, Tree]:
    return {"root-draw": select_root_draw(pool, budget, x1), "pearl": select_pearl(pool, budget, x1),
            "pearl-top1": select_pearl_top1(pool, budget, x1)}


def test_trees_are_ancestor_closed_with_budget_sizes(grown):
    for g in grown:
        pool = g.pool
        n = len(pool)
        for budget in BUDGETS:
            for tree in (select_draft(pool, budget), select_root(pool, budget, g.root_probs[pool.token]),
                         select_oracle(pool, budget, g.edge_probs)):
                assert_tree_of_pool(tree, pool)
                assert len(tree) == min(budget, n)
            for x1 in range(VOCAB):
                for name, tree in draw_rules(pool, budget, x1).items():
                    assert_tree_of_pool(tree, pool)
                    assert 1 <= len(tree) <= budget, name
                    # The drawn token is the tree's only first-level node.
                    assert tree.token[tree.parent == ROOT].tolist() == [x1], name


def test_rules_keep_their_best_scores(grown):
    # Each rule keeps B candidates no worse under its own score than any candidate it drops.
    for g in grown:
        pool = g.pool
        for budget in (1, 8, 49):  # below the 50 candidates of the smaller pool, so some are dropped
            root_probs = g.root_probs[pool.token]
            for tree, score in ((select_draft(pool, budget), pool.cum.astype(np.float64)),
                                (select_root(pool, budget, root_probs), root_scores(pool, root_probs)),
                                (select_oracle(pool, budget, g.edge_probs), path_log_probs(g))):
                kept = np.zeros(len(pool), bool)
                kept[tree.node] = True
                assert score[kept].min() >= score[~kept].max()


def test_root_draw_value_at_least_pearl_for_the_same_draw(grown):
    for g in grown:
        pool = g.pool
        for budget in BUDGETS:
            for x1 in range(VOCAB):
                rd, pearl = select_root_draw(pool, budget, x1), select_pearl(pool, budget, x1)
                v_rd = tree_value(rd, edges(rd, g), first_drawn=True)
                v_pearl = tree_value(pearl, edges(pearl, g), first_drawn=True)
                assert v_rd >= v_pearl - 1e-12
                # Both keep the best of X1's subtree by draft score; pearl keeps no more of it.
                assert set(pearl.node.tolist()) <= set(rd.node.tolist())


def test_oracle_value_at_least_every_rule(grown):
    for g in grown:
        pool = g.pool
        for budget in BUDGETS:
            oracle = select_oracle(pool, budget, g.edge_probs)
            best = tree_value(oracle, edges(oracle, g))
            trees = [select_draft(pool, budget), select_root(pool, budget, g.root_probs[pool.token])]
            for x1 in range(VOCAB):
                # Drawn-first trees compete as plain node sets; one holding a token the pool lacks is no
                # pool subset, so the oracle over the pool need not beat it.
                trees += [t for t in draw_rules(pool, budget, x1).values() if np.all(t.node >= 0)]
            for tree in trees:
                assert best >= tree_value(tree, edges(tree, g)) - 1e-12


def test_oracle_is_optimal_by_enumeration(mock_pool):
    target, drafter = MockModel(6, 9), MockModel(6, 9, NOISE)
    config = PoolConfig(topk=3, depth=3, expand=2)  # 15 candidates
    for context in ([1], [2, 5], [4, 4, 3]):
        g = mock_pool(target, drafter, context, config)
        pool = g.pool
        path = np.exp(path_log_probs(g))
        for budget in range(1, 6):
            best = max(path[list(s)].sum() for s in itertools.combinations(range(len(pool)), budget)
                       if all(pool.parent[i] == ROOT or pool.parent[i] in s for i in s))
            oracle = select_oracle(pool, budget, g.edge_probs)
            assert tree_value(oracle, edges(oracle, g)) == pytest.approx(best, rel=1e-12)


def small_pool() -> Pool:
    # Draft prefers token 1 at the root; its children 3, 4; token 2's child 5.
    return Pool.from_edges(token=[1, 2, 3, 4, 5], parent=[ROOT, ROOT, 0, 0, 1],
                           logp=np.log([0.7, 0.3, 0.6, 0.4, 0.9]), expanded=[True, True, False, False, False])


def test_root_rule_replaces_the_first_draft_factor():
    pool = small_pool()
    assert select_draft(pool, 2).node.tolist() == [0, 2]
    # The target prefers token 2 at the root: path 2-5 scores 0.8 * 0.9 = 0.72 against 0.2 * 0.6.
    first = np.array([0.2, 0.8, 0, 0, 0])
    assert select_root(pool, 2, first).node.tolist() == [1, 4]
    assert select_root(pool, 3, first).node.tolist() == [0, 1, 4]
    # A point mass (T = 0) keeps the argmax's subtree first, then the rest by depth and pool index.
    assert select_root(pool, 3, np.array([0.0, 1.0, 0, 0, 0])).node.tolist() == [0, 1, 4]
    assert select_root(pool, 2, np.array([1.0, 0.0, 0, 0, 0])).node.tolist() == [0, 2]


def test_draw_rules_on_a_small_pool():
    pool = small_pool()
    assert select_root_draw(pool, 3, 2).node.tolist() == [1, 4]
    assert select_root_draw(pool, 2, 1).node.tolist() == [0, 2]
    off = select_root_draw(pool, 3, 7)  # a token the pool's first level lacks
    assert off.token.tolist() == [7] and off.node.tolist() == [ROOT]
    # Draft's 2-node tree is {1, 1-3}: pearl keeps it under 1 and verifies 2 alone.
    assert select_pearl(pool, 2, 1).node.tolist() == [0, 2]
    assert select_pearl(pool, 2, 2).node.tolist() == [1]
    assert select_pearl(pool, 4, 2).node.tolist() == [1]  # draft's 4 best: 1, 1-3, 1-4, 2
    assert select_pearl(pool, 5, 2).node.tolist() == [1, 4]
    # pearl-top1 builds its tree under the drafter's top token only.
    assert select_pearl_top1(pool, 3, 1).node.tolist() == [0, 2, 3]
    assert select_pearl_top1(pool, 3, 2).node.tolist() == [1]
    assert select_pearl_top1(pool, 3, 9).node.tolist() == [ROOT]
