"""Tree attention and KV bookkeeping: the ancestor mask, tree-pass rows at their addresses, and commits
that compact the accepted path so the next root row equals a fresh prefill's (checked on the mock, whose
rows depend on the exact prefix each slot sees)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.mock import MaskError, MockModel, MockRunner
from pipeline.config import CapacityError, PoolConfig
from pipeline.decode import decode
from pipeline.pool import ROOT
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from pipeline.tree import Tree, ancestor_matrix
import target_proc.target
from target_proc.target import Target

VOCAB = 32


def test_ancestor_matrix_small_tree():
    #   0 -> 1 -> 3        4 -> 5
    #   0 -> 2
    parent = np.array([ROOT, 0, 0, 1, ROOT, 4])
    want = np.array([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1, 1],
    ], bool)
    np.testing.assert_array_equal(ancestor_matrix(parent), want)


def test_ancestor_matrix_of_a_chain_is_causal():
    np.testing.assert_array_equal(ancestor_matrix(np.arange(-1, 5)), np.tril(np.ones((6, 6), bool)))


def branching_tree() -> Tree:
    # Two branches under the root; the deepest path 1 -> 2 -> 3 is not the first branch, so accepting it
    # moves K/V in a commit.
    token = np.array([5, 6, 7, 8, 9, 10], np.int64)
    parent = np.array([ROOT, ROOT, 1, 2, 0, 2], np.int64)
    return Tree(token, parent, np.arange(6, dtype=np.int64))


def address_row(model: MockModel, tokens) -> np.ndarray:
    return model.logits(model.digest(tokens))


def fresh_root_row(model: MockModel, context, root) -> torch.Tensor:
    """The root row after a fresh prefill of the whole committed context."""
    fresh = Target(MockRunner(model, 256))
    fresh.prefill(context)
    return fresh.root_pass(root)


@pytest.mark.parametrize("with_root", [True, False], ids=["root-in-tree-pass", "root-pass-first"])
def test_commit_gives_fresh_prefill_rows(with_root):
    model = MockModel(VOCAB, 1)
    target = Target(MockRunner(model, 256))
    context = [3, 1, 4, 1, 5]
    target.prefill(context[:-1])
    root = context[-1]
    tree = branching_tree()
    # Each round accepts a different path: the deepest branch, a first-level node, nothing, a middle node.
    for accepted, next_root in (([1, 2, 3], 11), ([0], 12), ([], 13), ([1, 2], 14)):
        if with_root:
            rows = target.tree_pass(tree, root)
            np.testing.assert_array_equal(rows[0].numpy(), address_row(model, context))
            rows = rows[1:]
        else:
            np.testing.assert_array_equal(target.root_pass(root).numpy(), address_row(model, context))
            rows = target.tree_pass(tree, None)
        assert rows.shape == (len(tree), VOCAB)
        for i in range(len(tree)):
            want = address_row(model, context + tree.token[tree.path(i)].tolist())
            np.testing.assert_array_equal(rows[i].numpy(), want)
        target.commit(accepted)
        context = context + tree.token[accepted].tolist()
        assert target.before_root == len(context)
        root = next_root
        context = context + [root]
        # The check's root pass writes the root's slot, which the next round's pass writes again.
        np.testing.assert_array_equal(target.root_pass(root).numpy(),
                                      fresh_root_row(model, context[:-1], root).numpy())


@pytest.mark.parametrize("decoder", DECODERS)
def test_cache_holds_the_committed_context_after_a_decode(decoder, mock_pair):
    # Every slot of the committed context holds the digest of exactly its prefix: the compacted cache
    # equals the cache of a fresh prefill of prompt + output.
    pair = mock_pair(VOCAB, 2, 1.0, PoolConfig(topk=4, depth=5, expand=3))
    prompt = [4, 9, 2]
    config = DecodeConfig(decoder, 1.0, 12, max_new_tokens=40)
    result = decode(pair.target, pair.drafter, prompt, config, frozenset(), torch.Generator().manual_seed(3))
    # The last continuation is the next root, not yet in the cache; the cache holds the last round whole
    context = prompt + (result.tokens + result.beyond)[:-1]
    runner = pair.target.runner
    assert pair.target.before_root == len(context)
    for slot in range(len(context)):
        assert runner.digests[slot] == pair.target_model.digest(context[: slot + 1]), slot
    np.testing.assert_array_equal(runner.positions[: len(context)], np.arange(len(context)))


def test_tree_pass_capacity_is_checked():
    target = Target(MockRunner(MockModel(VOCAB, 1), 8))
    target.prefill([1, 2, 3, 4])
    with pytest.raises(CapacityError, match=r"needs 11 KV slots but the target's cache holds 8"):
        target.tree_pass(branching_tree(), 5)
    with pytest.raises(CapacityError, match=r"needs 9 KV slots but the target's cache holds 8"):
        target.prefill(list(range(8)))


def prefilled_runner() -> MockRunner:
    runner = MockRunner(MockModel(VOCAB, 1), 64)
    slots = np.arange(4)
    runner.forward(np.array([1, 2, 3, 4]), slots, slots, 0, slots, np.tril(np.ones((4, 4), bool)))
    return runner


def tree_forward(runner: MockRunner, vis: np.ndarray, positions=None):
    """Nodes a (slot 4), b (slot 5) under the prefix, c (slot 6) under a."""
    slots = np.array([4, 5, 6])
    positions = np.array([4, 4, 5]) if positions is None else positions
    return runner.forward(np.array([7, 8, 9]), positions, slots, 4, slots, vis)


def test_mock_accepts_the_right_mask():
    rows = tree_forward(prefilled_runner(), ancestor_matrix(np.array([ROOT, ROOT, 0])))
    model = MockModel(VOCAB, 1)
    np.testing.assert_array_equal(rows[2].numpy(), address_row(model, [1, 2, 3, 4, 7, 9]))


@pytest.mark.parametrize("vis, message", [
    ([[1, 0, 0], [0, 1, 0], [0, 0, 1]], r"row 2 .*not one contiguous prefix"),  # c misses its parent a
    ([[1, 0, 0], [0, 1, 0], [1, 1, 1]], r"row 2 .*not one contiguous prefix"),  # c also sees sibling b
    ([[1, 0, 0], [0, 1, 0], [1, 0, 0]], r"row 2 \(slot 6\) does not see itself"),
    ([[1, 1, 0], [0, 1, 0], [1, 0, 1]], r"row 0 .*not one contiguous prefix"),  # a sees its sibling b
])
def test_mock_rejects_wrong_visibility(vis, message):
    with pytest.raises(MaskError, match=message):
        tree_forward(prefilled_runner(), np.array(vis, bool))


def test_mock_rejects_wrong_positions():
    with pytest.raises(MaskError, match=r"row 2 at position 6"):
        tree_forward(prefilled_runner(), ancestor_matrix(np.array([ROOT, ROOT, 0])), np.array([4, 4, 6]))


def test_mock_rejects_a_prefix_with_holes():
    runner = prefilled_runner()
    runner.positions[2] = -1
    with pytest.raises(MaskError, match=r"slots \[0, 4\) do not hold positions 0..3"):
        tree_forward(runner, ancestor_matrix(np.array([ROOT, ROOT, 0])))


def test_target_with_a_causal_mask_is_caught(monkeypatch):
    # A target that builds a plain causal mask for a branching tree lets siblings see each other.
    monkeypatch.setattr(target_proc.target, "ancestor_matrix",
                        lambda parent: np.tril(np.ones((len(parent), len(parent)), bool)))
    target = Target(MockRunner(MockModel(VOCAB, 1), 64))
    target.prefill([1, 2, 3])
    with pytest.raises(MaskError):
        target.tree_pass(branching_tree(), 4)
