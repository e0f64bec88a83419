"""What a KV cache costs and what its device has free: checked before either process allocates one (the
target for its `max_context`, the drafter for a Hello's capacity)."""

from __future__ import annotations

import os

import torch

from models.load import Loaded
from models.mock import MockModel

MOCK_SLOT_BYTES = 64  # a mock cache slot: a list entry, a 16-byte digest object and an int64 position


def kv_bytes(loaded: Loaded, capacity: int) -> int:
    """Bytes of a KV cache of `capacity` slots for this model (K and V of every layer, rounded-up rows)."""
    if isinstance(loaded.model, MockModel):
        return capacity * MOCK_SLOT_BYTES
    from models.hf import aligned_slots, attention_shape

    cfg = loaded.model.config.get_text_config()
    _, kv_heads, head_dim = attention_shape(cfg)
    itemsize = next(loaded.model.parameters()).element_size()
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * itemsize * aligned_slots(capacity)


def free_bytes(device: torch.device) -> int:
    """Memory this process may still take on `device`: free CUDA memory, or the host's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_of(loaded: Loaded) -> torch.device:
    if isinstance(loaded.model, MockModel):
        return torch.device("cpu")
    return next(loaded.model.parameters()).device


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
