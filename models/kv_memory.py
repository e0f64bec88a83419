"""What a KV cache costs and what its device has free: checked before either process allocates one (the
target for its `max_context`, the drafter for a Hello's capacity)."""

from __future__ import annotations

import torch

from models.free_memory import free_bytes
from models.kv_plan import MOCK_SLOT_BYTES, cache_bytes, planned_kv_bytes
from models.load import Loaded
from models.mock import MockModel

__all__ = ["MOCK_SLOT_BYTES", "device_of", "free_bytes", "gib", "kv_bytes", "planned_kv_bytes"]


def kv_bytes(loaded: Loaded, capacity: int) -> int:
    """Bytes of a KV cache of `capacity` slots for this model (K and V of every layer, rounded-up rows)."""
    if isinstance(loaded.model, MockModel):
        return capacity * MOCK_SLOT_BYTES
    from models.hf import attention_shape

    cfg = loaded.model.config.get_text_config()
    _, kv_heads, head_dim = attention_shape(cfg)
    return cache_bytes(cfg.num_hidden_layers, kv_heads, head_dim, next(loaded.model.parameters()).element_size(),
                       capacity)


def device_of(loaded: Loaded) -> torch.device:
    if isinstance(loaded.model, MockModel):
        return torch.device("cpu")
    return next(loaded.model.parameters()).device


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
