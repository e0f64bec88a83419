"""Spec-Bench export: one answer file per decoder and setting whose fields round-trip from the records, and
which Spec-Bench's speed formula (mean over questions of tokens over time) reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.config import InputError
from timing import export as export_module
from timing.export import export, question_id
from timing.record_store import load_records


def test_question_ids_are_the_prompt_ids_trailing_numbers():
    assert question_id("spec-bench/81") == 81 and question_id("humaneval/HumanEval/7") == 7
    with pytest.raises(InputError, match="no trailing number"):
        question_id("prompt/x")


def test_answers_round_trip_the_records_fields(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path / "run", decoders="ar,root-draw", temperatures="0,1", budgets="8,auto",
                           warmup=1, num_seeds=2)
    sweep(mock_session(), options)
    paths = export(str(tmp_path / "run"), str(tmp_path / "out"))
    assert sorted(p.name for p in paths) == sorted(  # ar, decoded once for every budget: one file per T
        [f"mock-root-draw-temperature-{t}-budget-{b}.jsonl" for t in (0, 1) for b in (8, "auto")]
        + [f"mock-ar-temperature-{t}.jsonl" for t in (0, 1)])
    records = [r for r in load_records([tmp_path / "run"]) if not r.warmup and r.setting_budget != "auto"]
    for path in [p for p in paths if "budget-auto" not in p.name]:
        answers = [json.loads(line) for line in path.read_text().splitlines()]
        decoder, rest = path.name.removeprefix("mock-").split("-temperature-")
        t = float(rest.split("-")[0].removesuffix(".jsonl"))
        mine = [r for r in records if r.decoder == decoder and r.temperature == t]
        assert [a["question_id"] for a in answers] == sorted(question_id(r.prompt_id) for r in mine
                                                             if r.seed == 0)
        for a in answers:
            assert isinstance(a["question_id"], int) and a["model_id"] == f"mock-{decoder}"
            assert {"answer_id", "category", "choices", "tstamp"} <= a.keys()
            rs = [r for r in mine if question_id(r.prompt_id) == a["question_id"]]
            assert len(a["choices"]) == len({r.seed for r in rs}) == (2 if t > 0 else 1)
            for choice, seed in zip(a["choices"], sorted({r.seed for r in rs})):
                (r,) = [r for r in rs if r.seed == seed]
                assert choice["turns"] == [r.text.strip()] and choice["decoding_steps"] == [r.rounds]
                assert choice["new_tokens"] == [r.new_tokens + r.overshoot]  # the sweep's rule: round
                assert choice["wall_time"] == [r.seconds] and choice["accept_lengths"] == r.accept_lengths


def spec_bench_speed(path) -> tuple[float, float]:
    """Spec-Bench's formula, written from its description: (mean over questions of summed new tokens over
    summed wall time, mean accept length over every round)."""
    answers = [json.loads(line) for line in open(path)]
    speeds = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in answers]
    return float(np.mean(speeds)), float(np.mean([x for a in answers for x in a["choices"][0]["accept_lengths"]]))


def test_the_exported_tau_is_the_reports_tau(tmp_path, mock_session, make_options, sweep):
    from evaluation.summary import analyse

    sweep(mock_session(), make_options(tmp_path / "run", decoders="ar,draft", temperatures="0", budgets="8",
                                       warmup=0))
    paths = {p.name: p for p in export(str(tmp_path / "run"), str(tmp_path / "out"))}
    setting = analyse(load_records([tmp_path / "run"]), 0.0, 8)
    _, tau = spec_bench_speed(paths["mock-draft-temperature-0-budget-8.jsonl"])
    assert tau == pytest.approx(setting.decoders["draft"].rounds.tau)


def test_two_prompts_with_one_question_id_are_refused(make_record):
    with pytest.raises(InputError, match="would both be question 3"):
        export_module.answers([make_record("a/3", "ar"), make_record("b/3", "ar")], "m", "output", "run")


def test_a_failed_export_leaves_no_empty_or_partial_file(tmp_path, mock_session, make_options, sweep, monkeypatch):
    import errno
    import os
    from pathlib import Path

    from pipeline.config import InputError

    sweep(mock_session(), make_options(tmp_path / "run", limit_prompts=1))
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match=f"^the output directory {tmp_path}/file/out cannot be made: a directory on "
                                         f"its way is a file$"):
        export(str(tmp_path / "run"), str(tmp_path / "file" / "out"))

    def full(self, *args, **kwargs):  # the disk fills mid-write: half a line is on disk
        with open(self, "w") as f:
            f.write('{"question_id": ')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        export(str(tmp_path / "run"), str(tmp_path / "out"))
    assert os.listdir(tmp_path / "out") == []
