"""CUDA graph replay gives the rows and greedy outputs of eager passes, an EAGLE-3 head's too; models that
cannot be captured run eagerly; attention runs in the backend chosen for it (skipped without CUDA)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from drafter_proc.drafter import Drafter
from models.eagle3 import HEAD_BUCKETS, HeadRunner, random_head
from models.eagle3_config import HeadConfig
from models.hf import CUDA_BUCKETS, CUDA_SDPA_BACKENDS, HFRunner, aligned_slots, graph_spans
from models.shapes import HEAD_SHAPES, random_model
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.settings import DecodeConfig
from pipeline.tree import ancestor_matrix
from target_proc.target import Target
from tests.gpu.margins import explained, first_parting, relative_margin
from tests.gpu.passes import TOLERANCE, parity, runner_pair, sdpa_backend, watch_replays
from tests.gpu.pipelined import decoder_names
from tests.gpu.section import Budget
from tests.local_drafter import LocalDrafter
from tests.models.test_graph_gate import ROPES, llama
from tests.models.test_tree_pass import random_tree

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def model():
    return random_model("tiny", "cuda:0", torch.bfloat16)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """bf16 tolerance relative to the logits' scale."""
    return bool((a - b).abs().max() <= 2e-2 * b.abs().max().clamp(min=1.0))


def test_graph_rows_equal_eager_rows_for_root_and_every_bucket(model):
    rng = np.random.default_rng(0)
    graphed = Target(HFRunner(model, 512, graphs=True))
    eager = Target(HFRunner(model, 512, graphs=False))
    runner = graphed.runner
    assert runner.spans == graph_spans(aligned_slots(512)) and eager.runner.spans == runner.spans
    assert set(runner.graphs) == {(b, s) for b in CUDA_BUCKETS for s in runner.spans}
    prompt = rng.integers(1, 500, 40).tolist()
    for t in (graphed, eager):
        t.prefill(prompt[:-1])
    assert close(graphed.root_pass(prompt[-1]).clone(), eager.root_pass(prompt[-1]))
    for n in sorted(set(CUDA_BUCKETS) | {3, 10, 50}):
        tree = random_tree(rng, n)
        assert close(graphed.tree_pass(tree, None).clone(), eager.tree_pass(tree, None)), f"tree of {n}"
        if n < CUDA_BUCKETS[-1]:
            assert close(graphed.tree_pass(tree, prompt[-1]).clone(), eager.tree_pass(tree, prompt[-1])), n


def test_every_graph_gives_the_eager_rows_at_a_context_in_its_span(model):
    """Every bucket at a context in every span: each captured graph replays, and gives the eager rows."""
    pair = runner_pair(model, 512, 40)
    gaps, unreplayed = parity(pair, Budget(600, time.monotonic() + 600))
    assert not unreplayed and len(gaps) == 4 * (1 + 2 * len(set(CUDA_BUCKETS) | {3, 10, 50}) - 1)
    assert max(gaps.values()) <= TOLERANCE[torch.bfloat16], max(gaps, key=gaps.get)


def test_graph_rows_equal_eager_rows_from_a_short_context_to_a_full_cache(model):
    """Rounds of root pass, tree pass and commit: the context crosses every span."""
    rng = np.random.default_rng(1)
    graphed = Target(HFRunner(model, 512, graphs=True))
    eager = Target(HFRunner(model, 512, graphs=False))
    prompt = rng.integers(1, 500, 40).tolist()
    for t in (graphed, eager):
        t.prefill(prompt[:-1])
    replayed = watch_replays(graphed)
    root = prompt[-1]
    while graphed.before_root + 1 + 24 <= graphed.capacity:
        tree = random_tree(rng, int(rng.integers(3, 24)))
        assert close(graphed.root_pass(root).clone(), eager.root_pass(root)), graphed.before_root
        assert close(graphed.tree_pass(tree, None).clone(), eager.tree_pass(tree, None)), graphed.before_root
        path = tree.path(int(rng.integers(0, len(tree))))[:3]
        for t in (graphed, eager):
            t.commit(path)
        root = int(rng.integers(1, 500))
    assert {span for _, span in replayed} == set(graphed.runner.spans)


def test_greedy_decoding_with_graphs_equals_without_but_at_near_ties(model):
    """Random bf16 weights give nearly flat rows: where a row's top two logits are within rounding, a graph
    replay and an eager pass may each pick one, and both are right. Outputs must agree up to such a token."""
    drafter_model = random_model("tiny", "cuda:0", torch.bfloat16, seed=1)
    pool = PoolConfig(topk=4, depth=4, expand=3)
    prompt, outputs = [5, 6, 7, 8], {}
    for graphs in (True, False):
        target = Target(HFRunner(model, 512, graphs=graphs))
        drafter = LocalDrafter(Drafter(HFRunner(drafter_model, 512 + pool.n_expanded, graphs=graphs), pool))
        for decoder in decoder_names():
            for budget in (1, 8, 59):
                result = decode(target, drafter, prompt, DecodeConfig(decoder, 0.0, budget, 40), frozenset({0}), None)
                outputs[graphs, decoder, budget] = result.tokens[:40]
    eager = Target(HFRunner(model, 512, graphs=False))
    for graphs, decoder, budget in outputs:
        a, b = outputs[True, decoder, budget], outputs[False, decoder, budget]
        at = first_parting(a, b)
        if graphs and at is not None:
            assert at < min(len(a), len(b)), (decoder, budget, "one output ended early")
            prefix = prompt + a[:at]
            eager.prefill(prefix[:-1])
            margin = relative_margin(eager.root_pass(prefix[-1]), a[at], b[at])
            assert explained(margin, TOLERANCE[torch.bfloat16]), (decoder, budget, at, margin)


def head_rows(runner: HeadRunner, features: torch.Tensor, trees: list) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(logits, layer outputs) of a head's passes: its committed rows for `features` (n, 3T), then a tree step
    of each tree (every node a row below the last committed one, attending to its ancestors)."""
    n = features.shape[0]
    slots = np.arange(n)
    gen = torch.Generator().manual_seed(2)
    out = []

    def run(*args, hidden):
        logits = runner.forward(*args, rows={"hidden": hidden})
        out.append((logits.clone(), runner.outputs.clone()))  # a replay's rows are its graph's until the next

    run(np.arange(1, n + 1), slots, slots, 0, slots, np.tril(np.ones((n, n), bool)), hidden=runner.fuse(features))
    for tree in trees:
        vis = ancestor_matrix(tree.parent)
        cols = n + np.arange(len(tree))
        hidden = torch.randn(len(tree), runner.head.cfg.hidden, generator=gen).to(runner.device, runner.dtype)
        run(tree.token, n - 1 + vis.sum(1), cols, n, cols, vis, hidden=hidden)
    return out


def test_head_graph_rows_equal_eager_rows_for_every_bucket():
    """An EAGLE-3 head captures one graph per pass size over its whole cache: the committed rows' pass and a tree
    step of each size replay them, and give the rows and outputs of its unpadded eager passes."""
    cfg = HeadConfig.from_dict(HEAD_SHAPES["tiny"])
    embed = torch.randn(cfg.vocab, cfg.hidden, generator=torch.Generator().manual_seed(1)) * 0.02
    head = random_head(cfg, embed, "cuda:0", torch.bfloat16)
    graphed, eager = HeadRunner(head, 256, graphs=True), HeadRunner(head, 256, graphs=False)
    assert sorted(graphed.graphs) == sorted(HEAD_BUCKETS) and not eager.graphs
    rng = np.random.default_rng(3)
    features = torch.randn(40, 3 * cfg.target_hidden, generator=torch.Generator().manual_seed(4)).to("cuda:0",
                                                                                                    torch.bfloat16)
    trees = [random_tree(rng, n) for n in sorted(set(HEAD_BUCKETS) | {3, 10, 50}) if 40 + n <= 256]
    for at, (a, b) in enumerate(zip(head_rows(graphed, features, trees), head_rows(eager, features, trees))):
        assert close(a[0], b[0]) and close(a[1], b[1]), f"pass {at}: {len(b[0])} rows"


def test_host_reading_rope_runs_eagerly_instead_of_failing_capture():
    model = llama(rope_parameters=ROPES["dynamic"]).to("cuda:0")
    runner = HFRunner(model, 256, graphs=True)
    assert runner.graphs == {} and "'dynamic'" in runner.eager_reason
    target = Target(runner)
    target.prefill([3, 4, 5])
    assert torch.isfinite(target.tree_pass(random_tree(np.random.default_rng(0), 9), 6)).all()


@pytest.mark.parametrize("span", graph_spans(aligned_slots(2048)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 72])
def test_attention_runs_in_a_chosen_backend(dtype, rows, span):
    """Llama-3.1-8B's attention shapes over each span of a 2048-slot cache go to a backend HFRunner allows."""
    chosen = sdpa_backend("cuda:0", dtype, 32, 8, 128, rows, span, cache=aligned_slots(2048))
    assert chosen in {b.name.lower() for b in CUDA_SDPA_BACKENDS}
    assert chosen == CUDA_SDPA_BACKENDS[0].name.lower(), f"{chosen}: the fused kernel refused these shapes"
