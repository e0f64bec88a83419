"""What the benchmarks share: the spread of a sample and of paired ratios, and command lines from dataclasses
that refuse a bad value in one line naming its flag."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import bench.common
from pipeline.config import check_int
from bench.common import bench_parser, command_line, ints, load_bracket, paired_ratios, spread, summary


def test_paired_ratios_cancel_drift_shared_by_a_repetition():
    drift = np.array([1.0, 3.0, 0.5, 2.0, 1.5])  # a machine slowing down and speeding up between repetitions
    ratio = paired_ratios(list(0.1 * drift), list(0.13 * drift))
    assert abs(ratio["median"] - 1.3) < 1e-12 and abs(ratio["q3"] - ratio["q1"]) < 1e-12


def test_the_load_bracket_is_taken_before_and_after_the_block(monkeypatch):
    readings = iter([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    monkeypatch.setattr(bench.common, "load_average", lambda: next(readings))
    with load_bracket() as load:
        assert load == {"before": [1.0, 2.0, 3.0]}  # the block runs between the two readings
    assert load == {"before": [1.0, 2.0, 3.0], "after": [4.0, 5.0, 6.0]}


def test_spread_is_ordered_quartiles_around_the_median():
    s = spread([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s == {"median": 3.0, "q1": 2.0, "q3": 4.0}


@dataclass(frozen=True, slots=True)
class Sample:
    """Sample options"""

    sizes: tuple[int, ...] = field(default=(8, 59), metadata={"parse": "ints"})
    reps: int = 3
    quick: bool = False

    def __post_init__(self) -> None:
        ints("sizes", self.sizes, 1, 72)
        check_int("reps", self.reps, 1)


def test_a_command_line_is_built_from_the_fields_with_their_defaults():
    parser = bench_parser(Sample, "bench.sample", "python -m bench.sample: a sample.")
    assert parser.prog == "python -m bench.sample" and parser.description == "a sample."
    assert command_line(parser, ["--sizes", "1,2"])[0] == Sample(sizes=(1, 2), reps=3, quick=False)
    assert command_line(parser, ["--quick", "--reps", "5"])[0] == Sample((8, 59), 5, True)


@pytest.mark.parametrize("argv, line", [
    (["--sizes", "0,8"], "--sizes takes comma-separated integers from 1 to 72, got '0,8'"),
    (["--sizes", "8,x"], "--sizes takes comma-separated integers from 1 to 72, got '8,x'"),
    (["--reps", "0"], "--reps must be a positive integer, got 0"),
])
def test_a_bad_value_is_one_line_naming_its_flag(argv, line, capsys):
    with pytest.raises(SystemExit) as stop:
        command_line(bench_parser(Sample, "bench.sample", "python -m bench.sample: a sample."), argv)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and last == "python -m bench.sample: error: " + line


def test_a_benchmarks_line_is_its_docstrings_first_without_the_command():
    assert summary("python -m bench.x: what it times.\n\nMore.") == "what it times."
    assert summary("What it times.") == "What it times."
