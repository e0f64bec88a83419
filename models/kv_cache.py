"""A process's one KV cache: made only within the memory its device has free, replaced only by a larger one.

Both processes allocate through here: the target once, at its `max_context`; the drafter at each Hello that
needs more slots than the cache it holds (the old one is freed first). A cache the device cannot hold is a
CapacityError naming `max_context`, before the allocation where the cost is known and from the allocator's
own failure where it is not, instead of a traceback."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import torch

from models import memory
from models.runner import ModelRunner
from pipeline.config import CapacityError

if TYPE_CHECKING:
    from models.load import Loaded


class KVCache:
    """The runner of `loaded` that `owner` ("target" or "drafter", as refusals name it) holds, when any."""

    def __init__(self, loaded: Loaded, owner: str) -> None:
        self.loaded, self.owner = loaded, owner
        self.runner: ModelRunner | None = None

    def at_least(self, capacity: int) -> ModelRunner:
        """A runner of at least `capacity` slots: the one held when it is large enough, else a new one of
        `capacity` slots in its place. CapacityError when the device cannot hold it."""
        if self.runner is not None and self.runner.capacity >= capacity:
            return self.runner
        held = 0 if self.runner is None else self.loaded.kv_bytes(self.runner.capacity)
        device = self.loaded.device
        check_fits(self.loaded.kv_bytes(capacity), memory.free_bytes(device) + held, capacity, device, self.owner)
        self.runner = None
        gc.collect()  # the old cache's tensors go before the new ones are allocated
        if device.type == "cuda":
            torch.cuda.empty_cache()
        try:
            self.runner = self.loaded.runner(capacity)
        except (MemoryError, RuntimeError) as e:
            if not out_of_memory(e):  # graph capture and the like fail with their own message
                raise
            raise CapacityError(f"the {self.owner} cannot allocate a KV cache of {capacity} slots (lower "
                                f"`max_context`): {type(e).__name__}: {e}") from None
        return self.runner


def check_fits(need: int, free: int, capacity: int, device: torch.device, owner: str) -> None:
    """CapacityError when a cache of `capacity` slots needing `need` bytes is beyond the `free` bytes of `device`."""
    if need > free:
        raise CapacityError(f"the {owner} cannot allocate a KV cache of {capacity} slots: it needs "
                            f"{memory.gib(need)} and {device} has {memory.gib(free)} free (lower `max_context`)")


def out_of_memory(error: BaseException) -> bool:
    """Whether an allocation failed for lack of memory: torch raises OutOfMemoryError on CUDA and a plain
    RuntimeError from its CPU allocator."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "memory" in str(error) and "alloc" in str(error).lower())
