"""The handshake benchmark times secure handshakes at a mock drafter process while it starts and at rest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.processes.proc_tools import ROOT, START_S


@pytest.mark.slow
def test_handshakes_are_timed_while_the_drafter_loads_and_at_rest():
    done = subprocess.run([sys.executable, "-m", "bench.handshake", "--model", "mock", "--idle", "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=2 * START_S)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rest = result["handshake_ms"]["at rest"]
    assert result["model"] == "mock" and rest["n"] == 5 and 0 < rest["q1"] <= rest["median"] <= rest["max"]
    assert result["load_seconds"] > 0 and set(result["load_average"]) == {"before", "after"}
