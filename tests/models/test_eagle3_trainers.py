"""Heads from each trainer, read as that trainer means them: a fixture head in its layout (random weights)
grows the pool that the plain recompute of tests.models.eagle3_heads gives with the trainer's arithmetic
written out here; a field that would change the arithmetic beyond what this runtime runs is refused."""

from __future__ import annotations

import json

import pytest
import torch

from drafter_proc.head import HeadDrafter
from models.eagle3 import Eagle3Head, HeadRunner
from models.eagle3_config import HeadConfig, HeadError, read_head
from pipeline.config import PoolConfig
from tests.models.eagle3_heads import (TARGET_LAYERS, head_config, head_weights, inverse_frequencies,
                                       llama3_frequencies, reference_path, small_target, write_head)

CONTEXT = [5, 17, 3, 60, 41, 9, 77, 12, 30]


def _outputs_of(target, layers) -> torch.Tensor:
    """(n, 3T): the OUTPUTS of the target's layers (transformers' hidden_states[i + 1])."""
    with torch.no_grad():
        out = target(input_ids=torch.tensor([CONTEXT]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i + 1][0] for i in layers], -1)


def _inputs_of(target, layers) -> torch.Tensor:
    with torch.no_grad():
        out = target(input_ids=torch.tensor([CONTEXT]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], -1)


def _assert_reference_pool(directory, cfg: dict, w: dict, want_feats: torch.Tensor, **arithmetic) -> None:
    """The pool the head in `directory` grows from the features of the layers its config names equals, at every
    candidate, the recompute over `want_feats` with `arithmetic`."""
    target = small_target()
    head_cfg, weights = read_head(directory)
    embed = target.get_input_embeddings().weight.detach()
    head = Eagle3Head.build(head_cfg, weights, embed, "cpu", torch.float32)
    feats = _inputs_of(target, head_cfg.feature_layers(TARGET_LAYERS))
    pool = HeadDrafter(HeadRunner(head, 64), PoolConfig(topk=3, depth=3, expand=2)).start(CONTEXT, feats[:-1]).pool
    for i in range(len(pool)):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = int(pool.parent[j])
        path = path[::-1]
        logits = reference_path(cfg, w, embed, want_feats, CONTEXT, [int(pool.token[k]) for k in path[:-1]],
                                **arithmetic)
        want = float(torch.log_softmax(logits[-1], -1)[int(pool.token[i])])
        assert abs(float(pool.logp[i]) - want) < 1e-5 * (1 + abs(want)), (i, path)  # float32 rounding


def test_a_safeailab_head_fuses_the_inputs_of_2_half_and_third_last(tmp_path):
    cfg = head_config()
    w = head_weights(cfg)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 4, 5)))


def test_a_specforge_heads_ids_name_layer_outputs(tmp_path):
    """SpecForge writes the layers whose outputs it fused (its default 1, L // 2 - 1, L - 4): as SGLang reads
    them, ids that begin at 1 and rise are outputs."""
    cfg = head_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 5]})
    w = head_weights(cfg)
    assert HeadConfig.from_dict(cfg).feature_layers(TARGET_LAYERS) == (2, 3, 6)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _outputs_of(small_target(), (1, 2, 5)))


def test_ids_that_do_not_begin_at_1_name_layer_inputs_as_vllm_reads_them(tmp_path):
    cfg = head_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 3, 6]})
    w = head_weights(cfg)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 3, 6)))


def _speculators(cfg: dict, **own) -> dict:
    """vLLM speculators' layout: the layer's Llama config inside, the head's own fields outside."""
    layer = {k: v for k, v in cfg.items() if k != "draft_vocab_size"}
    return {"speculators_model_type": "eagle3", "architectures": ["Eagle3Speculator"],
            "transformer_layer_config": layer, "draft_vocab_size": cfg["draft_vocab_size"], **own}


def test_a_speculators_head_adds_the_attention_to_the_normed_hidden(tmp_path):
    """vLLM reads a speculators config's norm_before_residual as true where it is absent, and its one layer's
    weights are named layers.0."""
    cfg = head_config()
    w = head_weights(cfg)
    renamed = {k.replace("midlayer.", "layers.0."): v for k, v in w.items()}
    directory = write_head(tmp_path / "h", _speculators(cfg), renamed)
    assert HeadConfig.from_dict(_speculators(cfg)).norm_before_residual
    assert not HeadConfig.from_dict(_speculators(cfg, norm_before_residual=False)).norm_before_residual
    _assert_reference_pool(directory, cfg, w, _inputs_of(small_target(), (2, 4, 5)), norm_before_residual=True)


def test_norm_before_residual_in_a_plain_config_is_honoured(tmp_path):
    cfg = head_config(norm_before_residual=True)
    w = head_weights(cfg)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 4, 5)),
                           norm_before_residual=True)


def test_a_transformers_5_config_takes_theta_from_rope_parameters(tmp_path):
    cfg = head_config(rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    del cfg["rope_theta"]
    w = head_weights(cfg)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 4, 5)),
                           inv=inverse_frequencies(16, 500000.0))


def test_a_head_dim_other_than_hidden_over_heads(tmp_path):
    cfg = head_config(head_dim=32)
    w = head_weights(cfg)
    assert w["midlayer.self_attn.q_proj.weight"].shape == (128, 128)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 4, 5)))


@pytest.mark.parametrize("field", ["rope_scaling", "rope_parameters"])
def test_llama3_rope_scaling_as_llama_3_trains_it(tmp_path, field):
    """Llama 3's scaling over an original context of 16 positions, so that it moves this head's frequencies."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
    cfg = head_config(**{field: {**scaling, "rope_theta": 10000.0} if field == "rope_parameters" else scaling})
    w = head_weights(cfg)
    inv = llama3_frequencies(inverse_frequencies(16, 10000.0), 8.0, 1.0, 4.0, 16)
    assert not torch.allclose(inv, inverse_frequencies(16, 10000.0))
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 4, 5)),
                           inv=inv)


def test_linear_rope_scaling_divides_the_positions(tmp_path):
    cfg = head_config(rope_scaling={"type": "linear", "factor": 4.0})
    w = head_weights(cfg)
    _assert_reference_pool(write_head(tmp_path / "h", cfg, w), cfg, w, _inputs_of(small_target(), (2, 4, 5)),
                           inv=inverse_frequencies(16, 10000.0) / 4.0)


@pytest.mark.parametrize("change, said", [
    ({"norm_before_fc": True}, r"`norm_before_fc` is True: this runtime runs the reference's arithmetic"),
    ({"attention_bias": True}, "`attention_bias` is True"),
    ({"mlp_bias": True}, "`mlp_bias` is True"),
    ({"use_aux_hidden_state": False}, "`use_aux_hidden_state` is False"),
    ({"num_hidden_layers": 2}, "`num_hidden_layers` is 2"),
    ({"hidden_act": "gelu"}, "`hidden_act` is 'gelu'"),
    ({"partial_rotary_factor": 0.5}, "`partial_rotary_factor` is 0.5"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope type 'yarn'"),
])
def test_a_field_that_changes_the_arithmetic_is_refused_not_ignored(tmp_path, change, said):
    directory = write_head(tmp_path / "h", head_config(**change), head_weights(head_config()))
    with pytest.raises(HeadError, match=said):
        read_head(directory)


def test_a_speculators_config_of_another_type_is_refused():
    with pytest.raises(HeadError, match="speculators config of type 'mlp_speculator'"):
        HeadConfig.from_dict({"speculators_model_type": "mlp_speculator", "transformer_layer_config": {}})
    with pytest.raises(HeadError, match="`norm_before_fc` is True"):
        HeadConfig.from_dict(_speculators(head_config(), norm_before_fc=True))


def test_the_trainers_config_files_round_trip_through_json(tmp_path):
    """What the fixtures write is JSON a trainer could have written (no tensors, no tuples)."""
    for cfg in (head_config(), _speculators(head_config())):
        assert json.loads(json.dumps(cfg)) == cfg
