"""The CPU linear kernels' choice, kept per machine: reused without timing, retuned on demand, a bad file named
and ignored, and two writers at once losing nothing."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import torch

from models import cpu_linear
from models.cpu_linear import TunedLinear, tune
from models.kernel_cache import FORMAT, Key, KernelCache
from models.load import load
from models.options import ModelOptions
from tests.models.conftest import tiny_llama
from tests.processes.proc_tools import ROOT


@pytest.fixture
def counted(labelled_calls):
    """Timed calls counted; under its timer `transposed` is twice as fast at one row, the others alike."""
    calls = []

    def timer(fn):
        calls.append(fn.kernel)
        return 0.5 if (fn.kernel, fn.rows) == ("transposed", 1) else 1.0
    return calls, timer


def test_a_second_start_takes_the_kept_choice_without_timing(tmp_path, counted):
    calls, timer = counted
    cache = KernelCache(tmp_path / "k.json")
    first = tune(tiny_llama(), ["stock", "transposed"], timer, cache=cache)
    assert first and calls
    calls.clear()
    model = tiny_llama()
    assert tune(model, ["stock", "transposed"], lambda fn: 1 / 0, cache=cache) == first  # no timer call
    assert any(isinstance(m, TunedLinear) for m in model.modules())
    kept = cache.read()
    assert {k.shape for k in kept} == {f"{o}x{i}" for o, i in ((64, 64), (32, 64), (128, 64), (64, 128), (96, 64))}
    assert all(k.threads == torch.get_num_threads() and k.torch == torch.__version__ for k in kept)


def test_a_choice_of_stock_everywhere_is_kept_too(tmp_path, counted):
    calls, _ = counted
    cache = KernelCache(tmp_path / "k.json")
    assert tune(tiny_llama(), ["stock", "transposed"], lambda fn: 1.0, cache=cache) == {}
    assert cache.read() and all(c == ("stock",) * 3 for c in cache.read().values())
    assert tune(tiny_llama(), ["stock", "transposed"], lambda fn: 1 / 0, cache=cache) == {}


def test_retune_times_again_and_keeps_the_new_choice(tmp_path, counted):
    calls, timer = counted
    cache = KernelCache(tmp_path / "k.json")
    tune(tiny_llama(), ["stock", "transposed"], timer, cache=cache)
    calls.clear()
    assert tune(tiny_llama(), ["stock", "transposed"], lambda fn: 1.0, cache=cache, retune=True) == {}
    assert all(c == ("stock",) * 3 for c in cache.read().values())


def test_another_thread_count_or_kernel_set_is_timed_apart(tmp_path, counted):
    calls, timer = counted
    cache = KernelCache(tmp_path / "k.json")
    tune(tiny_llama(), ["stock", "transposed"], timer, cache=cache)
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    try:
        calls.clear()
        tune(tiny_llama(), ["stock", "transposed"], timer, cache=cache)
        assert calls
    finally:
        torch.set_num_threads(before)
    assert {k.threads for k in cache.read()} == {before, before + 1}


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[1, 2]", b'{"format": 99, "entries": []}',
                                     b'{"format": 1, "entries": [{"key": {"cpu": 1}, "choice": []}]}',
                                     b"[" * 100_000])  # nested past the parser's recursion limit
def test_a_damaged_or_foreign_file_is_named_ignored_and_rewritten(tmp_path, counted, caplog, content):
    calls, timer = counted
    path = tmp_path / "k.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert tune(tiny_llama(), ["stock", "transposed"], timer, cache=KernelCache(path))
    assert calls and str(path) in caplog.text and "timed again" in caplog.text
    assert json.loads(path.read_text())["format"] == FORMAT and KernelCache(path).read()


def test_a_choice_naming_a_kernel_it_was_not_offered_makes_the_file_foreign(tmp_path, caplog):
    key = {"cpu": "c", "threads": 1, "torch": "t", "dtype": "float32", "shape": "2x2", "rows": [1, 8, 64],
           "kernels": ["stock"]}
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"format": FORMAT, "entries": [{"key": key, "choice": ["stock", "stock", "x"]}]}))
    with caplog.at_level(logging.WARNING):
        assert KernelCache(path).read() == {}
    assert "not one this version wrote" in caplog.text


def test_a_cache_that_cannot_be_written_costs_only_later_starts_their_time(tmp_path, counted, caplog):
    _, timer = counted
    (tmp_path / "file").write_text("")  # where the cache's folder should be: nothing can be written under it
    with caplog.at_level(logging.WARNING):
        assert tune(tiny_llama(), ["stock", "transposed"], timer, cache=KernelCache(tmp_path / "file" / "k.json"))
    assert "could not be kept in" in caplog.text


WRITER = """
import sys
from models.kernel_cache import Key, KernelCache
cache, who = KernelCache(sys.argv[1]), sys.argv[2]
for i in range(40):
    cache.add({Key("c", 1, "t", "float32", f"{who}x{i}", (1, 8, 64), ("stock",)): ("stock",) * 3})
"""


def test_two_processes_writing_at_once_keep_every_choice(tmp_path):
    path = tmp_path / "k.json"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who], cwd=ROOT) for who in ("1", "2")]
    assert [p.wait(120) for p in procs] == [0, 0]
    assert {k.shape for k in KernelCache(path).read()} == {f"{w}x{i}" for w in "12" for i in range(40)}
    assert not list(tmp_path.glob(".*partial"))


def test_load_reuses_the_machines_choice_and_retune_times_again(tmp_path, monkeypatch, counted):
    calls, timer = counted
    monkeypatch.setenv("SPECPAIR_KERNEL_CACHE", str(tmp_path / "k.json"))
    monkeypatch.setattr(cpu_linear, "_wall", timer)
    first = load(ModelOptions(model="random:tiny"), "target")
    assert first.identity["linear_kernels"] and calls
    calls.clear()
    again = load(ModelOptions(model="random:tiny"), "target")
    assert again.identity["linear_kernels"] == first.identity["linear_kernels"] and not calls
    load(ModelOptions(model="random:tiny", retune=True), "target")
    assert calls


def test_a_key_with_a_bad_field_is_refused():
    with pytest.raises(ValueError):
        Key("c", 0, "t", "float32", "2x2", (1,), ("stock",))
