"""The protocol benchmark runs end to end on a short setting and ends with one JSON document of medians."""

from __future__ import annotations

import json
import subprocess

import pytest

from pipeline.rules import SPECULATIVE

from tests.processes.proc_tools import ROOT, START_S, python_m


@pytest.mark.slow
def test_benchmark_last_line_is_json_with_the_medians():
    done = subprocess.run(python_m("timing.bench_protocol", "--iterations", "20", "--warmup", "2", "--rounds",
                                   "5", "--vocab", "1000", "--temperature", "0", "1", "--seconds", "0.2"),
                          cwd=ROOT, capture_output=True, text=True, timeout=2 * START_S)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["pool_candidates"] == 710 and result["budget"] == 59
    assert 0 < result["round_trip_median_ms"] and 0 < result["one_way_median_ms"] < result["round_trip_median_ms"]
    cases = {f"{rule} V=1000 T={t}" for rule in SPECULATIVE for t in ("0", "1")}  # every rule of the table
    assert set(result["select_verify_median_ms"]) == cases
    assert all(v > 0 for v in result["select_verify_median_ms"].values())
