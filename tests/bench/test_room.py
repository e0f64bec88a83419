"""The benchmarks' room: python -m bench lists every benchmark with its question, each module's docstring names
the committed results and the docs line it backs, the room holds at most 10 modules and 2,000 lines, and each
benchmark refuses a bad flag with status 2 before importing torch or transformers (the model stack's start-up,
seconds of it)."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, listing

from tests.processes.proc_tools import ROOT

LIBRARY = {"__init__", "__main__", "common"}  # the room's door and what the benchmarks share
BAD_FLAG = {  # one refused value per benchmark
    "pair": ["--limit", "0"],
    "forward": ["--reps", "0"],
    "protocol": ["--vocab", "9"],
    "reach": ["--decoders", "ar"],
    "values": ["--resamples", "0"],
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


def test_the_room_stays_small():
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in (ROOT / "bench").glob("*.py")}
    assert len(sizes) <= 10 and sum(sizes.values()) <= 2000, sizes


def test_the_room_lists_every_benchmark_with_its_question():
    done = subprocess.run([sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == listing().strip()
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ")}
    assert list(lines) == list(BENCHMARKS) and all(line.rstrip().endswith("?") for line in lines.values())


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_names_its_results_and_the_docs_line_they_back(name):
    doc = " ".join(import_module(f"bench.{name}").__doc__.split())
    results = re.findall(r"results/[\w./-]+\.(?:txt|md)", doc)
    backed = re.findall(r"\b(README\.md|DESIGN\.md|docs/[\w-]+\.md)", doc)
    assert results and backed, f"bench.{name}: its docstring names no results file or no docs page"
    missing = [p for p in results + backed if not (ROOT / p).is_file()]
    assert not missing, f"bench.{name}: its docstring names files that do not exist: {missing}"
    assert all(f"bench.{name}" in (ROOT / p).read_text(encoding="utf-8") for p in backed), \
        f"bench.{name}: a page it says it backs does not name it"


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
