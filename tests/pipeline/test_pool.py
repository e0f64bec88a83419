"""Pool growth and ranking (DESIGN.md section 2): the default pool's shape, who is expanded, the drafter's
cache giving the same pool as exact rows, and the ranking's tie-breaks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.mock import MockModel
from pipeline.config import PoolConfig
from pipeline.pool import ROOT, Pool, grow_pool, rank
from pipeline.select import select_draft

VOCAB = 48


@pytest.fixture(scope="module")
def default_pool(mock_pool):
    return mock_pool(MockModel(VOCAB, 4), MockModel(VOCAB, 4, 1.0), [7, 8, 9], PoolConfig()).pool


def test_default_pool_shape(default_pool):
    pool = default_pool
    assert PoolConfig().size == len(pool) == 710
    assert PoolConfig().n_expanded == int(pool.expanded.sum()) == 70
    assert np.bincount(pool.depth).tolist() == [0, 10] + [100] * 7
    # Ten expanded at each depth 1..7 (all ten first-level candidates), none at depth 8.
    assert np.bincount(pool.depth[pool.expanded], minlength=9).tolist() == [0] + [10] * 7 + [0]
    # Every candidate hangs off the root or an expanded node, and every expanded node has ten children.
    parent = pool.parent
    assert np.all((parent == ROOT) | pool.expanded[np.maximum(parent, 0)])
    assert np.bincount(parent[parent >= 0], minlength=len(pool))[pool.expanded].tolist() == [10] * 70
    assert np.all(np.diff(pool.depth) >= 0)  # grown level by level


def test_expanded_nodes_are_each_levels_best(default_pool):
    pool = default_pool
    for d in range(2, 8):
        level = np.flatnonzero(pool.depth == d)
        chosen = level[pool.expanded[level]]
        assert pool.cum[chosen].min() >= pool.cum[level[~pool.expanded[level]]].max()


def test_children_are_the_drafters_top_tokens(default_pool):
    pool = default_pool
    first = pool.parent == ROOT
    assert np.all(np.diff(pool.logp[first]) <= 0)  # topk order at the root
    for u in np.flatnonzero(pool.expanded):
        kids = np.flatnonzero(pool.parent == u)
        assert len(set(pool.token[kids].tolist())) == 10
        np.testing.assert_allclose(pool.cum[kids], pool.cum[u] + pool.logp[kids], rtol=1e-6)


def test_scores_never_increase_along_a_path(default_pool):
    pool = default_pool
    child = pool.parent >= 0
    assert np.all(pool.cum[child] <= pool.cum[pool.parent[child]])
    assert np.all(pool.top[~child] == np.flatnonzero(~child))
    assert np.all(pool.top[child] == pool.top[pool.parent[child]])


@pytest.mark.parametrize("config", [PoolConfig(topk=4, depth=4, expand=2), PoolConfig()], ids=["small", "default"])
def test_drafter_pool_equals_pool_from_exact_rows(config, mock_pair, mock_pool):
    # The drafter grows its pools through its KV cache and scratch slots over several rounds; the pools
    # must equal pools grown from rows computed at each candidate's full address.
    pair = mock_pair(VOCAB, 6, 0.8, config)
    drafter = pair.drafter.drafter
    context = [5, 1, 2]
    pool = drafter.start(context).pool
    for step in ([4], [9, 9, 3], [2, 2], [11]):
        want = mock_pool(pair.target_model, pair.drafter_model, context, config).pool
        for name in ("token", "parent", "expanded", "depth", "top"):
            np.testing.assert_array_equal(getattr(pool, name), getattr(want, name), err_msg=name)
        np.testing.assert_allclose(pool.cum, want.cum, rtol=1e-5, atol=1e-5)
        context = context + step
        pool = drafter.commit(step).pool


def test_small_vocabulary_caps_topk():
    # Three tokens with topk = 5: each expanded node gets all three tokens as children.
    rows = torch.log_softmax(torch.tensor([0.0, 1.0, 2.0]), -1)
    pool = grow_pool(rows, lambda nodes, tokens, parents, depth: rows.expand(len(nodes), 3),
                     PoolConfig(topk=5, depth=2, expand=2))
    assert np.bincount(pool.depth).tolist() == [0, 3, 6]
    assert pool.token[:3].tolist() == [2, 1, 0]


def test_expansion_ties_go_to_lower_pool_index():
    # Uniform rows tie every candidate of a level, so the expanded ones are the level's first indices.
    config = PoolConfig(topk=4, depth=4, expand=2)
    uniform = torch.full((6,), -np.log(6.0))
    pool = grow_pool(uniform, lambda nodes, tokens, parents, depth: uniform.expand(len(nodes), 6), config)
    for d in range(1, 4):
        level = np.flatnonzero(pool.depth == d)
        assert np.flatnonzero(pool.expanded & (pool.depth == d)).tolist() == level[:2].tolist()


def tied_pool() -> Pool:
    # idx token parent  edge  cum     depth
    #  0    1    root   0.2  log .2   1
    #  1    2    root   0.4  log .4   1
    #  2    3    root   0.4  log .4   1   tie with 1 at the same depth: the lower index first
    #  3    1    1      1.0  log .4   2   tie with 1 and 2 one level deeper: after both
    #  4    2    0      1.0  log .2   2   tie with 0, deeper
    #  5    3    0      1.0  log .2   2   tie with 0 and 4: depth first, then index
    return Pool.from_edges(token=[1, 2, 3, 1, 2, 3], parent=[ROOT, ROOT, ROOT, 1, 0, 0],
                           logp=np.log(np.float32([0.2, 0.4, 0.4, 1.0, 1.0, 1.0])),
                           expanded=[True, True, False, False, False, False])


def test_rank_breaks_ties_by_depth_then_index():
    pool = tied_pool()
    assert pool.cum[1] == pool.cum[2] == pool.cum[3] and pool.cum[0] == pool.cum[4] == pool.cum[5]
    assert rank(pool.cum, pool.depth).tolist() == [1, 2, 3, 0, 4, 5]
    assert rank(pool.cum, pool.depth, np.array([5, 4, 3, 0])).tolist() == [3, 0, 4, 5]
    assert select_draft(pool, 2).node.tolist() == [1, 2]
    assert select_draft(pool, 4).node.tolist() == [0, 1, 2, 3]


def test_rank_prefers_score_over_depth_and_index():
    score = np.array([-3.0, -1.0, -2.0, -0.5])
    depth = np.array([1, 3, 2, 4])
    assert rank(score, depth).tolist() == [3, 1, 2, 0]


def _root_paths(pool: Pool) -> set[tuple[int, ...]]:
    """Every path from the root, as its tokens (brute force)."""
    paths = set()
    for i in range(len(pool)):
        path, at = [], i
        while at != ROOT:
            path.append(int(pool.token[at]))
            at = int(pool.parent[at])
        paths.add(tuple(reversed(path)))
    return paths


@pytest.mark.parametrize("seed", range(5))
def test_path_is_the_longest_root_path_that_starts_the_tokens(seed):
    gen = np.random.default_rng(seed)
    pool = _random_pool(gen)
    paths = _root_paths(pool)
    for _ in range(40):
        tokens = [int(t) for t in gen.integers(0, 4, size=int(gen.integers(0, 6)))]
        want = max((n for n in range(len(tokens) + 1) if n == 0 or tuple(tokens[:n]) in paths), default=0)
        nodes = pool.path(tokens)
        assert len(nodes) == want and [int(pool.token[i]) for i in nodes] == tokens[:want]


def _random_pool(gen: np.random.Generator) -> Pool:
    """A random trie over tokens 0..3, children of expanded candidates only."""
    token, parent, expanded = [], [], []
    for parent_of in [ROOT] + list(range(12)):
        if parent_of != ROOT and (parent_of >= len(token) or not expanded[parent_of]):
            continue
        for t in gen.permutation(4)[: int(gen.integers(1, 4))]:
            token.append(int(t))
            parent.append(parent_of)
            expanded.append(bool(gen.random() < 0.6))
    return Pool.from_edges(token, parent, -gen.random(len(token)).astype(np.float32), expanded)


def test_first_rank_orders_the_roots_children_by_edge_logprob_ties_to_the_earlier():
    pool = Pool.from_edges([5, 6, 7, 8, 9], [ROOT, ROOT, ROOT, 0, ROOT], np.log([0.2, 0.5, 0.2, 0.9, 0.1]),
                           [True, False, False, False, False])
    assert [pool.first_rank(t) for t in (6, 5, 7, 9)] == [1, 2, 3, 4]
    assert pool.first_rank(8) == 0 and pool.first_rank(42) == 0  # below the first level, or nowhere
    assert pool.path([5, 8, 1]) == [0, 3] and pool.path([6, 8]) == [1] and pool.path([]) == []
