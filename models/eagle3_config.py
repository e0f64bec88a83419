"""An EAGLE-3 head's checkpoint as the reference implementation lays it out: its config, its weights, and
whether it fits a target.

A head directory holds `config.json` (a Llama config of one layer plus `draft_vocab_size`, and
`target_hidden_size` where the target's hidden size differs from the head's) and `model.safetensors` or
`pytorch_model.bin` with the keys of HEAD_KEYS. The head's token embedding is its own `embed_tokens.weight`
where the checkpoint holds one, else the target's. Other trainers' layouts (SpecForge's, vLLM speculators',
transformers 5's rope_parameters) are read as their trainers mean them (docs/eagle3.md has the table). Every
field, file and weight is checked as it is read, and a refusal names the file and the field in one line.
Nothing here builds a module (models.eagle3 does)."""

from __future__ import annotations

import json
import math
import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.config import ConfigError, is_int

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
        self.problem = message


ROPE_KEYS = {"linear": ("factor",),  # what each rope scaling type needs besides its type
             "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
# Fields that change a head's arithmetic from the reference's, with the value under which it is the reference's
REFUSED = {"norm_before_fc": False, "attention_bias": False, "mlp_bias": False, "use_aux_hidden_state": True,
           "use_qk_norm": False, "qk_norm": False, "num_hidden_layers": 1, "hidden_act": "silu",
           "partial_rotary_factor": 1.0}


@dataclass(frozen=True, slots=True)
class HeadConfig:
    """What a head's config.json says of its shapes and arithmetic (the trainers' names in comments)."""

    hidden: int  # hidden_size
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim, else hidden / heads
    intermediate: int  # intermediate_size
    rms_eps: float  # rms_norm_eps
    rope_theta: float  # rope_theta (rope_parameters.rope_theta in transformers 5's configs)
    rope_scaling: dict | None  # rope_scaling or rope_parameters: {"rope_type": "linear" | "llama3", ...}
    vocab: int  # vocab_size: the target's vocabulary, which the embedding covers
    draft_vocab: int  # draft_vocab_size (vocab_size where absent): the rows lm_head scores
    target_hidden: int  # target_hidden_size, else hidden_size: fc takes 3 x this
    layers: tuple[int, ...] | None  # the target layers whose INPUTS the head fuses (read by read_layer_ids)
    max_positions: int  # max_position_embeddings (the rope's original context for llama3 scaling)
    norm_before_residual: bool = False  # vLLM speculators: the attention's residual is the normed hidden

    def __post_init__(self) -> None:
        for name in ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "draft_vocab",
                     "target_hidden"):
            if not is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise HeadError(f"the head's {name} is {getattr(self, name)!r}, not a positive integer")
        if self.heads % self.kv_heads:
            raise HeadError(f"the head's {self.heads} attention heads are not a multiple of its {self.kv_heads} "
                            f"KV heads")
        if self.draft_vocab > self.vocab:
            raise HeadError(f"the head's draft vocabulary of {self.draft_vocab} exceeds its vocabulary of {self.vocab}")
        if self.head_dim % 2:
            raise HeadError(f"the head's head_dim of {self.head_dim} is odd: rope rotates halves")

    @classmethod
    def from_dict(cls, cfg) -> HeadConfig:
        """A config.json as its trainer wrote it: the reference's (SafeAILab), SpecForge's, vLLM speculators'
        (`transformer_layer_config` beside the head's own fields) or transformers 5's (`rope_parameters`).
        HeadError names the field that is missing, mistyped or out of range, or that changes the arithmetic."""
        if not isinstance(cfg, dict):
            raise HeadError(f"the config holds a {type(cfg).__name__}, not an object of fields")
        cfg, speculators = _flatten(cfg)
        for name, reference in REFUSED.items():
            if name in cfg and cfg[name] != reference:
                raise HeadError(f"the config field `{name}` is {cfg[name]!r}: this runtime runs the reference's "
                                f"arithmetic ({name} = {reference!r}) only")
        hidden, heads = _int(cfg, "hidden_size"), _int(cfg, "num_attention_heads")
        vocab = _int(cfg, "vocab_size")
        theta, scaling = _rope(cfg)
        return cls(hidden=hidden, heads=heads, kv_heads=_int(cfg, "num_key_value_heads", heads),
                   head_dim=_int(cfg, "head_dim", hidden // heads), intermediate=_int(cfg, "intermediate_size"),
                   rms_eps=_positive(cfg, "rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
                   vocab=vocab, draft_vocab=_int(cfg, "draft_vocab_size", vocab),
                   target_hidden=_int(cfg, "target_hidden_size", hidden), layers=read_layer_ids(cfg, speculators),
                   max_positions=_int(cfg, "max_position_embeddings", 2048),
                   norm_before_residual=_bool(cfg, "norm_before_residual", speculators))

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


def _flatten(cfg: dict) -> tuple[dict, bool]:
    """A speculators config (`speculators_model_type`) -> its layer's fields with the head's own over them, as
    vLLM reads it; any other config as it is. -> (fields, whether it is a speculators config)."""
    kind = cfg.get("speculators_model_type")
    if kind is None:
        return cfg, False
    if kind != "eagle3":
        raise HeadError(f"the config is a speculators config of type {kind!r}: this runtime reads eagle3 heads")
    layer = cfg.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise HeadError(f"the config field `transformer_layer_config` is {layer!r}, not an object")
    own = ("draft_vocab_size", "target_hidden_size", "norm_before_residual", "norm_before_fc",
           "eagle_aux_hidden_state_layer_ids")
    return {**layer, **{k: cfg[k] for k in own if k in cfg}}, True


def read_layer_ids(cfg: dict, speculators: bool = False) -> tuple[int, int, int] | None:
    """`eagle_aux_hidden_state_layer_ids` (in `eagle_config`, or at the top) as inputs of target layers. vLLM,
    the reference and speculators name the layer whose INPUT is fused; SpecForge names the layer whose OUTPUT
    is, and its ids begin at 1 (its default is 1, L // 2 - 1, L - 4): ids that begin at 1 and rise are read
    as outputs, one layer later, as SGLang reads them (a speculators config's ids are always inputs)."""
    eagle = cfg.get("eagle_config", {})
    if not isinstance(eagle, dict):
        raise HeadError(f"the config field `eagle_config` is {eagle!r}, not an object")
    ids = eagle.get("eagle_aux_hidden_state_layer_ids", cfg.get("eagle_aux_hidden_state_layer_ids"))
    if ids is None:
        return None
    if not isinstance(ids, list) or len(ids) != 3 or not all(is_int(i) and i >= 0 for i in ids):
        raise HeadError(f"the config field `eagle_aux_hidden_state_layer_ids` is {ids!r}, not a list of 3 "
                        f"target layer numbers (fc takes 3)")
    if not speculators and ids[0] == 1 and ids[0] < ids[1] < ids[2]:
        return tuple(i + 1 for i in ids)
    return tuple(ids)


def _rope(cfg: dict) -> tuple[float, dict | None]:
    """(theta, scaling) from `rope_theta` and `rope_scaling`, or transformers 5's `rope_parameters` holding
    both; a scaling is {"rope_type": "linear" | "llama3", and the numbers ROPE_KEYS names}."""
    params = cfg.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise HeadError(f"the config field `rope_parameters` is {params!r}, not an object")
    scaling = params or cfg.get("rope_scaling")
    theta = _positive({"rope_theta": (params or {}).get("rope_theta", cfg.get("rope_theta"))}, "rope_theta",
                      DEFAULT_ROPE_THETA)
    if scaling is None:
        return theta, None
    field = "rope_parameters" if params else "rope_scaling"
    if not isinstance(scaling, dict):
        raise HeadError(f"the config field `{field}` is {scaling!r}, not an object")
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return theta, None
    if kind not in ROPE_KEYS:
        raise HeadError(f"the config field `{field}` has rope type {kind!r}; this runtime reads default, linear "
                        f"and llama3")
    out = {"rope_type": kind}
    for key in ROPE_KEYS[kind]:
        read = _int if key == "original_max_position_embeddings" else _positive
        out[key] = read(scaling, key, None, f"{field}.{key}")
    return theta, out


def _int(cfg: dict, name: str, default: int | None = None, label: str = "") -> int:
    value = cfg.get(name)
    if value is None and default is not None:
        return default
    if not is_int(value) or value < 1:
        raise HeadError(f"the config field `{label or name}` is {value!r}, not a positive integer")
    return value


def _positive(cfg: dict, name: str, default: float | None, label: str = "") -> float:
    value = cfg.get(name)
    if value is None and default is not None:
        return default
    if not (is_int(value) or isinstance(value, float)) or not math.isfinite(value) or value <= 0:
        raise HeadError(f"the config field `{label or name}` is {value!r}, not a positive number")
    return float(value)


def _bool(cfg: dict, name: str, default: bool) -> bool:
    value = cfg.get(name, default)
    if not isinstance(value, bool):
        raise HeadError(f"the config field `{name}` is {value!r}, not true or false")
    return value


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
    return local_dir(head_path_spec(spec).removeprefix(PREFIX),
                     f"{spec!r}: neither a directory nor a model id in the local Hugging Face cache")


def local_dir(path: str, problem: str, allow_download: bool = False, patterns: list[str] | None = None) -> Path:
    """`path` itself where it is a directory, else a model id's snapshot in the local Hugging Face cache (fetched
    where `allow_download`, of the files `patterns` match); HeadError saying `problem` where it is neither."""
    if os.path.isdir(path):
        return Path(path)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path, local_files_only=not allow_download, allow_patterns=patterns))
    except Exception as e:  # huggingface_hub raises several types for a missing or malformed id
        raise HeadError(f"{problem} ({type(e).__name__})") from None


CONFIG_LIMIT = 1 << 20  # bytes: a head's config.json is a few hundred
IGNORED_SUFFIX = "rotary_emb.inv_freq"  # a buffer some trainers save; the rope is computed from the config
LAYER_ALIASES = ("layers.0.", "midlayer.")  # vLLM speculators name the one layer layers.0


def read_head(directory: Path) -> tuple[HeadConfig, dict[str, torch.Tensor]]:
    """config.json and the weights of a head directory, every field, shape and value checked -> (config,
    weights by key). HeadError names the file and the field in one line."""
    config_file = directory / "config.json"
    if not _regular(config_file):
        raise HeadError(f"{str(directory)!r} holds no config.json: it is not an EAGLE-3 head")
    if config_file.stat().st_size > CONFIG_LIMIT:
        raise HeadError(f"{str(config_file)!r} is {config_file.stat().st_size} bytes, too large for a config")
    try:
        raw = json.loads(config_file.read_bytes())
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, or nested past the parser's depth
        raise HeadError(f"{str(config_file)!r} is not JSON ({' '.join(str(e).split())[:200]})") from None
    try:
        cfg = HeadConfig.from_dict(raw)
    except HeadError as e:
        raise HeadError(f"{str(config_file)!r}: {e.problem}") from None
    path, weights = _read_weights(directory, cfg)
    try:
        check_weights(cfg, weights)
    except HeadError as e:
        raise HeadError(f"{str(path)!r}: {e.problem}") from None
    return cfg, weights


def check_layout(cfg: HeadConfig, layout: dict[str, tuple[int, ...]]) -> None:
    """Weight names -> shapes: every weight of HEAD_KEYS present, none unknown, each of its config's shape."""
    missing = [k for k in HEAD_KEYS if k not in layout]
    if missing:
        raise HeadError(f"the head lacks {', '.join(missing[:3])}"
                        + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    unknown = sorted(k for k in layout if k not in HEAD_KEYS + OPTIONAL_KEYS)
    if unknown:
        raise HeadError(f"the head holds {unknown[0]}, a weight this runtime does not read (it would change the "
                        f"reference's arithmetic)")
    shapes = shapes_of(cfg)
    for key, shape in layout.items():
        if tuple(shape) != shapes[key]:
            raise HeadError(f"the head's {key} has shape {tuple(shape)}; its config says {shapes[key]}")


def check_weights(cfg: HeadConfig, weights: dict[str, torch.Tensor]) -> None:
    """check_layout, and every weight floating and finite; d2t and t2d a map of distinct draft ids into the
    vocabulary and its image."""
    check_layout(cfg, {k: tuple(w.shape) for k, w in weights.items()})
    for key, w in weights.items():
        if key in ("d2t", "t2d"):
            continue
        if not w.is_floating_point():
            raise HeadError(f"the head's {key} is {str(w.dtype).removeprefix('torch.')}, not floating point")
        if not bool(torch.isfinite(w).all()):
            raise HeadError(f"the head's {key} holds values that are not finite (NaN or infinite)")
    check_vocab_map(cfg, weights)


def check_vocab_map(cfg: HeadConfig, weights: dict[str, torch.Tensor]) -> None:
    """d2t: integer offsets whose draft id + offset are distinct target ids (a pool's siblings must differ);
    t2d: true exactly at those ids."""
    d2t = weights.get("d2t")
    if d2t is None:
        if cfg.draft_vocab != cfg.vocab:
            raise HeadError(f"the head's draft vocabulary of {cfg.draft_vocab} differs from its vocabulary of "
                            f"{cfg.vocab} and it holds no d2t to map one to the other")
        ids = torch.arange(cfg.vocab)
    else:
        if d2t.is_floating_point() or d2t.is_complex() or d2t.dtype == torch.bool:
            raise HeadError(f"the head's d2t is {str(d2t.dtype).removeprefix('torch.')}, not integer offsets")
        ids = d2t.long() + torch.arange(cfg.draft_vocab)
        if ids.min() < 0 or ids.max() >= cfg.vocab:
            raise HeadError(f"the head's d2t maps draft ids outside the vocabulary [0, {cfg.vocab})")
        if len(torch.unique(ids)) != len(ids):
            raise HeadError("the head's d2t maps two draft ids to one target id")
    t2d = weights.get("t2d")
    if t2d is not None:
        image = torch.zeros(cfg.vocab, dtype=torch.bool)
        image[ids] = True
        if t2d.dtype != torch.bool and not (t2d.dtype.is_floating_point or t2d.is_complex()) and \
                bool(((t2d == 0) | (t2d == 1)).all()):
            t2d = t2d.bool()
        if t2d.dtype != torch.bool or not torch.equal(t2d, image):
            raise HeadError("the head's t2d does not mark exactly the target ids d2t maps to")


def _regular(path: Path) -> bool:
    """Whether `path` is a regular file (a link to one counts); HeadError for anything else by that name (a
    FIFO would block the read)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as e:
        raise HeadError(f"{str(path)!r} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        raise HeadError(f"{str(path)!r} is not a regular file")
    return True


def _read_weights(directory: Path, cfg: HeadConfig) -> tuple[Path, dict[str, torch.Tensor]]:
    """-> (the file read, its tensors under HEAD_KEYS' names). A safetensors file's layout is checked from its
    header before any tensor is read."""
    safetensors, pickled = directory / "model.safetensors", directory / "pytorch_model.bin"
    if _regular(safetensors):
        from safetensors import safe_open

        try:
            with safe_open(str(safetensors), framework="pt") as f:
                names = {name: key for key in f.keys() if (name := _name(key))}
                check_layout(cfg, {name: tuple(f.get_slice(key).get_shape()) for name, key in names.items()})
                return safetensors, {name: f.get_tensor(key) for name, key in names.items()}
        except HeadError as e:
            raise HeadError(f"{str(safetensors)!r}: {e.problem}") from None
        except Exception as e:  # safetensors raises its own SafetensorError, and OSError, for damaged files
            raise HeadError(f"{str(safetensors)!r} is not a valid safetensors file "
                            f"({' '.join(str(e).split())[:200]})") from None
    if _regular(pickled):
        try:  # tensors only: no code in the pickle runs
            with warnings.catch_warnings():  # torch warns of pickle protocols beside its refusal
                warnings.simplefilter("ignore")
                weights = torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as e:  # EOFError, UnpicklingError, RuntimeError: torch names no one type
            raise HeadError(f"{str(pickled)!r} is not a valid checkpoint (a torch state dict of tensors): "
                            f"{type(e).__name__}") from None
        if not isinstance(weights, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                    for k, v in weights.items()):
            raise HeadError(f"{str(pickled)!r} is not a valid checkpoint (a torch state dict of tensors)")
        return pickled, {name: w for key, w in weights.items() if (name := _name(key))}
    raise HeadError(f"{str(directory)!r} holds neither model.safetensors nor pytorch_model.bin")


def _name(key: str) -> str | None:
    """A trainer's weight name -> the reference's: without a `model.` prefix, `layers.0.` as `midlayer.`; None
    for the rope's saved inverse frequencies (computed from the config)."""
    key = key.removeprefix("model.")
    if key.startswith(LAYER_ALIASES[0]):
        key = LAYER_ALIASES[1] + key[len(LAYER_ALIASES[0]):]
    return None if key.endswith(IGNORED_SUFFIX) else key
