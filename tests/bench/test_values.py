"""python -m bench.values --recording: a bad run directory is refused in one line before torch loads, and the
rounds it times repeat the recording's decodes, each copy a prompt of its own."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from bench import values
from evaluation.rounds import RecordedRound
from evaluation.rounds_file import RoundStore, load_rounds, rounds_path
from pipeline.pool import ROOT, Pool

from tests.bench.test_room import PROBE
from tests.processes.proc_tools import ROOT as REPO

PROVENANCE = {"pool": {"topk": 2, "depth": 1, "expand": 1}, "models": {"target": {"model": "t"}}}


def recording(folder, decodes: dict[str, int]) -> str:
    """A rounds file in `folder` holding a decode of `decodes[prompt]` two-candidate rounds per prompt."""
    pool = Pool.from_edges([5, 6], [ROOT, ROOT], [math.log(0.6), math.log(0.3)], [False, False])
    rnd = RecordedRound(budget=2, accepted=1, emitted=np.array([5, 7]), pool=pool, edge=np.array([0.5, 0.2]))
    with RoundStore(rounds_path(folder, 1, 1), PROVENANCE, {"rows": False}) as store:
        for i, (prompt, n) in enumerate(decodes.items()):
            store.append({"prompt_id": prompt, "category": f"c{i}", "turn": 0, "decoder": "draft",
                          "temperature": 0.0, "budget": 2, "seed": 0}, [rnd] * n, prompt_tokens=11)
    return str(folder)


def refusal(argv, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        values.main(argv)
    assert done.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_missing_directory_is_refused_naming_the_flag(tmp_path, capsys):
    line = refusal(["--recording", str(tmp_path / "nope")], capsys)
    assert line == f"python -m bench.values: error: --recording {tmp_path / 'nope'} is not a directory; give a run's " \
                   f"output directory"


def test_a_directory_without_rounds_is_refused(tmp_path, capsys):
    assert "holds no rounds.shard-I-of-N.bin file; was the run made with --record-rounds?" in \
           refusal(["--recording", str(tmp_path)], capsys)


def test_a_rounds_file_without_decodes_or_whole_chunks_is_refused(tmp_path, capsys):
    RoundStore(rounds_path(tmp_path, 1, 1), PROVENANCE).close()
    assert refusal(["--recording", str(tmp_path)], capsys).endswith("holds no timed decode with rounds")
    rounds_path(tmp_path, 1, 1).write_bytes(b"not a rounds file")
    assert "no whole chunk" in refusal(["--recording", str(tmp_path)], capsys)


def test_a_bad_recording_is_refused_before_torch_is_imported(tmp_path):
    for folder in (tmp_path / "nope", tmp_path):
        done = subprocess.run([sys.executable, "-c", PROBE, "values", "--recording", str(folder)], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.stdout.strip().splitlines()[-1] == "HEAVY= CODE=2", done.stderr[-500:]


def test_copies_repeat_the_decodes_under_prompt_ids_of_their_own(tmp_path):
    found = list(load_rounds([recording(tmp_path / "run", {"a": 3, "b": 2})]))
    values.write_copies(str(tmp_path / "out"), found, rounds=12)
    (copied,) = load_rounds([tmp_path / "out"])
    assert copied.provenance == PROVENANCE and copied.recording == {"rows": False} and not copied.damage
    got = [(d.key["prompt_id"], d.key["category"], len(d.rounds), d.prompt_tokens) for d in copied.decodes]
    assert got == [("a", "c0", 3, 11), ("b", "c1", 2, 11), ("copy2/a", "c0", 3, 11), ("copy2/b", "c1", 2, 11),
                   ("copy3/a", "c0", 3, 11)]  # 13 rounds: the first that hold 12
    np.testing.assert_array_equal(copied.decodes[-1].rounds[0].edge, found[0].decodes[0].rounds[0].edge)
