"""The mock head takes any finite features a target may send: digests in any dtype give the rows of the digests'
prefixes, other values the rows of some other prefix, the same each time; none is refused or crashes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drafter_proc.head import HeadDrafter
from models.mock import FEATURE_WIDTH, MockHead, MockHeadRunner, MockModel
from pipeline.config import PoolConfig

POOL = PoolConfig(topk=3, depth=3, expand=2)
DIGESTS = torch.tensor(np.random.default_rng(0).integers(0, 256, (3, FEATURE_WIDTH)), dtype=torch.float32)


def pool_of(features: torch.Tensor):
    head = HeadDrafter(MockHeadRunner(MockHead(MockModel(64, 0, 0.5)), 64), POOL)
    return head.start([1, 2, 3, 4], features).pool


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_digests_in_any_dtype_give_the_pool_of_their_float32_values(dtype):
    want, got = pool_of(DIGESTS), pool_of(DIGESTS.to(dtype))
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.logp, want.logp)


@pytest.mark.parametrize("values", [DIGESTS + 0.5, DIGESTS - 300.0, DIGESTS * 1e6], ids=["fractions", "negative",
                                                                                        "beyond-255"])
def test_values_that_are_not_digests_give_another_prefixs_pool_the_same_each_time(values):
    got, again, digests = pool_of(values), pool_of(values.clone()), pool_of(DIGESTS)
    np.testing.assert_array_equal(got.logp, again.logp)
    assert not np.array_equal(got.logp, digests.logp)
