"""models.llama_cpu's forward gives transformers' rows and kept features, bit for bit, where the runner uses it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from models import llama_cpu
from models.hf import HFRunner
from target_proc.target import Target
from tests.models.conftest import VOCAB, tiny_llama, tiny_qwen3
from tests.models.test_tree_pass import random_tree


def grouped_llama() -> LlamaForCausalLM:
    """Three query heads a K/V head, a head dimension apart from hidden / heads, biased attention."""
    torch.manual_seed(2)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=16, attention_bias=True,
                         max_position_embeddings=512)
    return LlamaForCausalLM(config).eval()


def passes(runner: HFRunner, seed: int) -> list[torch.Tensor]:
    """The rows of root passes and tree passes after a prefill and commits, in a fixed sequence."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(1, VOCAB, 37).tolist()
    target = Target(runner)
    target.prefill(prompt[:-1])  # through the dense path: it returns no rows, its K/V are compared after
    out = []
    for _ in range(3):
        out.append(target.root_pass(prompt[-1]).clone())
        tree = random_tree(rng, 9)
        out.append(target.tree_pass(tree, None).clone())
        out.append(target.tree_pass(tree, prompt[-1]).clone())
        target.commit(tree.path(int(rng.integers(0, len(tree))))[:2])
        prompt.append(int(rng.integers(1, VOCAB)))
    return out


@pytest.mark.parametrize("build", [tiny_llama, grouped_llama])
def test_its_rows_and_kept_features_are_transformers_bit_for_bit(build):
    model = build()
    lean, stock = HFRunner(model, 256), HFRunner(copy.deepcopy(model), 256, lean=False)
    assert lean.lean and not stock.lean
    layers = (0, len(model.model.layers) - 1, len(model.model.layers) - 1)  # a layer may be kept twice
    lean.keep_features(layers)
    stock.keep_features(layers)
    for a, b in zip(passes(lean, 0), passes(stock, 0), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(lean.kept.features, stock.kept.features) and lean.kept.features.abs().sum() > 0
    assert torch.equal(lean.kv.k, stock.kv.k) and torch.equal(lean.kv.v, stock.kv.v)


def test_other_models_and_a_gpus_path_keep_transformers_forward():
    qwen3 = tiny_qwen3()
    assert "Qwen3ForCausalLM" in llama_cpu.unsupported(qwen3) and not HFRunner(qwen3, 64).lean
    with pytest.raises(ValueError, match="cannot run Qwen3ForCausalLM here: Qwen3ForCausalLM is not a plain"):
        HFRunner(qwen3, 64, lean=True)
    llama = tiny_llama()
    llama.config.hidden_act = "gelu"
    assert llama_cpu.unsupported(llama) == "its MLP's activation is 'gelu', not silu"
    assert not HFRunner.build(tiny_llama(), 64, graphs=False, rehearse=True).lean  # as on CUDA


def test_a_profile_clock_names_every_part_and_changes_no_row():
    """The clock a profile passes (bench.forward --parts) hears each part of the work and the runner's staging;
    the rows are those of a pass without it."""
    from bench.forward import LEFT, PartClock
    from models.hf import MASK

    model = tiny_llama()
    timed, plain = HFRunner(model, 256), HFRunner(copy.deepcopy(model), 256)
    clock = PartClock()
    timed.tick = clock
    clock.start()
    rows = passes(timed, 5)
    heard = clock.end()
    assert set(heard) == {*llama_cpu.PARTS, MASK, LEFT} and all(ms >= 0 for ms in heard.values())
    assert all(torch.equal(a, b) for a, b in zip(rows, passes(plain, 5)))
