"""Tree passes, compaction and padded buckets give the rows of plain sequential passes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from models.hf import CUDA_BUCKETS, HFRunner
from pipeline.pool import Pool
from pipeline.tree import Tree
from target_proc.target import Target
from tests.models.conftest import VOCAB, tiny_llama

TOL = 1e-4  # float32; observed differences are ~1e-6


def reference_rows(model, contexts: list[list[int]]) -> torch.Tensor:
    """Last-position float32 logits of each context, one plain transformers forward each (no cache)."""
    plain = copy.deepcopy(model)
    plain.set_attn_implementation("eager")
    with torch.inference_mode():
        return torch.stack([plain(input_ids=torch.tensor([c])).logits[0, -1].float() for c in contexts])


def random_tree(rng: np.random.Generator, n: int) -> Tree:
    """A random tree of n nodes with distinct sibling tokens, parents before children."""
    parent, token = [], []
    for i in range(n):
        p = int(rng.integers(-1, i)) if i else -1
        taken = {t for q, t in zip(parent, token) if q == p}
        token.append(int(rng.choice([t for t in range(1, VOCAB) if t not in taken])))
        parent.append(p)
    return Tree(np.array(token), np.array(parent), np.arange(n))


def path_context(context: list[int], tree: Tree, i: int) -> list[int]:
    return context + tree.token[tree.path(i)].tolist()


@pytest.mark.parametrize("with_root", [True, False])
def test_tree_rows_equal_sequential_rows(tiny_model, with_root):
    rng = np.random.default_rng(0)
    prompt = rng.integers(1, VOCAB, 23).tolist()
    tree = random_tree(rng, 17)
    target = Target(HFRunner(tiny_model, 256))
    target.prefill(prompt[:-1])
    if with_root:
        rows = target.tree_pass(tree, prompt[-1])
        root_row, node_rows = rows[0], rows[1:]
    else:
        root_row = target.root_pass(prompt[-1]).clone()
        node_rows = target.tree_pass(tree, None)
    want = reference_rows(tiny_model, [prompt] + [path_context(prompt, tree, i) for i in range(len(tree))])
    assert (root_row - want[0]).abs().max() < TOL
    assert (node_rows - want[1:]).abs().max() < TOL


def test_root_row_after_commit_equals_fresh_prefill(tiny_model):
    """Compaction parity: after committing an accepted path, the next root row is the full context's."""
    rng = np.random.default_rng(1)
    prompt = rng.integers(1, VOCAB, 11).tolist()
    target = Target(HFRunner(tiny_model, 256))
    target.prefill(prompt[:-1])
    context = list(prompt)
    for round_ in range(4):
        tree = random_tree(rng, 12)
        target.root_pass(context[-1])
        target.tree_pass(tree, None)
        leaf = int(rng.integers(0, len(tree)))
        accepted = tree.path(leaf)[: 1 + round_ % 3]
        target.commit(accepted)
        continuation = int(rng.integers(1, VOCAB))
        context += tree.token[accepted].tolist() + [continuation]
        row = target.root_pass(continuation).clone()
        assert (row - reference_rows(tiny_model, [context])[0]).abs().max() < TOL, f"round {round_}"


def test_padded_buckets_match_exact_passes():
    """The graph code path (coarse buckets, pad rows writing a scratch slot) run eagerly on the CPU."""
    model = tiny_llama()
    rng = np.random.default_rng(2)
    prompt = rng.integers(1, VOCAB, 30).tolist()
    exact = Target(HFRunner(model, 256))
    padded = Target(HFRunner(model, 256, buckets=CUDA_BUCKETS))
    for target in (exact, padded):
        target.prefill(prompt[:-1])
    for size in (1, 3, 5, 9, 13, 20, 33, 50, 64):
        tree = random_tree(rng, size)
        want = exact.tree_pass(tree, prompt[-1]).clone()
        got = padded.tree_pass(tree, prompt[-1])
        assert got.shape == want.shape
        assert (got - want).abs().max() < TOL, f"tree of {size}"
    # pad rows wrote only the scratch slot: the real cache contents agree slot for slot
    used = 1 + len(prompt) + 64
    assert torch.allclose(exact.runner.kv.k[:, :, :, 1:used], padded.runner.kv.k[:, :, :, 1:used], atol=TOL)


def test_pass_beyond_largest_bucket_uses_dense_path():
    model = tiny_llama()
    rng = np.random.default_rng(3)
    prompt = rng.integers(1, VOCAB, 8).tolist()
    runner = HFRunner(model, 256, buckets=(1, 2, 4))
    target = Target(runner)
    target.prefill(prompt[:-1])
    tree = random_tree(rng, 9)
    rows = target.tree_pass(tree, prompt[-1])
    want = reference_rows(model, [prompt] + [path_context(prompt, tree, i) for i in range(len(tree))])
    assert (rows - want).abs().max() < TOL


def test_drafter_pool_rows_equal_sequential_rows():
    """The drafter's scratch tree passes give each expanded candidate the row of its own path."""
    from drafter_proc.drafter import Drafter
    from pipeline.config import PoolConfig

    model = tiny_llama()
    rng = np.random.default_rng(4)
    prompt = rng.integers(1, VOCAB, 15).tolist()
    drafter = Drafter(HFRunner(model, 256), PoolConfig(topk=4, depth=4, expand=3))
    drafter.start(prompt)
    pool = drafter.commit([5, 7]).pool  # a second round reuses the committed cache and a fresh scratch
    context = prompt + [5, 7]
    logp = torch.log_softmax(reference_rows(model, [context] + [
        context + pool.token[_ancestry(pool, i)].tolist() for i in np.flatnonzero(pool.expanded)]), -1)
    # every candidate's edge log-prob is its parent's row at its token
    rows = {-1: logp[0]}
    rows.update({int(i): logp[1 + k] for k, i in enumerate(np.flatnonzero(pool.expanded))})
    want = np.array([float(rows[int(p)][int(t)]) for p, t in zip(pool.parent, pool.token)])
    assert np.abs(pool.logp - want).max() < TOL


def _ancestry(pool: Pool, i: int) -> list[int]:
    path = []
    while i >= 0:
        path.append(int(i))
        i = int(pool.parent[i])
    return path[::-1]


def test_bucket_choice_is_smallest_bucket_that_fits(monkeypatch):
    runner = HFRunner(tiny_llama(), 256, buckets=CUDA_BUCKETS)
    chosen = []
    real_step = runner._step
    monkeypatch.setattr(runner, "_step", lambda b, span: chosen.append(b) or real_step(b, span))
    target = Target(runner)
    target.prefill([3, 4, 5])
    for n in (1, 2, 3, 8, 9, 12, 13, 64, 65, 72):
        chosen.clear()
        target.tree_pass(random_tree(np.random.default_rng(n), n), None)
        assert chosen == [min(b for b in CUDA_BUCKETS if b >= n)], n


def test_padded_pass_writes_only_its_slots_and_the_scratch_slot():
    """An off-by-one in write slots or a pad row writing a real slot changes K/V it must not touch."""
    runner = HFRunner(tiny_llama(), 128, buckets=CUDA_BUCKETS)
    target = Target(runner)
    target.prefill(list(range(1, 20)))
    target.root_pass(20)
    before = runner.kv.k.clone()
    target.tree_pass(random_tree(np.random.default_rng(5), 5), None)  # bucket 8: three pad rows
    changed = (runner.kv.k != before).flatten(0, 2).any(-1).any(0)  # per physical slot
    real = torch.zeros_like(changed)
    real[1 + 20: 1 + 20 + 5] = True  # physical slots of logical P + 1 .. P + 5, P = 19
    assert changed[real].all()
    changed[0] = False  # the scratch slot (pad rows write the same K/V there every time)
    assert torch.equal(changed, real)


def test_target_takes_every_core_only_while_the_drafter_waits(monkeypatch):
    """CPU passes that overlap drafting keep to --threads; verification and ar take --solo-threads."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    monkeypatch.setattr(torch, "get_num_threads", lambda: calls[-1] if calls else 0)
    target = Target(HFRunner(tiny_llama(), 64), threads=(1, 2))
    target.prefill([1, 2, 3], overlapped=True)
    assert calls[-1] == 1
    target.root_pass(4, overlapped=True)
    assert calls[-1] == 1
    target.tree_pass(random_tree(np.random.default_rng(0), 3), None)
    assert calls[-1] == 2
    target.root_pass(4)  # ar: no drafter at work
    assert calls[-1] == 2
    target.root_pass(4, overlapped=True)
    assert calls[-1] == 1


def test_an_overlapped_prefill_takes_every_core_once_the_drafter_is_done(tiny_model, monkeypatch):
    """While the check says the drafter works, prefill chunks run on the target's overlapped threads; after
    it says the drafter is done, on all of them; and the rows are those of a plain prefill."""
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    monkeypatch.setattr(torch, "get_num_threads", lambda: -1)  # every switch is recorded
    rng = np.random.default_rng(5)
    prompt = rng.integers(1, VOCAB, 300).tolist()
    busy = iter([True, True, False, False, False])
    shared = Target(HFRunner(tiny_model, 512), threads=(1, 2))
    shared.prefill(prompt[:-1], overlapped=lambda: next(busy))
    assert calls == [1, 1, 2]  # 299 tokens: three chunks of at most 128
    plain = Target(HFRunner(tiny_model, 512))
    plain.prefill(prompt[:-1])
    assert (shared.root_pass(prompt[-1]) - plain.root_pass(prompt[-1])).abs().max() < TOL
