"""The committed study of the paper's pool (results/cpu-smollm2-paper-pool) rebuilt from its committed rounds by
the commands results/cpu-smollm2-paper-pool/README.md gives, figure for figure.

What a rebuild may change, and nothing else: the runs line (the folder it was given), the seconds the rerankers'
fits took (the machine's speed), and the last bits of a bootstrap interval's ends in the JSON lines (the order of
a BLAS sum, which the Markdown's printed digits never show). The opening block of headline figures beside the
paper's is left out of the comparison: the committed values.md was written before the report opened with it,
and every figure it repeats is compared where the tables below it give it."""

from __future__ import annotations

import json
import lzma
import math
import re
import shutil
from pathlib import Path

import pytest

from timing.values import main

RESULTS = Path(__file__).resolve().parents[2] / "results" / "cpu-smollm2-paper-pool"
ROUNDS = "rounds.shard-1-of-1.bin"
ARGS = ["--by-category", "--cut-levels"]  # as results/cpu-smollm2-paper-pool/README.md runs it
RUNS_LINE = re.compile(r"^- runs: .*$", re.M)
FIT_SECONDS = re.compile(r"(took base )[0-9.]+ s, rows [0-9.]+ s")
HEADLINE = re.compile(r"^## The headline figures beside the paper's\n.*?(?=^## )", re.M | re.S)  # to the next part
REL = 1e-9  # a JSON figure's last bits


def normalised(markdown: str) -> str:
    """`markdown` without what depends on where and how fast it was made, and without the opening headline
    block (which the committed report predates)."""
    return FIT_SECONDS.sub(r"\1(seconds)", RUNS_LINE.sub("- runs: (runs)", HEADLINE.sub("", markdown)))


def same_figure(a, b) -> bool:
    """Equal JSON values, floats within REL of each other."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL, abs_tol=1e-15)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_figure(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_figure(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_json_figures_are_compared_to_their_last_bits_only():
    assert same_figure({"low": 0.012047105476462172}, {"low": 0.012047105476462388})
    assert not same_figure({"low": 0.0120471}, {"low": 0.0120472})
    assert not same_figure({"rounds": 3167}, {"rounds": 3167.0})
    assert not same_figure({"rule": "root"}, {"rule": "root", "budget": 8})
    assert normalised("- runs: a/b\ntook base 4.6 s, rows 5.6 s") == normalised("- runs: c\ntook base 10.9 s, rows 8.3 s")
    assert normalised("| 0.512 |") != normalised("| 0.513 |")
    opened = ("# T\n\n- runs: a\n\n## The headline figures beside the paper's\n\n| root | +1.0% |\n\n"
              "## Selection rules\n| 0.5 |")
    assert normalised(opened) == normalised("# T\n\n- runs: b\n\n## Selection rules\n| 0.5 |")
    assert normalised(opened) != normalised("# T\n\n- runs: b\n\n## Selection rules\n| 0.6 |")


@pytest.mark.slow
def test_the_paper_pool_study_is_rebuilt_figure_for_figure(tmp_path, capsys):
    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    with lzma.open(RESULTS / f"{ROUNDS}.xz") as packed, open(run / ROUNDS, "wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)

    assert main([str(run), *ARGS, "--out", str(out)]) == 0
    capsys.readouterr()
    committed = (RESULTS / "values.md").read_text(encoding="utf-8")
    rebuilt = (out / "values.md").read_text(encoding="utf-8")
    assert normalised(rebuilt).splitlines() == normalised(committed).splitlines()
    for figure in re.findall(r"!\[[^]]*\]\(([^)]+)\)", committed):
        assert (out / figure).stat().st_size > 0, f"{figure} was not drawn"

    assert main([str(run), *ARGS, "--json"]) == 0
    rebuilt_lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    committed_lines = [json.loads(line) for line in (RESULTS / "values.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rebuilt_lines) == len(committed_lines)
    differing = [(i, a, b) for i, (a, b) in enumerate(zip(rebuilt_lines, committed_lines)) if not same_figure(a, b)]
    assert not differing, f"{len(differing)} JSON line(s) differ, the first: {differing[0]}"
