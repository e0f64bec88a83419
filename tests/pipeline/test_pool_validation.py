"""`Pool.from_edges` rejects every malformed pool with an InvalidPool naming the problem."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.pool import ROOT, InvalidPool, Pool

# A valid pool: a, b at the first level, a expanded with children c, d, and c expanded with child e.
GOOD = dict(token=[1, 2, 3, 4, 5], parent=[ROOT, ROOT, 0, 0, 2], logp=[-0.5, -1.0, -0.2, -2.0, -0.1],
            expanded=[True, False, True, False, False])


def edges(**change):
    out = {k: list(v) for k, v in GOOD.items()}
    out.update(change)
    return out


def test_valid_pool_derives_depth_scores_and_tops():
    pool = Pool.from_edges(**GOOD, vocab_size=6, max_depth=3)
    assert pool.depth.tolist() == [1, 1, 2, 2, 3]
    np.testing.assert_allclose(pool.cum, [-0.5, -1.0, -0.7, -2.5, -0.8], rtol=1e-6)
    assert pool.top.tolist() == [0, 1, 0, 0, 0]
    assert pool.first_level(2) == 1 and pool.first_level(3) == ROOT


@pytest.mark.parametrize("change, message", [
    (dict(parent=[ROOT, ROOT, 3, 0, 2]), r"candidate 2 has parent 3: a parent must be the root \(-1\) or an "
                                         r"earlier candidate"),
    (dict(parent=[ROOT, ROOT, 2, 0, 2]), r"candidate 2 has parent 2: .*earlier candidate"),
    (dict(parent=[ROOT, ROOT, 0, 0, 9]), r"candidate 4 has parent 9: .*earlier candidate"),
    (dict(parent=[-2, ROOT, 0, 0, 2]), r"candidate 0 has parent -2: .*earlier candidate"),
    (dict(parent=[ROOT, ROOT, 0, 1, 2]), r"candidate 3 has parent 1, which is not expanded"),
    (dict(token=[1, 2, 3, 3, 5]), r"candidate 3 repeats token 3 under parent 0: siblings must differ"),
    (dict(token=[2, 2, 3, 4, 5]), r"candidate 1 repeats token 2 under parent -1: siblings must differ"),
    (dict(token=[1, 2, 3, 6, 5]), r"token\[3\] = 6 is outside the vocabulary \[0, 6\)"),
    (dict(token=[1, -1, 3, 4, 5]), r"token\[1\] = -1 is outside the vocabulary"),
    (dict(logp=[-0.5, float("nan"), -0.2, -2.0, -0.1]), r"candidate 1 has edge log-prob nan; it must be finite"),
    (dict(logp=[-0.5, -1.0, float("-inf"), -2.0, -0.1]), r"candidate 2 has edge log-prob -inf; it must be finite"),
    (dict(logp=[-0.5, -1.0, -0.2, 0.5, -0.1]), r"candidate 3 has edge log-prob 0.5; .*at most 0"),
    (dict(logp=[-0.5, -1.0, -0.2, -2.0]), r"`logp` must be one-dimensional with one entry per candidate"),
    (dict(expanded=[True, False, True, False, False, False]), r"`expanded` must be one-dimensional"),
    (dict(parent=[[ROOT, ROOT, 0, 0, 2]]), r"`parent` must be one-dimensional"),
    (dict(token=[], parent=[], logp=[], expanded=[]), r"the pool is empty"),
])
def test_malformed_pool_is_rejected(change, message):
    with pytest.raises(InvalidPool, match=message):
        Pool.from_edges(**edges(**change), vocab_size=6, max_depth=3)


def test_depth_beyond_max_depth_is_rejected():
    with pytest.raises(InvalidPool, match=r"the pool reaches depth 3, beyond the configured 2"):
        Pool.from_edges(**GOOD, max_depth=2)


def test_rounding_above_zero_is_clipped():
    # A probability-one edge can come back from float32 log_softmax as a tiny positive number.
    pool = Pool.from_edges(**edges(logp=[-0.5, -1.0, 3e-7, -2.0, -0.1]))
    assert pool.logp[2] == 0.0 and pool.cum[2] == pool.cum[0]


def test_an_invalid_pool_is_caught_where_value_errors_are():
    with pytest.raises(ValueError, match="candidate 2 has parent 3") as refused:
        Pool.from_edges(**edges(parent=[ROOT, ROOT, 3, 0, 2]))
    assert type(refused.value) is InvalidPool
