"""What memory a device has free for this process: checked before either process allocates a KV cache (the
target for its `max_context`, the drafter for a Hello's capacity; models.load.Loaded.kv_bytes says what one
costs) and before the CPU linear kernels add their weight copies."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["free_bytes", "gib", "host_free_bytes"]


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


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
