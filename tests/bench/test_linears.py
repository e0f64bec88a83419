"""The linear-kernel benchmark: its usage errors, and one short run on the embedded target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.linears", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("argv, flag", [(["--trees", "8,x"], "--trees"), (["--trees", "0"], "--trees"),
                                        (["--reps", "0"], "--reps"), (["--context", "1"], "--context"),
                                        (["--kernels", "stock,fast"], "--kernels")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    from bench.linears import main

    with pytest.raises(SystemExit) as stop:  # before any model loads
        main(argv)
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert flag in last and all(other not in last for other in ("--trees", "--reps", "--context", "--kernels")
                                   if other != flag)


@pytest.mark.slow
def test_a_short_run_times_every_pass_both_ways():
    done = bench("--reps", "1", "--trees", "2", "--context", "8", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["passes"]) == {"root pass", "tree pass B=2"}
    for timing in result["passes"].values():
        assert timing["ms"]["stock"]["median"] > 0 and timing["ms"]["tuned"]["median"] > 0
        assert timing["speedup"]["median"] > 0
    assert result["tune_seconds"] > 0
    layers = {"576x576": 60, "192x576": 60, "1536x576": 60, "576x1536": 30, "49152x576": 1}  # SmolLM2-135M's
    copies = 0
    for shape, kernels in result["choice"].items():
        assert len(kernels) == 3 and set(kernels) <= {"stock", "transposed", "packed"} and set(kernels) != {"stock"}
        out_f, in_f = map(int, shape.split("x"))
        copies += layers[shape] * out_f * in_f * 4 * len(set(kernels) - {"stock"})
    assert result["copies_bytes"] == copies
