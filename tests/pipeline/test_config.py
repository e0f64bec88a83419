"""Configuration checks name the offending field, and decode rejects inputs it cannot run."""

from __future__ import annotations

import pytest

from pipeline.config import DECODERS, DecodeConfig, PoolConfig
from pipeline.decode import decode


def test_pool_config_defaults_match_the_design():
    config = PoolConfig()
    assert (config.topk, config.depth, config.expand) == (10, 8, 10)
    assert (config.size, config.n_expanded) == (710, 70)
    assert (PoolConfig(topk=3, depth=3, expand=2).size, PoolConfig(topk=3, depth=3, expand=2).n_expanded) == (15, 4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(topk=0), r"`pool_topk` must be a positive integer, got 0"),
    (dict(depth=2.5), r"`pool_depth` must be a positive integer, got 2.5"),
    (dict(expand=True), r"`pool_expand` must be a positive integer, got True"),
    (dict(topk=3, expand=4), r"`pool_expand` \(4\) must not exceed `pool_topk` \(3\)"),
])
def test_pool_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PoolConfig(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(decoder="eagle"), r"`decoder` must be one of ar, draft, pearl, pearl-top1, root-draw, root, got 'eagle'"),
    (dict(temperature=-1.0), r"`temperature` must be a finite number >= 0, got -1.0"),
    (dict(temperature=float("nan")), r"`temperature` must be a finite number >= 0, got nan"),
    (dict(budget=0), r"`budget` must be a positive integer, got 0"),
    (dict(max_new_tokens=0), r"`max_new_tokens` must be a positive integer, got 0"),
    (dict(seed=-1), r"`seed` must be a non-negative integer, got -1"),
])
def test_decode_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**kwargs)


def test_decoders_are_the_designed_set():
    assert set(DECODERS) == {"ar", "draft", "pearl", "pearl-top1", "root-draw", "root"}


def test_decode_needs_a_prompt_and_a_drafter(mock_pair):
    pair = mock_pair(8, 0, 1.0, PoolConfig(topk=2, depth=2, expand=1), capacity=64)
    with pytest.raises(ValueError, match=r"`prompt` must hold at least one token"):
        decode(pair.target, pair.drafter, [], DecodeConfig(), frozenset({0}), None)
    with pytest.raises(ValueError, match=r"decoder 'draft' needs a drafter"):
        decode(pair.target, None, [1], DecodeConfig("draft"), frozenset({0}), None)
