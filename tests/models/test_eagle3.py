"""An EAGLE-3 head in the reference's layout gives the reference's rows: the first level from the committed
rows, deeper levels from its own outputs along the tree (to float32 rounding); a head that does not fit
its target is refused in one line; the target keeps the inputs of the layers the head fuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from drafter_proc.head import HeadDrafter
from models.eagle3 import Eagle3Head, HeadRunner
from models.eagle3_config import HEAD_KEYS, HeadConfig, HeadError, read_head
from models.hf import HFRunner
from pipeline.config import PoolConfig
from tests.models.eagle3_heads import (TARGET_LAYERS, head_config, head_weights, reference_path, small_target,
                                       target_features, write_head)

CONTEXT = [5, 17, 3, 60, 41, 9, 77, 12, 30]
LAYERS = (2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)


@pytest.fixture
def pair(tmp_path):
    """(target, head directory, the head's weights as written, its config)."""
    cfg = head_config()
    weights = head_weights(cfg)
    return small_target(), write_head(tmp_path / "head", cfg, weights), weights, cfg


def _head(target, directory) -> Eagle3Head:
    cfg, weights = read_head(directory)
    return Eagle3Head.build(cfg, weights, target.get_input_embeddings().weight.detach(), "cpu", torch.float32)


def test_reference_layers_are_2_half_and_third_last():
    cfg = HeadConfig.from_dict(head_config())
    assert cfg.feature_layers(32) == (2, 16, 29) and cfg.feature_layers(36) == (2, 18, 33)
    named = HeadConfig.from_dict(head_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 3, 6]}))
    assert named.feature_layers(8) == (0, 3, 6)


def test_target_keeps_the_inputs_of_the_fused_layers():
    target = small_target()
    runner = HFRunner(target, 64)
    runner.keep_features(LAYERS)
    slots = np.arange(len(CONTEXT))
    runner.forward(np.array(CONTEXT), slots, slots, 0, slots, np.tril(np.ones((len(slots),) * 2, bool)))
    torch.testing.assert_close(runner.features_at(slots), target_features(target, CONTEXT), rtol=1e-5, atol=1e-5)


def test_first_and_deeper_levels_equal_the_reference_arithmetic(pair):
    target, directory, w, cfg = pair
    head = _head(target, directory)
    embed = target.get_input_embeddings().weight.detach()
    feats = target_features(target, CONTEXT)
    config = PoolConfig(topk=4, depth=3, expand=2)
    drafter = HeadDrafter(HeadRunner(head, 64), config)
    pool = drafter.start(CONTEXT, feats[: len(CONTEXT) - 1]).pool
    assert len(pool) == config.size
    for i in range(len(pool)):
        path = _path(pool, i)
        logits = reference_path(cfg, w, embed, feats, CONTEXT, [int(pool.token[j]) for j in path[:-1]])
        want = torch.log_softmax(logits[-1], -1)[int(pool.token[i])]
        assert abs(float(pool.logp[i]) - float(want)) < 1e-5, (i, path)
        # each candidate is among the k best of its row in the reference
        assert float(want) >= float(torch.topk(torch.log_softmax(logits[-1], -1), config.topk).values[-1]) - 1e-5


def test_a_commit_extends_the_rows_as_a_fresh_start(pair):
    target, directory, _, _ = pair
    head = _head(target, directory)
    feats = target_features(target, CONTEXT)
    config = PoolConfig(topk=3, depth=3, expand=2)
    cut = 5
    drafter = HeadDrafter(HeadRunner(head, 64), config)
    drafter.start(CONTEXT[:cut], feats[: cut - 1])
    grown = drafter.commit(CONTEXT[cut:], feats[cut - 1: len(CONTEXT) - 1]).pool
    fresh = HeadDrafter(HeadRunner(head, 64), config).start(CONTEXT, feats[: len(CONTEXT) - 1]).pool
    assert np.array_equal(grown.token, fresh.token) and np.array_equal(grown.parent, fresh.parent)
    np.testing.assert_allclose(grown.logp, fresh.logp, rtol=1e-5, atol=1e-5)


def test_padded_replay_rehearsal_gives_the_eager_rows(pair):
    """The CPU rehearsal of the captured head passes: each bucket padded with pad rows, as a graph replays."""
    target, directory, _, _ = pair
    head = _head(target, directory)
    feats = target_features(target, CONTEXT)
    config = PoolConfig(topk=4, depth=3, expand=3)
    eager = HeadDrafter(HeadRunner(head, 64), config).start(CONTEXT, feats[:-1]).pool
    runner = HeadRunner(head, 64)
    runner.capture()
    padded = HeadDrafter(runner, config).start(CONTEXT, feats[:-1]).pool
    assert np.array_equal(eager.token, padded.token)
    np.testing.assert_allclose(eager.logp, padded.logp, rtol=1e-5, atol=1e-5)


def test_a_narrower_head_with_its_own_embedding_equals_the_reference(tmp_path):
    """A head narrower than its target (target_hidden_size) holds its own embedding, which it takes."""
    cfg = head_config(hidden_size=48, intermediate_size=80, target_hidden_size=64)
    weights = head_weights(cfg, embed=True)
    target = small_target()
    head = _head(target, write_head(tmp_path / "h", cfg, weights))
    assert torch.equal(head.embed, weights["embed_tokens.weight"])
    feats = target_features(target, CONTEXT)
    pool = HeadDrafter(HeadRunner(head, 64), PoolConfig(topk=3, depth=2, expand=2)).start(CONTEXT, feats[:-1]).pool
    for i in range(len(pool)):
        path = _path(pool, i)
        logits = reference_path(cfg, weights, weights["embed_tokens.weight"], feats, CONTEXT,
                                [int(pool.token[j]) for j in path[:-1]])
        assert abs(float(pool.logp[i]) - float(torch.log_softmax(logits[-1], -1)[int(pool.token[i])])) < 1e-5


def test_a_head_without_an_embedding_of_its_width_is_refused(tmp_path):
    cfg = head_config(hidden_size=48, intermediate_size=80, target_hidden_size=64)
    head_cfg, weights = read_head(write_head(tmp_path / "h", cfg, head_weights(cfg)))
    with pytest.raises(HeadError, match=r"the token embedding has shape \(96, 64\); the head takes \(96, 48\)"):
        Eagle3Head.build(head_cfg, weights, small_target().get_input_embeddings().weight.detach(), "cpu",
                         torch.float32)


@pytest.mark.parametrize("change, message", [
    ({"target_hidden_size": 32, "hidden_size": 48, "intermediate_size": 80},
     r"fc takes 3 x 32 target features; the target's hidden size is 64"),
    ({"vocab_size": 100}, r"vocabulary of 100 differs from the target's 96"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 9]}}, r"target layers \[2, 4, 9\]; the target has 8"),
])
def test_a_head_that_does_not_fit_its_target_is_refused(tmp_path, change, message):
    cfg = head_config(**change)
    directory = write_head(tmp_path / "h", cfg, head_weights(cfg))
    head_cfg, _ = read_head(directory)
    with pytest.raises(HeadError, match=message):
        head_cfg.check_target(64, 96, TARGET_LAYERS)


def test_a_weight_of_the_wrong_shape_is_refused_in_one_line(tmp_path):
    cfg = head_config()
    weights = head_weights(cfg)
    weights["midlayer.self_attn.q_proj.weight"] = weights["midlayer.self_attn.q_proj.weight"][:, :48]
    with pytest.raises(HeadError, match=r"q_proj.weight has shape \(64, 48\); its config says \(64, 128\)"):
        read_head(write_head(tmp_path / "h", cfg, weights))


def test_a_directory_without_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(head_config()))
    with pytest.raises(HeadError, match="neither model.safetensors nor pytorch_model.bin"):
        read_head(tmp_path)


def _path(pool, i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(i)
        i = int(pool.parent[i])
    return out[::-1]


def test_a_head_directory_loads_over_a_random_target_with_its_embedding(tmp_path):
    """eagle3:PATH over random:tiny (2 layers: the head names the layers it fuses); the embedding is the
    target's, the tokenizer the target's, and the cache one layer's."""
    from models.load import load
    from models.options import ModelOptions
    from models.shapes import random_model

    cfg = head_config(vocab_size=512, draft_vocab_size=100, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]})
    directory = write_head(tmp_path / "head", cfg, head_weights(cfg))
    loaded = load(ModelOptions(model=f"eagle3:{directory}", head_target="random:tiny"), "drafter")
    assert loaded.is_head and loaded.vocab_size == 512
    target_embedding = random_model("tiny", "cpu", torch.float32).get_input_embeddings().weight
    assert torch.equal(loaded.model.embed, target_embedding)
    assert loaded.identity["dtype"] == "float32" and loaded.identity["revision"].startswith("files:")
    assert loaded.kv_bytes(100) == 2 * 2 * 16 * 4 * 128  # K and V, 2 KV heads of 16, 128 aligned slots


def test_an_int8_head_drafts_what_its_float_head_drafts_to_quantization_error(tmp_path):
    """`:int8` runs every linear layer of the head as a dynamic int8 product on the CPU: the rows stay within
    a few percent of float32's and the top draft tokens mostly agree."""
    from models.load import load
    from models.options import ModelOptions

    cfg = head_config(vocab_size=512, draft_vocab_size=100, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]})
    directory = write_head(tmp_path / "head", cfg, head_weights(cfg))
    plain, quantized = (load(ModelOptions(model=f"eagle3:{directory}{suffix}", head_target="random:tiny"), "drafter")
                        for suffix in ("", ":int8"))
    stacked = [key for group in quantized.model.int8 for key in group]  # fc, the projections, lm_head: once each
    assert sorted(stacked) == sorted(k for k in HEAD_KEYS if "norm" not in k)
    assert quantized.identity["dtype"] == "qint8 linear layers" and not plain.model.int8
    g = torch.Generator().manual_seed(0)
    tokens, feats = torch.randint(0, 512, (6,), generator=g), torch.randn(6, 3 * 64, generator=g)

    def rows(head):
        hidden = head.fuse(feats)
        out = head.layer(tokens, hidden, torch.arange(6), lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True))
        return head.logits(out)

    with torch.no_grad():
        want, got = rows(plain.model), rows(quantized.model)
    assert float((got - want).norm() / want.norm()) < 0.05
    assert (got.argmax(-1) == want.argmax(-1)).float().mean() >= 0.8
    with pytest.raises(HeadError, match="the mock head has no linear layers to quantize"):
        load(ModelOptions(model="eagle3:mock:int8"), "drafter")


def test_stacked_int8_layers_give_each_layer_its_own_product_bit_for_bit(tmp_path):
    """q, k and v (and gate and up) run as one int8 product: each output row keeps its own weight scale and the
    input its one scale per pass, so every layer's output is the one its own int8 product gives."""
    from models.eagle3 import GATE_UP, QKV, int8_linear
    from models.load import load
    from models.options import ModelOptions

    cfg = head_config(vocab_size=512, draft_vocab_size=100, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]})
    head = load(ModelOptions(model=f"eagle3:{write_head(tmp_path / 'head', cfg, head_weights(cfg))}:int8",
                             head_target="random:tiny"), "drafter").model
    for group in (QKV, GATE_UP):
        x = torch.randn(5, head.w[group[0]].shape[1], generator=torch.Generator().manual_seed(1))
        lone = [int8_linear(head.w[key])(x) for key in group]
        assert torch.equal(head.linears(group, x), torch.cat(lone, -1))


def test_the_rope_table_of_a_cpu_runner_gives_the_computed_angles(pair):
    """An eager CPU runner takes rope's cos and sin from a table (Eagle3Head.keep_angles); past its end, and
    without one, they are computed: the same values."""
    from models.eagle3 import rope_angles

    target, directory, _, _ = pair
    head = _head(target, directory)
    positions = torch.tensor([0, 3, 900, 7])
    want = rope_angles(positions, head.inv_freq, head.rope_scale)
    assert not head.angles
    computed = head.rope(positions)
    runner = HeadRunner(head, 8)  # a table of its slots, fewer rows than position 900
    assert len(head.angles[0]) == runner.slots < 900
    beyond = head.rope(positions)
    head.keep_angles(1024)
    for got in (computed, beyond, head.rope(positions)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_the_embedded_heads_name_resolves_to_its_directory():
    from models.options import EMBEDDED_HEAD_DIR, ModelOptions, for_target, head_path_spec, is_head_spec

    assert is_head_spec("smollm2:eagle3") and is_head_spec("smollm2:eagle3:int8") and not is_head_spec("smollm2:int8")
    assert head_path_spec("smollm2:eagle3:int8") == f"eagle3:{EMBEDDED_HEAD_DIR}"
    assert (EMBEDDED_HEAD_DIR / "config.json").is_file() and (EMBEDDED_HEAD_DIR / "model.safetensors").is_file()
    assert for_target(ModelOptions(model="smollm2:eagle3"), "smollm2").head_target == "smollm2"
    assert (EMBEDDED_HEAD_DIR / "model.safetensors").stat().st_size <= 20_000_000


def test_a_head_is_refused_without_its_target_or_over_another(tmp_path):
    from models.load import load
    from models.options import ModelOptions

    directory = write_head(tmp_path / "head")
    with pytest.raises(HeadError, match="it needs `head_target`"):
        load(ModelOptions(model=f"eagle3:{directory}"), "drafter")
    with pytest.raises(HeadError, match=r"vocabulary of 96 differs from the target's 512"):
        load(ModelOptions(model=f"eagle3:{directory}", head_target="random:tiny"), "drafter")


def test_random_heads_of_public_shapes_fit_their_targets():
    from models.eagle3_load import target_side
    from models.shapes import HEAD_SHAPES

    for name in ("llama-3.1-8b", "smollm2-135m"):
        side = target_side(f"random:{name}", lambda: None)
        HeadConfig.from_dict(HEAD_SHAPES[name]).check_target(side.hidden, side.vocab, side.layers)


LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def test_llama3_rope_scaling_gives_transformers_frequencies():
    """A head of Llama 3.1's rope (theta 500,000, llama3 scaling) as transformers' Llama computes it."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from models.eagle3 import rotary
    from models.shapes import HEAD_SHAPES

    cfg = HeadConfig.from_dict({**HEAD_SHAPES["llama-3.1-8b"], "rope_scaling": LLAMA3_ROPE,
                                "max_position_embeddings": 131072})
    inv, scale = rotary(cfg, "cpu")
    llama = LlamaConfig(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
                        rope_parameters={"rope_theta": 500000.0, **LLAMA3_ROPE})
    want = LlamaRotaryEmbedding(llama)
    torch.testing.assert_close(inv, want.inv_freq.float())
    assert scale == want.attention_scaling


def test_the_random_llama_head_claims_no_scaling_the_references_config_class_refuses():
    """The reference's config class takes a rope scaling of type linear or dynamic only: the public head's
    config has none."""
    from models.shapes import HEAD_SHAPES

    assert HeadConfig.from_dict(HEAD_SHAPES["llama-3.1-8b"]).rope_scaling is None
