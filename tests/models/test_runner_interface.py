"""Every runner answers the one interface (models.runner): the same calls, and no per-row input it does not take."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from models.load import load
from models.options import ModelOptions
from models.passes import prefill
from models.runner import ModelRunner
from pipeline.config import ConfigError

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


def test_a_rehearsal_runs_the_cpus_passes_in_their_cuda_shapes():
    """--rehearse-graphs: the target pads to the CUDA pass sizes over the span ladder, graphs or not; a head with
    graphs keeps a padded pass per captured bucket, which its passes then run through, and without them does not."""
    from models.eagle3 import HEAD_BUCKETS
    from models.hf import CUDA_BUCKETS

    target = load(ModelOptions(model="random:tiny", tune_linears=False, rehearse_graphs=True), "target").runner(256)
    plain = runner_of("random:tiny", 256)
    assert target.buckets == CUDA_BUCKETS and len(target.spans) > 1 and not target.graphs
    assert plain.buckets != CUDA_BUCKETS and plain.spans is None
    head = ModelOptions(model="random:eagle3-tiny", head_target="random:tiny", rehearse_graphs=True)
    assert sorted(load(head, "drafter").runner(64).graphs) == sorted(HEAD_BUCKETS)
    assert not load(replace(head, graphs=False), "drafter").runner(64).graphs
    assert not load(replace(head, rehearse_graphs=False), "drafter").runner(64).graphs


def test_a_rehearsal_of_the_graphs_is_refused_on_a_gpu():
    with pytest.raises(ConfigError, match=r"^`rehearse_graphs` rehearses on the CPU the passes CUDA graphs replay; "
                                          r"on cuda:0 the graphs themselves run$"):
        ModelOptions(model="random:tiny", device="cuda:0", rehearse_graphs=True)
