"""The protocol and values benchmarks refuse bad values with one line naming the flag (status 2), before any
timing; the protocol benchmark runs end to end on a short setting and ends with one JSON document of medians,
and with --handshake times secure handshakes at a mock drafter process while it starts and at rest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench import protocol, values
from pipeline.rules import SPECULATIVE

from tests.processes.proc_tools import ROOT, START_S


@pytest.mark.parametrize("argv, words", [
    (["--vocab", "0"], "--vocab takes comma-separated integers of at least 10, got '0'"),
    (["--vocab", "1000,9"], "--vocab takes comma-separated integers of at least 10, got '1000,9'"),
    (["--temperature", "-1"], "--temperature takes finite numbers >= 0, comma-separated, got '-1'"),
    (["--temperature", "0,nan"], "--temperature takes finite numbers >= 0, comma-separated, got '0,nan'"),
    (["--device", "nope"], "--device must be cpu, cuda or cuda:N, got 'nope'"),
    (["--budget", "0"], "--budget must be a positive integer, got 0"),
    (["--transports", "ipc,ipc"], "--transports must be distinct, got 'ipc,ipc'"),
    (["--transports", "udp"], "--transports takes names from ipc, tcp, tcp+curve, comma-separated, got 'udp'"),
    (["--handshake", "mock", "--idle", "0"], "--idle must be a positive integer, got 0"),
    (["--handshake", "mock", "--every", "0"], "--every must be a number of seconds in (0, 10], got 0.0"),
])
def test_the_protocol_benchmark_refuses_bad_values(argv, words, capsys):
    with pytest.raises(SystemExit) as done:
        protocol.main(argv)
    assert done.value.code == 2 and words in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("flag", ["--rounds", "--prompts", "--resamples"])
def test_the_values_benchmark_refuses_bad_values(flag, capsys):
    with pytest.raises(SystemExit) as done:
        values.main([flag, "0"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"{flag} must be a positive integer, got 0")


@pytest.mark.slow
def test_the_protocol_benchmarks_last_line_is_json_with_the_medians():
    done = subprocess.run([sys.executable, "-m", "bench.protocol", "--iterations", "20", "--warmup", "2", "--rounds",
                           "5", "--vocab", "1000", "--temperature", "0,1", "--seconds", "0.2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=2 * START_S)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["pool_candidates"] == 710 and result["budget"] == 59
    assert 0 < result["round_trip_median_ms"] and 0 < result["one_way_median_ms"] < result["round_trip_median_ms"]
    cases = {f"{rule} V=1000 T={t}" for rule in SPECULATIVE for t in ("0", "1")}  # every rule of the table
    assert set(result["select_verify_median_ms"]) == cases
    assert all(v > 0 for v in result["select_verify_median_ms"].values())


@pytest.mark.slow
def test_handshakes_are_timed_while_the_drafter_loads_and_at_rest():
    done = subprocess.run([sys.executable, "-m", "bench.protocol", "--handshake", "mock", "--idle", "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=2 * START_S)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rest = result["handshake_ms"]["at rest"]
    assert result["model"] == "mock" and rest["n"] == 5 and 0 < rest["q1"] <= rest["median"] <= rest["max"]
    assert result["load_seconds"] > 0 and set(result["load_average"]) == {"before", "after"}
