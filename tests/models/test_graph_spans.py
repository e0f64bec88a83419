"""The span ladder: passes attend over the smallest captured span that covers the used slots, and give the
rows of passes over the used slots alone (the graph code path run eagerly on the CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from models.hf import CUDA_BUCKETS, GRAPH_SPANS, SLOT_ALIGN, SPAN_STEP, HFRunner, aligned_slots, graph_spans
from target_proc.target import Target
from tests.models.conftest import VOCAB, tiny_llama
from tests.models.test_slot_alignment import run_script


@pytest.mark.parametrize("capacity", [1, 100, 256, 512, 2048, 8192, 32768, 131072])
def test_spans_are_the_cache_and_its_aligned_halvings(capacity):
    slots = aligned_slots(capacity)
    spans = graph_spans(slots)
    assert spans[-1] == slots and list(spans) == sorted(set(spans)) and len(spans) <= GRAPH_SPANS
    assert all(s % SLOT_ALIGN == 0 for s in spans)
    for i in range(1, GRAPH_SPANS):  # every halving is covered by a span at most SLOT_ALIGN above it
        half = slots / 2 ** i
        assert min(s for s in spans if s >= half) < half + SLOT_ALIGN
    if slots >= 8 * SLOT_ALIGN:
        assert len(spans) == GRAPH_SPANS and spans[0] == -(-slots // (8 * SLOT_ALIGN)) * SLOT_ALIGN


def test_ladder_rows_equal_rows_over_the_used_slots(monkeypatch):
    model = tiny_llama()
    capacity = 512  # 640 slots: spans 128, 256, 384 and 640; the script runs from 120 tokens to full
    plain = Target(HFRunner(model, capacity, buckets=CUDA_BUCKETS, attend="used"))
    laddered = Target(HFRunner(model, capacity, buckets=CUDA_BUCKETS, attend="ladder"))
    runner = laddered.runner
    assert plain.runner.spans is None and runner.spans == (128, 256, 384, 640)
    seen, wanted = [], []
    real_span, real_step = runner._span, runner._step

    def span(prefix, slots, cols):
        used = real_span(prefix, slots, cols)
        wanted.append(min(s for s in runner.spans if s >= used))
        return used

    monkeypatch.setattr(runner, "_span", span)
    monkeypatch.setattr(runner, "_step", lambda b, s: seen.append(s) or real_step(b, s))
    want = run_script(plain, np.random.default_rng(5))
    got = run_script(laddered, np.random.default_rng(5))
    assert len(got) == len(want) > 10
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g - w).abs().max() < 1e-5, f"pass {i}"
    assert seen == wanted[-len(seen):] and {256, 384, 640} <= set(seen)  # wanted also holds the prefill's


def test_eager_cpu_passes_attend_over_the_used_slots_rounded_up():
    runner = HFRunner(tiny_llama(), 512, buckets=CUDA_BUCKETS)
    target = Target(runner)
    target.prefill([1 + i % (VOCAB - 1) for i in range(99)])
    target.root_pass(7)
    assert runner.spans is None and runner.kv.span == -(-(1 + 100) // SPAN_STEP) * SPAN_STEP

