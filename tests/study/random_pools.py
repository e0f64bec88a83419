"""Random recorded rounds for the coverage tests: pools of any shape with random target edge probabilities."""

from __future__ import annotations

import numpy as np

from pipeline.pool import ROOT, Pool
from pipeline.value import Scored


def random_scored(rng: np.random.Generator, n: int, greedy: bool) -> Scored:
    """A random pool of n candidates with random (or greedy point-mass) target edge probabilities; each node's
    children's probabilities sum below one."""
    parent = np.full(n, ROOT)
    for i in range(1, n):
        parent[i] = rng.integers(-1, i)
    logp = np.log(rng.uniform(0.05, 1.0, n)).astype(np.float32)
    pool = Pool.from_edges(np.arange(n), parent, logp, np.ones(n, bool))
    edge = np.zeros(n)
    for p in np.unique(parent):
        kids = np.flatnonzero(parent == p)
        if greedy:
            if rng.random() < 0.8:
                edge[rng.choice(kids)] = 1.0
        else:
            edge[kids] = rng.dirichlet(np.ones(len(kids) + 1))[: len(kids)]
    return Scored(pool, edge)
