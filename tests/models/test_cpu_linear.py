"""CPU linear kernels chosen per weight shape and row class: same rows as F.linear, the choice by timings."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from models import cpu_linear
from models.cpu_linear import ROW_CLASSES, TunedLinear, available, stock_kernels, tune
from models.hf import CPU_BUCKETS, HFRunner
from models.load import load
from models.options import ModelOptions
from tests.models.conftest import tiny_llama

KERNELS = available()


def linear(out_f: int, in_f: int, bias: bool) -> nn.Linear:
    torch.manual_seed(out_f + in_f)
    return nn.Linear(in_f, out_f, bias=bias)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("bias", [False, True])
def test_every_kernel_gives_f_linear_rows_at_every_row_count(kernel, bias):
    layer = linear(48, 40, bias)
    tuned = TunedLinear(layer, (kernel,) * len(ROW_CLASSES))
    for rows in (1, 2, 8, 9, 64, 65, 200):
        x = torch.randn(1, rows, 40)
        got = tuned(x)
        assert got.shape == (1, rows, 48)
        torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_a_pass_runs_the_kernel_of_its_row_class_and_beyond_the_classes_the_stock_one(monkeypatch):
    calls = []
    for name in ("stock", "transposed"):
        fn = cpu_linear.KERNELS[name]
        monkeypatch.setitem(cpu_linear.KERNELS, name,
                            lambda x, layer, fn=fn, name=name: calls.append(name) or fn(x, layer))
    tuned = TunedLinear(linear(8, 8, False), ("transposed", "stock", "transposed"))
    for rows, want in ((1, "transposed"), (2, "stock"), (8, "stock"), (9, "transposed"), (64, "transposed")):
        calls.clear()
        tuned(torch.randn(rows, 8))
        assert calls == [want], rows
    calls.clear()
    assert tuned(torch.randn(65, 8)).shape == (65, 8)
    assert calls == []  # F.linear directly


def fake_timer(fastest: dict[int, str], gain: float):
    """A timer under which, at each class's row count, `fastest[rows]` takes 1/gain of the others' time."""
    def timer(fn):
        kernel, rows = fn.kernel, fn.rows
        return 1.0 / gain if fastest.get(rows) == kernel else 1.0
    return timer


def test_tune_keeps_a_kernel_only_where_it_is_clearly_faster(labelled_calls):
    model = tiny_llama()
    before = model(torch.arange(10)[None]).logits
    fastest = {1: "transposed", 8: "transposed", 64: "transposed"}
    chosen = tune(model, ["stock", "transposed"], fake_timer(fastest, gain=2.0))
    layers = [m for m in model.modules() if isinstance(m, TunedLinear)]
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert layers and all(m.choice == ("transposed",) * 3 for m in layers)
    assert cpu_linear.copies_bytes(model) == sum(m.weight.numel() * 4 for m in layers)
    assert set(chosen) == {f"{m.out_features}x{m.in_features}" for m in layers}
    torch.testing.assert_close(model(torch.arange(10)[None]).logits, before, rtol=1e-4, atol=1e-4)

    model = tiny_llama()  # 5% faster is within MIN_GAIN: every layer stays an nn.Linear
    assert tune(model, ["stock", "transposed"], fake_timer(fastest, gain=1.05)) == {}
    assert not any(isinstance(m, TunedLinear) for m in model.modules())


def test_tune_chooses_per_row_class(labelled_calls):
    model = tiny_llama()
    chosen = tune(model, ["stock", "transposed"], fake_timer({1: "transposed", 64: "transposed"}, gain=3.0))
    assert all(c == ["transposed", "stock", "transposed"] for c in chosen.values())


def test_tied_output_layer_keeps_reading_the_embeddings(labelled_calls):
    model = load(ModelOptions(model="random:tiny", tune_linears=False), "target").model
    assert model.lm_head.weight is model.model.embed_tokens.weight
    tune(model, ["stock", "transposed"], fake_timer({1: "transposed"}, gain=2.0))
    assert isinstance(model.lm_head, TunedLinear)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.get_output_embeddings().weight is model.model.embed_tokens.weight


def test_a_deep_copy_is_tuned_alike_and_keeps_the_tie(labelled_calls):
    kernels = [k for k in ("stock", "packed") if k in KERNELS] + ["transposed"]
    model = load(ModelOptions(model="random:tiny", tune_linears=False), "target").model
    tune(model, kernels, fake_timer({1: "transposed", 8: kernels[-2], 64: kernels[-2]}, gain=2.0))
    twin = copy.deepcopy(model)
    assert isinstance(twin.lm_head, TunedLinear) and twin.lm_head.choice == model.lm_head.choice
    assert twin.lm_head.weight is twin.model.embed_tokens.weight
    assert twin.lm_head.weight is not model.lm_head.weight
    ids = torch.arange(1, 12)[None]
    torch.testing.assert_close(twin(input_ids=ids).logits, model(input_ids=ids).logits)


def test_small_shapes_are_left_stock(monkeypatch):
    timed = []
    monkeypatch.setattr(cpu_linear, "_timed_call", lambda name, x, probes: timed.append(name) or (lambda: None))
    model = tiny_llama()  # every shape's weights total well under MIN_BYTES
    assert tune(model, ["stock", "transposed"], lambda fn: 1.0) == {}
    assert not timed and not any(isinstance(m, TunedLinear) for m in model.modules())


def test_a_changed_weight_is_never_read_from_a_stale_copy():
    layer = linear(48, 40, True)
    tuned = TunedLinear(layer, ("transposed",) * len(ROW_CLASSES))
    x = torch.randn(3, 40)
    tuned.load_state_dict({"weight": torch.zeros(48, 40), "bias": torch.ones(48)})  # in place
    torch.testing.assert_close(tuned(x), torch.ones(3, 48))
    tuned.to(torch.bfloat16)  # cast: another tensor
    torch.testing.assert_close(tuned(x.bfloat16()), torch.ones(3, 48, dtype=torch.bfloat16))


def test_tuning_changes_no_parameter_or_state_dict_key(labelled_calls):
    model = tiny_llama()
    keys, params = list(model.state_dict()), [id(p) for p in model.parameters()]
    tune(model, ["stock", "transposed"], fake_timer({1: "transposed"}, gain=2.0))
    assert list(model.state_dict()) == keys and [id(p) for p in model.parameters()] == params


def test_the_choice_names_layers_with_a_bias_apart(labelled_calls):
    model = nn.Sequential(linear(16, 16, True), linear(16, 16, False))
    chosen = tune(model, ["stock", "transposed"], fake_timer({1: "transposed"}, gain=2.0))
    assert set(chosen) == {"16x16", "16x16 with bias"}


def test_a_shape_whose_copies_would_crowd_memory_is_left_stock(labelled_calls, monkeypatch):
    monkeypatch.setattr(cpu_linear, "_available_bytes", lambda: 1000)
    model, timed = tiny_llama(), []
    timer = fake_timer({1: "transposed"}, gain=2.0)
    assert tune(model, ["stock", "transposed"], lambda fn: timed.append(fn) or timer(fn)) == {}
    assert not timed and not any(isinstance(m, TunedLinear) for m in model.modules())


def test_stock_kernels_runs_f_linear_and_restores_the_choice(monkeypatch):
    calls = []
    fn = cpu_linear.KERNELS["transposed"]
    monkeypatch.setitem(cpu_linear.KERNELS, "transposed", lambda x, layer: calls.append(1) or fn(x, layer))
    tuned = TunedLinear(linear(8, 8, True), ("transposed",) * 3)
    model = nn.Sequential(tuned)
    with stock_kernels(model):
        model(torch.randn(1, 8))
    assert calls == []
    model(torch.randn(1, 8))
    assert calls == [1]


def test_packed_is_offered_only_where_it_runs(monkeypatch):
    def broken(w):
        raise RuntimeError("no oneDNN here")
    monkeypatch.setattr(cpu_linear, "_pack", broken)
    assert available() == ["stock", "transposed"]


def test_load_records_the_choice_and_the_runner_gives_the_stock_rows(labelled_calls, monkeypatch):
    monkeypatch.setattr(cpu_linear, "_wall", fake_timer({1: "transposed", 64: "transposed"}, gain=2.0))
    tuned = load(ModelOptions(model="random:tiny"), "target")
    stock = load(ModelOptions(model="random:tiny", tune_linears=False), "target")
    assert tuned.identity["linear_kernels"] and "linear_kernels" not in stock.identity
    rows = []
    for loaded in (tuned, stock):
        runner = HFRunner(loaded.model, 64, graphs=False, buckets=CPU_BUCKETS)
        ids = np.arange(1, 12)
        slots = np.arange(len(ids))
        rows.append(runner.forward(ids, slots, slots, 0, slots, np.tril(np.ones((len(ids),) * 2, bool))).clone())
    torch.testing.assert_close(rows[0], rows[1], rtol=1e-4, atol=1e-4)
