"""The target checks its KV cache against its device's free memory before allocating it, as the drafter
checks a Hello's: too large a `max_context` is one line naming the option, not an allocator's traceback."""

from __future__ import annotations

import pytest

from models.kv_cache import KVCache
from models.load import load
from models.options import ModelOptions
from pipeline.config import CapacityError, PoolConfig
from target_proc import session


def test_a_cache_beyond_free_memory_is_a_capacity_error_naming_max_context(monkeypatch):
    loaded = load(ModelOptions(model="mock"), "target")
    assert KVCache(loaded, "target").at_least(4096).capacity == 4096  # a mock slot costs 64 bytes
    monkeypatch.setattr("models.memory.free_bytes", lambda device: 1000)
    with pytest.raises(CapacityError, match=r"the target cannot allocate a KV cache of 4096 slots: it needs "
                                            r"0.00 GiB and cpu has 0.00 GiB free \(lower `max_context`\)"):
        KVCache(loaded, "target").at_least(4096)


def test_an_allocator_s_out_of_memory_is_a_capacity_error_naming_max_context(monkeypatch):
    loaded = load(ModelOptions(model="mock"), "target")

    def refuse(self, capacity):
        raise RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 1 bytes")

    monkeypatch.setattr(type(loaded), "runner", refuse)
    with pytest.raises(CapacityError, match=r"^the target cannot allocate a KV cache of 64 slots \(lower "
                                            r"`max_context`\): RuntimeError: DefaultCPUAllocator"):
        KVCache(loaded, "target").at_least(64)


def test_too_large_a_cache_is_refused_before_the_model_loads_or_anything_connects(monkeypatch, endpoint):
    monkeypatch.setattr("models.memory.free_bytes", lambda device: 1000)
    monkeypatch.setattr(session, "load", lambda *a: pytest.fail("the model loaded before the refusal"))
    monkeypatch.setattr(session.Channel, "connect", lambda *a, **k: pytest.fail("connected before the refusal"))
    options = ModelOptions(model="random:tiny", max_context=4096)
    with pytest.raises(CapacityError, match=r"cannot allocate a KV cache of 4096 slots: it needs 0.00 GiB"):
        with session.open_session(options, endpoint, PoolConfig(), 1.0, 1.0):
            pass


def test_the_planned_cache_is_what_the_loaded_model_takes():
    from models.kv_plan import planned_kv_bytes

    for spec in ("mock", "random:tiny"):
        options = ModelOptions(model=spec, tune_linears=False)
        assert planned_kv_bytes(options, 300) == load(options, "target").kv_bytes(300)
    assert planned_kv_bytes(ModelOptions(model="no-such/model-here"), 300) is None  # a model to download
