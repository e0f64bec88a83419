"""Every runner answers the one interface (models.runner): the same calls, and no per-row input it does not take."""

from __future__ import annotations

import numpy as np
import pytest

from models.load import load
from models.options import ModelOptions
from models.passes import prefill
from models.runner import ModelRunner

SPECS = ("mock", "random:tiny")


def runner_of(spec: str, capacity: int = 16) -> ModelRunner:
    return load(ModelOptions(model=spec, tune_linears=False, graphs=False), "target").runner(capacity)


@pytest.mark.parametrize("spec", SPECS)
def test_every_runner_has_the_interface_s_attributes(spec):
    runner = runner_of(spec)
    assert runner.capacity == 16 and runner.vocab_size > 0 and runner.device.type == "cpu"
    assert runner.row_inputs == ()
    row = prefill(runner, [1, 2, 3], 0)
    assert row.shape == (runner.vocab_size,)
    runner.move(np.array([0]), np.array([5]))
    runner.synchronize()


@pytest.mark.parametrize("spec", SPECS)
def test_a_causal_lm_refuses_per_row_inputs(spec):
    runner = runner_of(spec)
    with pytest.raises(ValueError, match=r"`rows` names \['features'\], but \w+ takes \[\] per row"):
        prefill(runner, [1, 2, 3], 0, rows={"features": np.zeros((3, 4), np.float32)})


@pytest.mark.parametrize("spec", SPECS)
def test_empty_row_inputs_are_the_tokens_alone(spec):
    plain, given = runner_of(spec), runner_of(spec)
    assert np.allclose(prefill(plain, [1, 2, 3], 0).numpy(), prefill(given, [1, 2, 3], 0, rows={}).numpy())


@pytest.mark.parametrize("spec", SPECS)
def test_the_loaded_model_says_its_cache_cost_and_vocabulary_through_its_runner_class(spec):
    loaded = load(ModelOptions(model=spec, tune_linears=False, graphs=False), "target")
    assert loaded.kv_bytes(200) == 2 * loaded.kv_bytes(100) > 0
    assert loaded.vocab_size == loaded.runner(8).vocab_size
    assert loaded.identity["dtype"] == "float32" and loaded.identity["device"] == "cpu"
