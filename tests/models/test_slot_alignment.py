"""The physical cache rounded up to SLOT_ALIGN slots gives the rows of an unrounded one, and its padding
slots are neither written nor seen."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.hf import CUDA_BUCKETS, SLOT_ALIGN, HFRunner, aligned_slots
from target_proc.target import Target
from tests.models.conftest import VOCAB, tiny_llama
from tests.models.test_tree_pass import random_tree

CAPACITY = 200  # 201 physical slots unrounded, 256 rounded: passes near the end span the padding
PLANTED = 50.0  # K/V of the padding slots: any weight on them would move the rows far


@pytest.mark.parametrize("capacity, want", [(1, 128), (127, 128), (128, 256), (2047, 2048), (2048, 2176)])
def test_physical_slots_are_a_multiple_of_the_alignment(capacity, want):
    assert aligned_slots(capacity) == want
    assert aligned_slots(capacity, 1) == capacity + 1


def run_script(target: Target, rng: np.random.Generator) -> list[torch.Tensor]:
    """Prefill, then rounds of root pass, tree pass and commit until the cache is nearly full -> rows."""
    rows = []
    prompt = rng.integers(1, VOCAB, 120).tolist()
    target.prefill(prompt[:-1])
    root = prompt[-1]
    while target.before_root + 1 + 24 <= target.capacity:
        rows.append(target.root_pass(root).clone())
        tree = random_tree(rng, int(rng.integers(3, 24)))
        rows.append(target.tree_pass(tree, None).clone())
        target.commit(tree.path(int(rng.integers(0, len(tree))))[:3])
        root = int(rng.integers(1, VOCAB))
    rows.append(target.tree_pass(random_tree(rng, 10), root).clone())  # a pass with the root as row 0
    return rows


@pytest.mark.parametrize("buckets", [None, CUDA_BUCKETS, (1, 2, 4)], ids=["exact", "padded", "dense"])
def test_rows_with_aligned_cache_equal_rows_without(buckets):
    model = tiny_llama()
    plain = Target(HFRunner(model, CAPACITY, buckets=buckets, slot_align=1))
    aligned = Target(HFRunner(model, CAPACITY, buckets=buckets))
    assert plain.runner.kv.k.shape[3] == CAPACITY + 1 and aligned.runner.kv.k.shape[3] == 256
    want = run_script(plain, np.random.default_rng(7))
    got = run_script(aligned, np.random.default_rng(7))
    assert len(got) == len(want) > 10
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g - w).abs().max() < 1e-5, f"pass {i}"
    live = slice(0, CAPACITY + 1)
    assert torch.allclose(aligned.runner.kv.k[..., live, :], plain.runner.kv.k[..., live, :], atol=1e-5)


@pytest.mark.parametrize("buckets", [None, CUDA_BUCKETS, (1, 2, 4)], ids=["exact", "padded", "dense"])
def test_padding_slots_are_never_written_or_seen(buckets):
    model = tiny_llama()
    clean = Target(HFRunner(model, CAPACITY, buckets=buckets))
    planted = Target(HFRunner(model, CAPACITY, buckets=buckets))
    pad = slice(CAPACITY + 1, None)
    assert SLOT_ALIGN > 1 and planted.runner.kv.k[..., pad, :].numel() > 0
    planted.runner.kv.k[..., pad, :] = PLANTED
    planted.runner.kv.v[..., pad, :] = PLANTED
    want = run_script(clean, np.random.default_rng(8))
    got = run_script(planted, np.random.default_rng(8))
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g, w), f"pass {i} saw the padding slots"
    assert (planted.runner.kv.k[..., pad, :] == PLANTED).all() and (planted.runner.kv.v[..., pad, :] == PLANTED).all()
