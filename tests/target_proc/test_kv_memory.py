"""The target checks its KV cache against its device's free memory before allocating it, as the drafter
checks a Hello's: too large a `max_context` is one line naming the option, not an allocator's traceback."""

from __future__ import annotations

import pytest

from models.load import load
from models.options import ModelOptions
from pipeline.config import CapacityError
from target_proc import session


def test_a_cache_beyond_free_memory_is_a_capacity_error_naming_max_context(monkeypatch):
    loaded = load(ModelOptions(model="mock"), "target")
    session.check_kv_memory(loaded, 4096)  # a mock slot costs 64 bytes
    monkeypatch.setattr("models.memory.free_bytes", lambda device: 1000)
    with pytest.raises(CapacityError, match=r"the target cannot allocate a KV cache of 4096 slots: it needs "
                                            r"0.00 GiB and cpu has 0.00 GiB free \(lower `max_context`\)"):
        session.check_kv_memory(loaded, 4096)
