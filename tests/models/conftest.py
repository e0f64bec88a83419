"""Tiny randomly initialised transformers models built from configs in code (no downloads)."""

from __future__ import annotations

import pytest
import torch

from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from models import cpu_linear

VOCAB = 96


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(config).eval()


def tiny_qwen3() -> Qwen3ForCausalLM:
    torch.manual_seed(1)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=512)
    return Qwen3ForCausalLM(config).eval()


@pytest.fixture(params=["llama", "qwen3"])
def tiny_model(request):
    return {"llama": tiny_llama, "qwen3": tiny_qwen3}[request.param]()


@pytest.fixture
def labelled_calls(monkeypatch):
    """Each timed call says which kernel and row count it runs (for fake timers)."""
    original = cpu_linear._timed_call

    def labelled(name, x, probes):
        fn = original(name, x, probes)
        fn.kernel, fn.rows = name, x.shape[0]
        return fn
    monkeypatch.setattr(cpu_linear, "_timed_call", labelled)
    monkeypatch.setattr(cpu_linear, "MIN_BYTES", 0)
