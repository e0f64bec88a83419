"""The recording benchmark: its summary pairs each decode with the same decode recorded the other way, its command
line refuses bad values before loading a model, and it runs on the mock pair (and, slow, on random models)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.recording import summarize
from tests.processes.proc_tools import ROOT


def way(seconds, chunk_bytes, round_bytes, tokens=(1, 2, 3)) -> dict:
    return {"seconds": list(seconds), "chunk_bytes": chunk_bytes, "round_bytes": list(round_bytes),
            "tokens": list(tokens)}


def test_ratios_are_taken_pair_by_pair_and_growth_round_by_round():
    pairs = [{"without_rows": way([1.0] * 3, 300, [110] * 3), "with_rows": way([4.0, 1.0, 1.0], 360, [150, 130, 120])},
             {"without_rows": way([4.0] * 3, 300, [110] * 3), "with_rows": way([4.0, 5.0, 6.0], 330, [120] * 3)},
             {"without_rows": way([2.0], 100, [110]), "with_rows": way([3.0], 500, [900], tokens=(9,))}]
    s = summarize(pairs)
    assert s["ratio"] == {"of_means": {"median": 1.5, "min": 1.25, "max": 2.0},
                          "of_medians": {"median": 1.25, "min": 1.0, "max": 1.5}}
    assert s["rounds"] == {"without_rows": 7, "with_rows": 7}
    assert s["round_ms"]["without_rows"]["median"] == pytest.approx(2000.0)
    assert s["first_round_ms"]["with_rows"]["median"] == pytest.approx(4000.0)
    assert s["bytes_per_round"] == {"without_rows": 100.0, "with_rows": 170.0, "growth_mean": 70.0,
                                    "growth_max": 40}  # the third pair's trajectories differ: not paired by round
    assert s["same_trajectories"] == 2 and s["within_bounds"] == {"ratio": True, "growth": True}


@pytest.mark.parametrize("argv, flag", [(["--limit", "0"], "--limit"), (["--budget", "0"], "--budget"),
                                        (["--budget", "711"], "--budget"), (["--decoder", "ar"], "--decoder"),
                                        (["--temperatures", "0,x"], "--temperatures"),
                                        (["--temperatures", "1,1"], "--temperatures"),
                                        (["--max-new-tokens", "0"], "--max-new-tokens"), (["--seed", "-1"], "--seed"),
                                        (["--target", "random:nope"], "--target"),
                                        (["--drafter", "random:nope"], "--drafter"),
                                        (["--prompts", "nope.jsonl"], "--prompts")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    from bench.recording import main

    with pytest.raises(SystemExit) as stop:  # before any model loads
        main(argv)
    assert stop.value.code == 2
    assert f"error: {flag} " in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_run_on_the_mock_pair_records_both_ways_in_alternating_order(capsys):
    from bench.recording import main

    assert main(["--target", "mock", "--drafter", "mock", "--limit", "2", "--temperatures", "0,1",
                 "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out.strip().splitlines()[-1])
    assert doc["pairs"] == 4 and doc["same_trajectories"] == 4 and doc["pool"]["size"] == 710
    assert doc["rounds"]["with_rows"] == doc["rounds"]["without_rows"] > 0
    assert doc["bytes_per_round"]["growth_max"] > 0 and doc["bytes_per_round"]["growth_mean"] > 0
    firsts = [line.split()[-2] for line in out.err.splitlines() if line.endswith(" first")]
    assert firsts == ["without_rows", "with_rows"] * 2


@pytest.mark.slow
def test_a_run_on_random_models_ends_with_one_json_document():
    done = subprocess.run([sys.executable, "-m", "bench.recording", "--target", "random:tiny", "--drafter",
                           "random:tiny", "--limit", "1", "--temperatures", "1", "--max-new-tokens", "8"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout.splitlines()[-1])
    assert doc["pairs"] == 1 and doc["target"] == "random:tiny" and doc["rounds"]["with_rows"] > 0
    assert doc["ratio"]["of_means"]["median"] > 0 and doc["bytes_per_round"]["with_rows"] > 0
