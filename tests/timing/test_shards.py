"""A sweep split over a job array: two shards started at once into one directory (launch/slurm_sweep.sh as
two array tasks would run it) give, merged, the records of one unsplit run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from timing.record_store import load_records, record_key

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["--target", "mock", "--pool-topk", "4", "--pool-depth", "3", "--pool-expand", "2", "--decoders",
         "draft,root-draw", "--temperatures", "0,1", "--budgets", "8", "--max-new-tokens", "16", "--warmup", "1"]


def outputs(directory) -> dict:
    """Record key -> the output's ids, timed decodes only (warm-ups run on each shard's first prompts)."""
    return {record_key(r): r["token_ids"] for r in load_records([directory]) if not r["warmup"]}


@pytest.mark.slow
def test_two_shards_at_once_merge_into_one_runs_records(tmp_path):
    env = {**os.environ, "SPECPAIR_GPUS": "", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_SUBMIT_DIR": str(ROOT)}
    tasks = [subprocess.Popen([str(ROOT / "launch" / "slurm_sweep.sh"), str(tmp_path / "split"), *SWEEP],
                              env={**env, "SLURM_ARRAY_TASK_ID": str(i)}, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in (1, 2)]
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
    assert "4 of 4 prompts have every decoder" in report.stdout
