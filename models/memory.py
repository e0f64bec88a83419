"""What memory a device has free for this process, and what a KV cache costs: checked before either process
allocates one (the target for its `max_context`, the drafter for a Hello's capacity) and before the CPU
linear kernels add their weight copies.

A model is handed in as models.load.Loaded, read by its `model` alone (this module imports no loader: the
loader's kernel tuning reads free memory from here).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from models.kv_plan import MOCK_SLOT_BYTES, cache_bytes

if TYPE_CHECKING:
    import torch

__all__ = ["device_of", "free_bytes", "gib", "host_free_bytes", "kv_bytes"]


def free_bytes(device: torch.device) -> int:
    """Memory this process may still take on `device`: free CUDA memory, or the host's available memory."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    return host_free_bytes()


def host_free_bytes() -> int:
    """The host's available memory (MemAvailable), without torch: the launcher reads it too."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def kv_bytes(loaded, capacity: int) -> int:
    """Bytes of a KV cache of `capacity` slots for a loaded model (K and V of every layer, rounded-up rows)."""
    from models.eagle3 import Eagle3Head
    from models.mock import MockHead, MockModel

    if isinstance(loaded.model, (MockModel, MockHead)):
        return capacity * MOCK_SLOT_BYTES
    if isinstance(loaded.model, Eagle3Head):
        cfg = loaded.model.cfg
        return cache_bytes(1, cfg.kv_heads, cfg.head_dim, loaded.model.embed.element_size(), capacity)
    from models.hf import attention_shape

    cfg = loaded.model.config.get_text_config()
    _, kv_heads, head_dim = attention_shape(cfg)
    return cache_bytes(cfg.num_hidden_layers, kv_heads, head_dim, next(loaded.model.parameters()).element_size(),
                       capacity)


def device_of(loaded) -> torch.device:
    """The device a loaded model's weights are on."""
    import torch

    from models.eagle3 import Eagle3Head
    from models.mock import MockHead, MockModel

    if isinstance(loaded.model, (MockModel, MockHead)):
        return torch.device("cpu")
    if isinstance(loaded.model, Eagle3Head):
        return loaded.model.device
    return next(loaded.model.parameters()).device


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
