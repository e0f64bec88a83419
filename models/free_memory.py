"""What memory a device has free for this process: checked before large allocations."""

from __future__ import annotations

import os

import torch


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
