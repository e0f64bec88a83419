"""The target takes only a full pool of the handshake's configuration: topk children at the root and under
each expanded candidate, expand candidates expanded on every level but the deepest, depth levels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.config import PoolConfig
from pipeline.pool import Pool, grow_pool
from target_proc.client import shape_problem

CONFIG = PoolConfig(topk=3, depth=3, expand=2)


def grown(config: PoolConfig = CONFIG) -> Pool:
    gen = torch.Generator().manual_seed(0)
    rows = lambda n: torch.log_softmax(torch.randn(n, 50, generator=gen), -1)  # noqa: E731
    return grow_pool(rows(1)[0], lambda nodes, tokens, parents, depth: rows(len(nodes)), config)


def edit(pool: Pool, **arrays) -> Pool:
    edges = {name: getattr(pool, name).copy() for name in ("token", "parent", "logp", "expanded")}
    edges.update(arrays)
    return Pool.from_edges(**edges)


@pytest.mark.parametrize("config", [CONFIG, PoolConfig(), PoolConfig(topk=1, depth=1, expand=1),
                                    PoolConfig(topk=5, depth=6, expand=5)], ids=["small", "default", "one", "deep"])
def test_every_grown_pool_has_the_shape_of_its_configuration(config):
    assert shape_problem(grown(config), config) is None


def test_a_pool_of_other_level_sizes_is_refused():
    assert shape_problem(grown(PoolConfig(topk=3, depth=2, expand=2)), CONFIG) == (
        "9 candidates on levels of [3, 6]; the handshake's pool (topk 3, depth 3, expand 2) has 15 on levels of "
        "[3, 6, 6]")


def test_a_pool_that_expands_another_count_per_level_is_refused():
    pool = grown()
    expanded = pool.expanded.copy()
    expanded[np.flatnonzero(pool.depth == 3)[0]] = True  # a leaf claims to be expanded
    assert shape_problem(edit(pool, expanded=expanded), CONFIG) == (
        "expanded candidates per level [2, 2, 1], not 2 above the deepest")


def test_a_pool_with_an_uneven_family_is_refused():
    pool = grown()
    parent = pool.parent.copy()
    second_level = np.flatnonzero(pool.depth == 2)
    expanded_first = np.flatnonzero(pool.expanded & (pool.depth == 1))
    parent[second_level[-1]] = expanded_first[0]  # move a child from one expanded parent to the other
    token = pool.token.copy()
    token[second_level[-1]] = 49  # a token no sibling has (the pool's tokens come from 50)
    problem = shape_problem(edit(pool, parent=parent, token=token), CONFIG)
    assert problem is not None and problem.startswith("an expanded candidate has ")
