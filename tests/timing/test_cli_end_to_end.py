"""The sweep as a user runs it: launch/pair.sh sweep on the mock pair, then python -m timing report and
matched; and a launcher killed part-way whose rerun ends with exactly one record per decode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from evaluation.prompts import BUILTIN
from timing.record_store import read_records, record_key, records_path

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--target", "mock", "--mock-vocab", "64", "--pool-topk", "4", "--pool-depth", "3", "--pool-expand", "2"]
TIMEOUT = 120


def pair(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "launch" / "pair.sh"), "sweep", *QUICK, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT, **kw)


def timing(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "timing", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT)


@pytest.mark.slow
def test_mock_sweep_then_report_as_a_user_would(tmp_path):
    out = tmp_path / "sweep"
    done = pair("--prompts", "builtin", "--max-new-tokens", "24", "--out", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["complete"] and doc["records"] == len(BUILTIN) * 16 + 2 * 16
    assert doc["next"][0].startswith(f"launch/pair.sh report {out}") and f"report {out}" in done.stderr
    recs = read_records(records_path(out, 1, 1))
    # prompts x combinations + warm-ups
    assert len(recs) == len({record_key(r) for r in recs}) == len(BUILTIN) * 16 + 2 * 16
    assert Counter(r.warmup for r in recs) == {False: len(BUILTIN) * 16, True: 32}
    config = json.loads((out / "config.json").read_text())
    assert config["models"]["target"]["model"] == config["models"]["drafter"]["model"] == "mock"
    assert config["pool"] == {"topk": 4, "depth": 3, "expand": 2}
    assert set(config["starts"][0]["packages"]) >= {"torch", "transformers", "numpy", "pyzmq", "msgpack"}
    assert config["starts"][0]["git"]["commit"] and config["starts"][0]["identity_checked"]
    assert config["identity"]["drafter"]["revision"] == "mock vocab=64 seed=0 noise=1"

    report = timing("report", str(out))
    assert report.returncode == 0, report.stderr
    text = (out / "report.md").read_text()
    for setting in ("T=0 B=8", "T=0 B=59", "T=1 B=8", "T=1 B=59"):
        every = f"{len(BUILTIN)} of {len(BUILTIN)} prompts have every decoder at this setting."
        assert f"## {setting}\n\n{every}" in text
    assert text.count("| root-draw over pearl |") == 4 and text.count("\n| draft |") == 4  # one row a setting
    for png in ("gains.png", "timeline.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads(report.stdout.strip().splitlines()[-1])
    assert [(s["temperature"], s["budget"], s["prompts"]) for s in summary["settings"]] == [
        (t, b, len(BUILTIN)) for t in (0.0, 1.0) for b in (8, 59)]

    matched = timing("matched", str(out))
    assert matched.returncode == 0, matched.stderr
    plan = json.loads(matched.stdout.strip().splitlines()[-1])
    assert plan["commands"] and all("--budget-overrides root-draw@59=" in c for c in plan["commands"])
    assert set(plan["temperatures"]) | set(plan["unmatched"]) == {"0", "1"}  # each T: a cap or why not

    again = pair("--prompts", "builtin", "--max-new-tokens", "24", "--budgets", "8", "--out", str(out))
    assert again.returncode == 2 and "sweep.budgets: '8,59' here, '8' now" in again.stderr


@pytest.mark.slow
def test_a_killed_sweep_resumes_to_exactly_one_record_per_decode(tmp_path):
    out = tmp_path / "sweep"
    path = records_path(out, 1, 1)
    args = [str(ROOT / "launch" / "pair.sh"), "sweep", *QUICK, "--max-new-tokens", "48", "--out", str(out)]
    total = len(BUILTIN) * 16 + 2 * 16
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (path.exists() and path.read_bytes().count(b"\n") >= 10):
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before it was killed"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both processes at once, mid-decode
        proc.wait()
    killed_at = len(read_records(path))
    assert 10 <= killed_at < total
    with open(path, "ab") as f:
        f.write(b'{"prompt_id":"builtin/0","decoder":"ro')  # a torn line, as a kill during a write leaves
    done = pair("--max-new-tokens", "48", "--out", str(out))
    assert done.returncode == 0, done.stderr
    recs = read_records(path)
    assert len(recs) == len({record_key(r) for r in recs}) == total
    assert json.loads(done.stdout.strip().splitlines()[-1])["complete"]
