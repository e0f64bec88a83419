"""The overlap benchmark: its usage errors, how it combines slowdowns, and its background process."""

from __future__ import annotations

import pytest

from bench.overlap import Beside, measure, two_cores


@pytest.mark.parametrize("argv, flag", [(["--pairs", "compute:x"], "--pairs"), (["--pairs", "root"], "--pairs"),
                                        (["--pairs", "a:b:c"], "--pairs"), (["--reps", "0"], "--reps"),
                                        (["--context", "1"], "--context")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    from bench.overlap import main

    with pytest.raises(SystemExit) as stop:  # before any process starts or model loads
        main(argv)
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert flag in last and all(other not in last for other in ("--pairs", "--reps", "--context") if other != flag)


def test_two_cores_needs_both_directions_and_counts_a_pair_once():
    slowdowns = {("root", "drafter"): 1.25, ("drafter", "root"): 1.0, ("tree", "drafter"): 1.5,
                 ("memory", "memory"): 1.25}
    assert two_cores(slowdowns) == {"root:drafter": pytest.approx(1.8), "memory:memory": pytest.approx(1.6)}


@pytest.mark.slow
def test_synthetic_workloads_are_timed_alone_and_beside_each_other():
    pairs = [("compute", "memory"), ("memory", "compute")]
    times = measure(pairs, 40, reps=2)
    assert set(times) == set(pairs)
    for t in times.values():
        assert len(t["alone"]) == len(t["beside"]) == 2 and min(t["alone"] + t["beside"]) > 0


def test_a_background_that_fails_to_build_says_why():
    with pytest.raises(RuntimeError, match="KeyError: 'nothing'"):
        Beside(["nothing"], 40)


@pytest.mark.slow
def test_a_background_that_dies_is_named_not_waited_for():
    background = Beside(["compute"], 40)
    background.process.kill()
    with pytest.raises(RuntimeError, match="ended"):
        background.run("compute")
    background.close()
