"""What a model's KV cache will take, from its config.json alone (no torch, no transformers): the launcher
checks it against the memory free before any process starts, and the target before its model loads, so that
too large a `max_context` is refused in a moment rather than after the load and the kernels' timing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from models import shapes
from models.cache_root import embedded_dir
from models.options import (EMBEDDED, HEAD_PREFIX, HEAD_RANDOM_PREFIX, INT8_SUFFIX, ModelOptions, head_path_spec,
                            is_head_spec)

SLOT_ALIGN = 128  # physical cache slots are a multiple of this (models.hf's runner allocates them so)
MOCK_SLOT_BYTES = 64  # a mock cache slot: a list entry, a 16-byte digest object and an int64 position
_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


def aligned_slots(capacity: int, align: int = SLOT_ALIGN) -> int:
    """Physical cache slots for `capacity` logical ones: the scratch slot plus capacity, rounded up."""
    return -(-(capacity + 1) // align) * align


def cache_bytes(layers: int, kv_heads: int, head_dim: int, itemsize: int, capacity: int) -> int:
    """K and V of every layer at `capacity` slots, as the runner allocates them."""
    return 2 * layers * kv_heads * head_dim * itemsize * aligned_slots(capacity)


def planned_kv_bytes(options: ModelOptions, capacity: int) -> int | None:
    """The bytes of the KV cache the model of `options` will allocate at `capacity` slots; None where its
    config is not on this machine or not a transformers one (a model to download: its load says so)."""
    if options.is_mock:
        return capacity * MOCK_SLOT_BYTES
    cfg = _config(options.model.removesuffix(INT8_SUFFIX))
    try:
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
        layers = int(cfg["num_hidden_layers"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # no config (None), or not one we know
        return None
    dtype = options.dtype if options.dtype != "auto" else "bfloat16" if options.device.startswith("cuda") else "float32"
    return cache_bytes(layers, kv_heads, head_dim, _ITEMSIZE[dtype], capacity)


def feature_row_bytes(options: ModelOptions) -> int:
    """The bytes of one token's target features an EAGLE-3 drafter of `options` is sent at most (three layer
    inputs of its target's hidden size, float32 the widest dtype); 0 for a standalone drafter. For a head
    whose config is not on this machine, the widest row the protocol carries."""
    from protocol.limits import MAX_FEATURE_WIDTH

    spec = options.model
    if not is_head_spec(spec):
        return 0
    if spec == HEAD_PREFIX + "mock":
        return 16 * 4  # a digest's bytes as float32 values (models.mock.FEATURE_WIDTH)
    cfg = _config(spec)
    if cfg is None:
        return MAX_FEATURE_WIDTH * 4
    return 3 * int(cfg.get("target_hidden_size") or cfg.get("hidden_size", MAX_FEATURE_WIDTH // 3)) * 4


def _config(spec: str) -> dict | None:
    """The text config of a model spec as a dict, or None where there is none to read here. An EAGLE-3 head's
    (eagle3:PATH, random:eagle3-SHAPE, smollm2:eagle3) is its own config: one layer."""
    spec = head_path_spec(spec)
    if spec.startswith(HEAD_RANDOM_PREFIX):
        cfg = shapes.HEAD_SHAPES.get(spec[len(HEAD_RANDOM_PREFIX):])
        return None if cfg is None else {**cfg, "num_hidden_layers": 1}
    if spec.startswith(HEAD_PREFIX):
        cfg = _config(spec[len(HEAD_PREFIX):])
        return None if cfg is None else {**cfg, "num_hidden_layers": 1}
    if spec.startswith(shapes.PREFIX):
        _, hidden, _, layers, heads, kv_heads, head_dim, _ = shapes.SHAPES[spec[len(shapes.PREFIX):]]
        return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
                "num_key_value_heads": kv_heads, "head_dim": head_dim}
    path = _config_path(spec)
    try:
        cfg = json.loads(Path(path).read_text(encoding="utf-8")) if path else None
    except (OSError, ValueError):
        return None
    if isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):  # a multimodal model's text part
        cfg = cfg["text_config"]
    return cfg if isinstance(cfg, dict) else None


def _config_path(spec: str) -> str | None:
    if spec == EMBEDDED:
        return str(embedded_dir() / "config.json")  # once converted; before that, the target checks it
    if os.path.isdir(spec):
        return os.path.join(spec, "config.json")
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(spec, "config.json")
    except ValueError:  # not a repository id
        return None
    return found if isinstance(found, str) else None
