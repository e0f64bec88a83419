"""A drafter with a prompt window drafts from the prompt's last tokens as if they were the whole prompt."""

from __future__ import annotations

import numpy as np

from drafter_proc.drafter import Drafter
from models.hf import HFRunner
from pipeline.config import PoolConfig
from tests.models.conftest import VOCAB, tiny_llama

POOL = PoolConfig(topk=4, depth=3, expand=2)


def pools_after(drafter: Drafter, prompt: list[int], committed: list[int]):
    first = drafter.start(prompt).pool
    second = drafter.commit(committed).pool
    return first, second


def assert_same_pool(a, b) -> None:
    assert np.array_equal(a.token, b.token) and np.array_equal(a.parent, b.parent)
    assert np.abs(a.logp - b.logp).max() < 1e-5


def test_windowed_pools_are_those_of_the_prompts_last_tokens():
    model = tiny_llama()
    prompt = np.random.default_rng(0).integers(1, VOCAB, 90).tolist()
    windowed = pools_after(Drafter(HFRunner(model, 256), POOL, prompt_window=20), prompt, [5, 7])
    alone = pools_after(Drafter(HFRunner(model, 256), POOL), prompt[-20:], [5, 7])
    for a, b in zip(windowed, alone):
        assert_same_pool(a, b)


def test_a_window_longer_than_the_prompt_changes_nothing():
    model = tiny_llama()
    prompt = np.random.default_rng(1).integers(1, VOCAB, 30).tolist()
    windowed = pools_after(Drafter(HFRunner(model, 256), POOL, prompt_window=64), prompt, [3])
    whole = pools_after(Drafter(HFRunner(model, 256), POOL), prompt, [3])
    for a, b in zip(windowed, whole):
        assert_same_pool(a, b)


def test_a_windowed_drafter_holds_only_the_window_in_its_cache():
    drafter = Drafter(HFRunner(tiny_llama(), 64), POOL, prompt_window=16)
    drafter.start(list(range(1, 91)))  # 90 tokens would not fit 64 slots
    assert drafter.through_root == 16
