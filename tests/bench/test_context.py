"""The context benchmark: its statistics (paired ratios cancel drift shared by a repetition), its byte models,
its paths and its command line."""

from __future__ import annotations

import pytest


def test_the_cpu_model_reads_the_used_slots_rounded_up():
    from bench.context import cpu_model

    model = cpu_model([40, 2000])
    assert model[40]["span"] == 64 and model[2000]["span"] == 2048
    assert model[2000]["kv_over_weights"] == 32 * model[40]["kv_over_weights"]


def test_the_gpu_model_reads_the_span_covering_the_context():
    from bench.context import gpu_model

    model = gpu_model()
    whole, short = model["32768 capacity, 1 rows, whole cache"], model["32768 capacity, 1 rows, 512 tokens"]
    assert whole["slots"] == 32896 and short["slots"] == 32896 // 8 + 112  # 1/8 of the cache, aligned up
    assert short["kv_gb"] * whole["slots"] == whole["kv_gb"] * short["slots"]
    assert "8192 capacity, 1 rows, 30000 tokens" not in model  # contexts beyond the capacity are left out


def test_paths_after_the_first_are_compared_with_it_repetition_by_repetition():
    from bench.context import compare_paths

    drift = [1.0, 2.0, 4.0]
    times = {("whole", "root pass", 40): [0.1 * d for d in drift],
             ("ladder", "root pass", 40): [0.05 * d for d in drift]}
    ratio = compare_paths(times, ["whole", "ladder"], [40])["ladder"]["root pass"][40]
    assert abs(ratio["median"] - 0.5) < 1e-12 and abs(ratio["q3"] - ratio["q1"]) < 1e-12


def test_each_path_attends_over_what_it_names():
    from models.hf import SPAN_STEP, graph_spans
    from target_proc.target import Target
    from tests.models.conftest import tiny_llama
    from bench.passes import runner

    model, spans = tiny_llama(), {}
    for path in ("eager", "ladder", "whole"):
        target = Target(runner(model, 1000, path))
        target.prefill(list(range(1, 40)))
        target.root_pass(5)
        spans[path] = target.runner.kv.span
    slots = target.runner.slots
    assert spans == {"eager": SPAN_STEP, "ladder": graph_spans(slots)[0], "whole": slots} and slots == 1024


@pytest.mark.parametrize("argv, flag", [(["--contexts", "x"], "--contexts"), (["--contexts", "40,40"], "--contexts"),
                                        (["--contexts", "1,40"], "--contexts"), (["--trees", "0"], "--trees"),
                                        (["--trees", "8,a"], "--trees"), (["--trees", "73"], "--trees"),
                                        (["--reps", "0"], "--reps"), (["--threads", "0"], "--threads"),
                                        (["--paths", "eager,gpu"], "--paths"), (["--capacity", "-5"], "--capacity")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    from bench.context import main

    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    flags = ("--contexts", "--trees", "--reps", "--threads", "--paths", "--capacity")
    assert flag in last and all(other not in last for other in flags if other != flag), last
