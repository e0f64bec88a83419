"""Models whose rope reads positions on the host are run eagerly instead of failing in graph capture."""

from __future__ import annotations

import pytest

import models  # noqa: F401  (sets the offline environment before transformers is imported)
from models.hf import _rope_types, graphs_blocked_by
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)
ROPES = {
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 8,
                 "long_factor": [2.0] * 8, "factor": 2.0},
}


def llama(**extra) -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(**SMALL, **extra)).eval()


@pytest.mark.parametrize("rope", sorted(ROPES))
def test_host_reading_rope_blocks_graphs_with_a_reason(rope):
    reason = graphs_blocked_by(llama(rope_parameters=ROPES[rope]))
    assert reason is not None and repr(rope) in reason and "host" in reason


def test_legacy_rope_scaling_key_is_read():
    reason = graphs_blocked_by(llama(rope_scaling={"type": "dynamic", "factor": 2.0}))
    assert reason is not None and "'dynamic'" in reason


@pytest.mark.parametrize("rope", [None, {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
                                  {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 128,
                                   "rope_theta": 500000.0}], ids=["default", "linear", "llama3"])
def test_device_only_rope_allows_graphs(rope):
    model = llama(rope_parameters=rope) if rope else llama()
    assert graphs_blocked_by(model) is None


def test_rope_types_per_layer_type_are_all_read():
    params = {"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "dynamic"}}
    assert _rope_types(params) == {"default", "dynamic"}
    assert _rope_types({"full_attention": "longrope", "sliding_attention": "default"}) == {"longrope", "default"}
    assert _rope_types(None) == set() and _rope_types({}) == set()
