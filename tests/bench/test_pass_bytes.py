"""The byte model of one pass: weights from the shapes, K/V from the slots attended over."""

from __future__ import annotations

import pytest

from models.hf import aligned_slots, graph_spans
from bench.pass_bytes import attention_flop_share, captured_pass_bytes, pass_bytes, weight_count


def test_llama_8b_weights_are_its_parameters_less_the_input_embedding():
    total = 8_030_261_248  # Llama-3.1-8B's published parameter count
    assert weight_count("llama-3.1-8b") == total - 128256 * 4096


def test_kv_bytes_grow_linearly_with_the_slots_and_weights_do_not():
    one, two = pass_bytes("llama-3.1-8b", 1000), pass_bytes("llama-3.1-8b", 2000)
    assert two.kv == 2 * one.kv and two.weights == one.weights
    assert one.kv == 1000 * 2 * 32 * 8 * 128 * 2  # K and V, layers, KV heads, head dim, bf16


def test_a_captured_pass_reads_the_whole_physical_cache_when_the_context_fills_it():
    for b in (captured_pass_bytes("llama-3.1-8b", 8192), captured_pass_bytes("llama-3.1-8b", 8192, 1, 2, 8000)):
        assert b.slots == aligned_slots(8192) and b.kv == pass_bytes("llama-3.1-8b", aligned_slots(8192)).kv


@pytest.mark.parametrize("context, rows, span", [(0, 1, 4224), (4222, 1, 4224), (4223, 1, 8320), (4200, 72, 8320),
                                                 (30000, 72, 32896)])
def test_a_captured_pass_reads_the_smallest_span_covering_its_slots(context, rows, span):
    assert graph_spans(aligned_slots(32768)) == (4224, 8320, 16512, 32896)
    b = captured_pass_bytes("llama-3.1-8b", 32768, rows, 2, context)
    assert b.slots == span and b.kv == pass_bytes("llama-3.1-8b", span).kv


def test_the_mask_grows_with_the_rows_and_the_group():
    one, many = pass_bytes("llama-3.1-8b", 512, rows=1), pass_bytes("llama-3.1-8b", 512, rows=72)
    assert many.mask == 72 * one.mask == 72 * 32 * 4 * 512 * 2  # layers, query heads per KV head, bf16


def test_smollm2_weights_are_its_parameters_less_the_input_embedding():
    assert weight_count("smollm2-135m") == 134_515_008  # the tied embedding counted once, as the output head


def test_attention_flops_per_row_grow_with_the_slots_against_fixed_weight_flops():
    share = attention_flop_share("llama-3.1-8b", 2048)
    assert share == 2 * 32 * 32 * 128 * 2048 / weight_count("llama-3.1-8b")
    assert attention_flop_share("llama-3.1-8b", 4096) == 2 * share
