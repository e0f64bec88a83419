"""Configuration checks name the offending field, and decode rejects inputs it cannot run."""

from __future__ import annotations

import pytest

from pipeline.config import CapacityError, ConfigError, PoolConfig
from pipeline.decode import decode
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig


def test_pool_config_defaults_match_the_design():
    config = PoolConfig()
    assert (config.topk, config.depth, config.expand) == (10, 8, 10)
    assert (config.size, config.n_expanded) == (710, 70)
    assert (PoolConfig(topk=3, depth=3, expand=2).size, PoolConfig(topk=3, depth=3, expand=2).n_expanded) == (15, 4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(topk=0), r"`topk` must be a positive integer, got 0"),
    (dict(depth=2.5), r"`depth` must be a positive integer, got 2.5"),
    (dict(expand=True), r"`expand` must be a positive integer, got True"),
    (dict(topk=3, expand=4), r"`expand` \(4\) must not exceed `topk` \(3\)"),
    (dict(depth=1000), r"^`depth` must be at most 64 \(the pool levels the protocol carries\), got 1000$"),
    (dict(topk=100_000, expand=1), r"^`topk` 100000, `depth` 8 and `expand` 1 make a pool of 800000 candidates; "
                                   r"the protocol carries at most 65536$"),
])
def test_pool_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        PoolConfig(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(decoder="eagle"), r"`decoder` must be one of ar, draft, pearl, pearl-top1, root-draw, root, cover, got 'eagle'"),
    (dict(temperature=-1.0), r"`temperature` must be a finite number >= 0, got -1.0"),
    (dict(temperature=float("nan")), r"`temperature` must be a finite number >= 0, got nan"),
    (dict(budget=0), r"`budget` must be a positive integer or auto, got 0"),
    (dict(budget="eight"), r"`budget` must be a positive integer or auto, got .eight."),
    (dict(budget="auto", budget_max=0), r"`budget_max` must be a positive integer, got 0"),
    (dict(budget_prior="global"), r"`budget_prior` must be one of session, decode, got 'global'"),
    (dict(max_new_tokens=0), r"`max_new_tokens` must be a positive integer, got 0"),
    (dict(max_new_tokens=10**12), r"^`max_new_tokens` must be at most 1048576 \(the KV slots a context may have\)"),
    (dict(budget=10**20), r"^`budget` must be at most 65536 \(a tree holds at most a pool's candidates\), got 1000"),
    (dict(budget="auto", budget_max=10**20), r"^`budget_max` must be at most 65536"),
    (dict(seed=-1), r"`seed` must be a non-negative integer, got -1"),
])
def test_decode_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DecodeConfig(**kwargs)



def test_decode_needs_a_prompt_and_a_drafter(mock_pair):
    pair = mock_pair(8, 0, 1.0, PoolConfig(topk=2, depth=2, expand=1), capacity=64)
    with pytest.raises(ValueError, match=r"`prompt` must hold at least one token"):
        decode(pair.target, pair.drafter, [], DecodeConfig(), frozenset({0}), None)
    with pytest.raises(ValueError, match=r"decoder 'draft' needs a drafter"):
        decode(pair.target, None, [1], DecodeConfig("draft"), frozenset({0}), None)


def test_capacity_of_a_decode_is_computed_in_one_place():
    config = DecodeConfig(budget=8, max_new_tokens=100)
    assert config.kv_slots(20) == 20 + 100 + 8 + 1
    config.check_fits(20, 129)
    with pytest.raises(CapacityError, match=r"a prompt of 20 tokens with `max_new_tokens` 100 and `budget` 8 "
                                            r"needs 129 KV slots; the target's cache holds 128 \(raise `max_context`\)"):
        config.check_fits(20, 128)
