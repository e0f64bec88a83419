"""The CPU's split attention (an unmasked prefix and a masked tail) gives one whole-mask softmax's rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.hf import HFRunner, prefix_tail_attention, visible_columns
from target_proc.target import Target
from tests.models.conftest import VOCAB, tiny_llama
from tests.models.test_tree_pass import random_tree

MIN = torch.finfo(torch.float32).min


def whole_mask_rows(q, k, v, visible: np.ndarray) -> torch.Tensor:
    """q: (1, H, R, D); k, v: (1, H, span, D); visible: (R, span) bool -> stock SDPA under one mask."""
    mask = torch.zeros(visible.shape).masked_fill_(~torch.as_tensor(visible), MIN)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


@pytest.mark.parametrize("prefix, span", [(0, 64), (37, 64), (63, 64), (120, 192)],
                         ids=["tail only", "both", "prefix only", "both, longer"])
def test_split_attention_equals_whole_mask_attention(prefix, span):
    rng = np.random.default_rng(prefix)
    torch.manual_seed(prefix)
    rows, slots = 6, span + 8  # slots past the span must not count
    q, k, v = torch.randn(1, 2, rows, 16), torch.randn(1, 2, slots, 16), torch.randn(1, 2, slots, 16)
    tail = rng.random((rows, span - 1 - prefix)) < 0.3
    tail[:, :1] = True  # every row sees something (a row seeing nothing is undefined either way)
    tail_mask = torch.zeros(tail.shape).masked_fill_(~torch.as_tensor(tail), MIN)[None, None]
    got = prefix_tail_attention(q, k, v, prefix, span, tail_mask)
    whole = np.zeros((rows, span), bool)
    whole[:, 1:1 + prefix] = True
    whole[:, 1 + prefix:] = tail
    want = whole_mask_rows(q, k[:, :, :span], v[:, :, :span], whole)
    assert (got - want).abs().max() < 1e-5


def test_tail_columns_are_the_whole_mask_after_the_prefix():
    rng = np.random.default_rng(0)
    n, m, prefix, span = 5, 9, 20, 64
    cols = np.sort(rng.choice(np.arange(10, span - 1), m, replace=False))  # some inside the prefix
    vis = rng.random((n, m)) < 0.5
    whole = visible_columns(n, span, prefix, cols, vis, tail_only=False)
    tail = visible_columns(n, span, prefix, cols, vis, tail_only=True)
    assert tail.shape == (n, span - 1 - prefix)
    assert np.array_equal(tail, whole[:, 1 + prefix:])
    assert whole[:, 1:1 + prefix].all() and not whole[:, 0].any()


def test_split_passes_equal_whole_mask_passes_at_a_long_context():
    """The eager CPU path (split) and the buckets-given path (one whole mask) over a context many spans long."""
    model = tiny_llama()
    rng = np.random.default_rng(2)
    prompt = rng.integers(1, VOCAB, 700).tolist()
    split, whole = (Target(HFRunner(model, 800, buckets=b)) for b in (None, tuple(range(1, 73))))
    assert split.runner.host_masks and not whole.runner.host_masks
    for t in (split, whole):
        t.prefill(prompt[:-1])
    assert (split.root_pass(prompt[-1]) - whole.root_pass(prompt[-1])).abs().max() < 1e-5
    tree = random_tree(rng, 30)
    assert (split.tree_pass(tree, None) - whole.tree_pass(tree, None)).abs().max() < 1e-5
