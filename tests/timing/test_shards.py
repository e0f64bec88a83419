"""A sweep split over a job array: two shards started at once into one directory (launch/slurm_sweep.sh as
two array tasks would run it) give, merged, the records of one unsplit run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from evaluation.prompts import BUILTIN
from timing.record_store import load_records, record_key

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["--target", "mock", "--pool-topk", "4", "--pool-depth", "3", "--pool-expand", "2", "--decoders",
         "draft,root-draw", "--temperatures", "0,1", "--budgets", "8", "--max-new-tokens", "16", "--warmup", "1"]


def outputs(directory) -> dict:
    """Record key -> the output's ids, timed decodes only (warm-ups run on each shard's first prompts)."""
    return {record_key(r): r.token_ids for r in load_records([directory]) if not r.warmup}


@pytest.mark.slow
def test_two_shards_at_once_merge_into_one_runs_records(tmp_path):
    env = {**os.environ, "SPECPAIR_GPUS": "", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0",
           "SLURM_SUBMIT_DIR": str(ROOT)}
    tasks = [subprocess.Popen([str(ROOT / "launch" / "slurm_sweep.sh"), str(tmp_path / "split"), *SWEEP],
                              env={**env, "SLURM_ARRAY_TASK_ID": str(i)}, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]  # --array=0-1
    for task in tasks:
        out, err = task.communicate(timeout=300)
        assert task.returncode == 0, err
        assert json.loads(out.splitlines()[-1])["complete"]
    whole = subprocess.run([str(ROOT / "launch" / "pair.sh"), "sweep", *SWEEP, "--out", str(tmp_path / "whole")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    assert sorted(p.name for p in (tmp_path / "split").glob("records.*.jsonl")) == [
        "records.shard-1-of-2.jsonl", "records.shard-2-of-2.jsonl"]
    assert outputs(tmp_path / "split") == outputs(tmp_path / "whole")
    report = subprocess.run([str(ROOT / "launch" / "pair.sh"), "report", str(tmp_path / "split"), "--no-plots"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert f"{len(BUILTIN)} of {len(BUILTIN)} prompts have every decoder" in report.stdout
    assert "warm-ups left out, run in each of 2 shards)" in report.stdout


FOUR = ["1/4", "2/4", "3/4", "4/4"]


@pytest.mark.parametrize("array, shards", [
    ({"SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_COUNT": "4"}, FOUR),
    ({"SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_COUNT": "4"}, FOUR),
    ({"SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_MAX": "30", "SLURM_ARRAY_TASK_STEP": "10"},
     ["1/3", "2/3", "3/3"]),
], ids=["zero-based", "one-based", "stepped"])
def test_every_array_task_runs_its_own_shard_however_the_array_is_numbered(tmp_path, array, shards):
    """sbatch --array=0-3 (Slurm's usual numbering), 1-4 or 10-30:10: the tasks run shards 1/N to N/N."""
    fake = tmp_path / "project"
    (fake / "launch").mkdir(parents=True)
    (fake / "launch" / "pair.sh").write_text('#!/usr/bin/env bash\necho "$@"\n')
    (fake / "launch" / "pair.sh").chmod(0o755)
    first, step = int(array["SLURM_ARRAY_TASK_MIN"]), int(array.get("SLURM_ARRAY_TASK_STEP", 1))
    got = []
    for k in range(len(shards)):
        env = {**os.environ, **array, "SLURM_ARRAY_TASK_ID": str(first + k * step), "SLURM_SUBMIT_DIR": str(fake),
               "SPECPAIR_GPUS": ""}
        done = subprocess.run([str(ROOT / "launch" / "slurm_sweep.sh"), "out"], env=env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        words = done.stdout.split()
        got.append(words[words.index("--shard") + 1])
    assert got == shards


def test_an_array_task_outside_the_array_is_refused_with_one_line(tmp_path):
    env = {**os.environ, "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "6", "SLURM_ARRAY_TASK_STEP": "2",
           "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_ID": "3", "SLURM_SUBMIT_DIR": str(tmp_path)}
    done = subprocess.run([str(ROOT / "launch" / "slurm_sweep.sh"), "out"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.startswith("slurm_sweep.sh: array task 3 is not one of 4 evenly stepped tasks from 0")
