"""An EAGLE-3 head's checkpoint as the reference implementation lays it out: its config, its weights, and
whether it fits a target.

A head directory holds `config.json` (a Llama config of one layer plus `draft_vocab_size`, and
`target_hidden_size` where the target's hidden size differs from the head's) and `model.safetensors` or
`pytorch_model.bin` with the keys of HEAD_KEYS. The head's token embedding is its own `embed_tokens.weight`
where the checkpoint holds one, else the target's. Nothing here builds a module (models.eagle3 does).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.config import ConfigError

from models.options import HEAD_PREFIX as PREFIX, HEAD_RANDOM_PREFIX as RANDOM_PREFIX, head_path_spec
DEFAULT_ROPE_THETA = 10000.0  # the reference's rotary base when a config names none

# Weight names in the reference's layout -> what they hold (H: hidden, T: target hidden, Vd: draft vocab)
HEAD_KEYS = ("fc.weight",  # (H, 3T)
             "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",  # (H,)
             "midlayer.post_attention_layernorm.weight",  # (H,)
             "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",  # (heads*D | kv*D, 2H)
             "midlayer.self_attn.v_proj.weight", "midlayer.self_attn.o_proj.weight",  # (kv*D, 2H), (H, heads*D)
             "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",  # (I, H)
             "midlayer.mlp.down_proj.weight",  # (H, I)
             "norm.weight", "lm_head.weight")  # (H,), (Vd, H)
OPTIONAL_KEYS = ("d2t", "t2d", "embed_tokens.weight")  # (Vd,) int64 offsets, (V,) bool, (V, H)


class HeadError(ConfigError):
    """A head's checkpoint cannot be read, or its shapes do not fit its target."""

    def __init__(self, message: str) -> None:
        super().__init__("drafter", message)


@dataclass(frozen=True, slots=True)
class HeadConfig:
    """What a head's config.json says of its shapes (the reference's names in comments)."""

    hidden: int  # hidden_size
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim, else hidden / heads
    intermediate: int  # intermediate_size
    rms_eps: float  # rms_norm_eps
    rope_theta: float  # rope_theta
    rope_scaling: dict | None  # rope_scaling (Llama 3's "llama3" type, or linear)
    vocab: int  # vocab_size: the target's vocabulary, which the embedding covers
    draft_vocab: int  # draft_vocab_size (vocab_size where absent): the rows lm_head scores
    target_hidden: int  # target_hidden_size, else hidden_size: fc takes 3 x this
    layers: tuple[int, ...] | None  # eagle_config.eagle_aux_hidden_state_layer_ids; None: the reference's
    max_positions: int  # max_position_embeddings (the rope's original context for llama3 scaling)

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "draft_vocab",
                     "target_hidden"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise HeadError(f"the head's config has {name} = {getattr(self, name)!r}, not a positive integer")
        if self.heads % self.kv_heads:
            raise HeadError(f"the head's {self.heads} attention heads are not a multiple of its {self.kv_heads} "
                            f"KV heads")
        if self.draft_vocab > self.vocab:
            raise HeadError(f"the head's draft vocabulary of {self.draft_vocab} exceeds its vocabulary of {self.vocab}")
        if self.layers is not None and len(self.layers) != 3:
            raise HeadError(f"the head names {len(self.layers)} target layers to fuse; fc takes 3")

    @classmethod
    def from_dict(cls, cfg: dict) -> HeadConfig:
        hidden, heads = cfg.get("hidden_size"), cfg.get("num_attention_heads")
        if not isinstance(hidden, int) or not isinstance(heads, int) or heads < 1:
            raise HeadError("the head's config.json lacks hidden_size or num_attention_heads")
        eagle = cfg.get("eagle_config") or {}
        layers = eagle.get("eagle_aux_hidden_state_layer_ids")
        return cls(hidden=hidden, heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
                   head_dim=cfg.get("head_dim") or hidden // heads, intermediate=cfg.get("intermediate_size", 0),
                   rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                   rope_theta=float(cfg.get("rope_theta") or DEFAULT_ROPE_THETA),
                   rope_scaling=cfg.get("rope_scaling") or None, vocab=cfg.get("vocab_size", 0),
                   draft_vocab=cfg.get("draft_vocab_size") or cfg.get("vocab_size", 0),
                   target_hidden=cfg.get("target_hidden_size") or hidden,
                   layers=tuple(int(i) for i in layers) if layers else None,
                   max_positions=int(cfg.get("max_position_embeddings") or 2048))

    def feature_layers(self, target_layers: int) -> tuple[int, int, int]:
        """The target layers whose inputs the head fuses, in fc's order: the config's, else the reference's
        2, L // 2 and L - 3 of a target of L layers."""
        layers = self.layers or (2, target_layers // 2, target_layers - 3)
        if any(not 0 <= i < target_layers for i in layers):
            raise HeadError(f"the head fuses the inputs of target layers {list(layers)}; the target has "
                            f"{target_layers} layers")
        return tuple(layers)

    def check_target(self, target_hidden: int, target_vocab: int, target_layers: int) -> None:
        """A head that does not fit its target is refused here, before any decode, in one line."""
        if target_hidden != self.target_hidden:
            raise HeadError(f"the head's fc takes 3 x {self.target_hidden} target features; the target's hidden "
                            f"size is {target_hidden}")
        if target_vocab != self.vocab:
            raise HeadError(f"the head's vocabulary of {self.vocab} differs from the target's {target_vocab}")
        self.feature_layers(target_layers)


def shapes_of(cfg: HeadConfig) -> dict[str, tuple[int, ...]]:
    """The shape every weight of HEAD_KEYS and OPTIONAL_KEYS must have."""
    h, d = cfg.hidden, cfg.head_dim
    return {"fc.weight": (h, 3 * cfg.target_hidden), "midlayer.hidden_norm.weight": (h,),
            "midlayer.input_layernorm.weight": (h,), "midlayer.post_attention_layernorm.weight": (h,),
            "midlayer.self_attn.q_proj.weight": (cfg.heads * d, 2 * h),
            "midlayer.self_attn.k_proj.weight": (cfg.kv_heads * d, 2 * h),
            "midlayer.self_attn.v_proj.weight": (cfg.kv_heads * d, 2 * h),
            "midlayer.self_attn.o_proj.weight": (h, cfg.heads * d),
            "midlayer.mlp.gate_proj.weight": (cfg.intermediate, h), "midlayer.mlp.up_proj.weight": (cfg.intermediate, h),
            "midlayer.mlp.down_proj.weight": (h, cfg.intermediate), "norm.weight": (h,),
            "lm_head.weight": (cfg.draft_vocab, h), "d2t": (cfg.draft_vocab,), "t2d": (cfg.vocab,),
            "embed_tokens.weight": (cfg.vocab, h)}


def head_dir(spec: str) -> Path:
    """The directory of `eagle3:PATH`: PATH itself, or a model id's snapshot in the local Hugging Face cache
    (and of smollm2:eagle3, the head trained for the embedded default)."""
    path = head_path_spec(spec).removeprefix(PREFIX)
    if os.path.isdir(path):
        return Path(path)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, local_files_only=True))
    except Exception as e:  # huggingface_hub raises several types for a missing or malformed id
        raise HeadError(f"{spec!r}: neither a directory nor a model id in the local Hugging Face cache "
                        f"({type(e).__name__})") from None


def read_head(directory: Path) -> tuple[HeadConfig, dict[str, torch.Tensor]]:
    """config.json and the weights of a head directory, every shape checked -> (config, weights by key)."""
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise HeadError(f"{str(directory)!r} holds no config.json: it is not an EAGLE-3 head")
    try:
        cfg = HeadConfig.from_dict(json.loads(config_file.read_text()))
    except ValueError as e:
        raise HeadError(f"{str(config_file)!r} is not JSON ({e})") from None
    weights = _read_weights(directory)
    weights = {k.removeprefix("model."): v for k, v in weights.items()}  # some trainers save under model.
    missing = [k for k in HEAD_KEYS if k not in weights]
    if missing:
        raise HeadError(f"the head in {str(directory)!r} lacks {', '.join(missing[:3])}"
                        + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    check_shapes(cfg, weights)
    return cfg, weights


def check_shapes(cfg: HeadConfig, weights: dict[str, torch.Tensor]) -> None:
    """Every present weight has the shape the config gives it; d2t maps into the vocabulary."""
    for key, shape in shapes_of(cfg).items():
        if key in weights and tuple(weights[key].shape) != shape:
            raise HeadError(f"the head's {key} has shape {tuple(weights[key].shape)}; its config says {shape}")
    if "d2t" in weights:
        ids = weights["d2t"].long() + torch.arange(cfg.draft_vocab)
        if ids.min() < 0 or ids.max() >= cfg.vocab:
            raise HeadError(f"the head's d2t maps draft ids outside the vocabulary [0, {cfg.vocab})")
    elif cfg.draft_vocab != cfg.vocab:
        raise HeadError(f"the head's draft vocabulary of {cfg.draft_vocab} differs from its vocabulary of "
                        f"{cfg.vocab} and it holds no d2t to map one to the other")


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    safetensors, pickled = directory / "model.safetensors", directory / "pytorch_model.bin"
    if safetensors.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors))
    if pickled.is_file():
        return torch.load(pickled, map_location="cpu", weights_only=True)  # tensors only: no code runs
    raise HeadError(f"{str(directory)!r} holds neither model.safetensors nor pytorch_model.bin")
