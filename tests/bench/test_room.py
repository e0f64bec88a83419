"""The benchmarks' room: python -m bench lists every benchmark with one line, and each refuses a bad flag with
status 2 before importing torch or transformers (the model stack's start-up, seconds of it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, listing

from tests.processes.proc_tools import ROOT

LIBRARY = {"__init__", "__main__", "common", "passes", "pass_bytes"}  # what the benchmarks share
BAD_FLAG = {  # one refused value per benchmark
    "pair": ["--limit", "0"],
    "ahead": ["--prompts", "builtin", "--budgets", "0"],
    "overlap": ["--pairs", "root:nothing"],
    "prefill": ["--prompts", "builtin", "--windows", "-1"],
    "context": ["--trees", "73"],
    "linears": ["--context", "1"],
    "protocol": ["--vocab", "9"],
    "values": ["--resamples", "0"],
    "handshake": ["--every", "0"],
    "recording": ["--budget", "0"],
    "eagle3": ["--rounds", "0"],
    "spin": ["--repeats", "0"],
    "forward": ["--reps", "0"],
    "reach": ["--decoders", "ar"],
}
PROBE = """
import sys
from importlib import import_module
try:
    code = import_module("bench." + sys.argv[1]).main(sys.argv[2:])
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print("HEAVY=" + ",".join(heavy) + f" CODE={code}")
"""


def test_every_module_of_the_room_is_a_listed_benchmark_or_what_they_share():
    modules = {path.stem for path in (ROOT / "bench").glob("*.py")}
    assert modules == set(BENCHMARKS) | LIBRARY and set(BAD_FLAG) == set(BENCHMARKS)


def test_the_room_lists_every_benchmark_with_one_line():
    done = subprocess.run([sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == listing().strip()
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert list(lines) == list(BENCHMARKS) and all(len(line.split()) > 4 for line in lines.values())


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_bad_flag_is_refused_before_torch_or_transformers_is_imported(name):
    done = subprocess.run([sys.executable, "-c", PROBE, name, *BAD_FLAG[name]], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "HEAVY= CODE=2", done.stdout[-500:] + done.stderr[-500:]
    refusal = done.stderr.strip().splitlines()[-1]
    assert refusal.startswith(f"python -m bench.{name}: error: {BAD_FLAG[name][-2]} "), refusal


def test_the_timing_programs_point_to_the_room():
    done = subprocess.run([sys.executable, "-m", "timing", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "python -m bench lists them" in done.stdout
    assert not any(Path(ROOT / "timing").glob("bench_*.py"))
