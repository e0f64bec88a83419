"""Spec-Bench export: one answer file per decoder and setting whose fields round-trip from the records, and
which Spec-Bench's speed formula (mean over questions of tokens over time) reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
                assert choice["new_tokens"] == [r.new_tokens]  # the tokens delivered
                assert choice["wall_time"] == [r.seconds] and choice["accept_lengths"] == r.accept_lengths


def spec_bench_speed(path) -> tuple[float, float]:
    """Spec-Bench's formula, written from its description: (mean over questions of summed new tokens over
    summed wall time, mean accept length over every round)."""
    answers = [json.loads(line) for line in open(path)]
    speeds = [sum(a["choices"][0]["new_tokens"]) / sum(a["choices"][0]["wall_time"]) for a in answers]
    return float(np.mean(speeds)), float(np.mean([x for a in answers for x in a["choices"][0]["accept_lengths"]]))


def test_a_run_at_a_limit_of_32_exports_no_new_tokens_above_it(tmp_path, mock_session, make_options, sweep):
    sweep(mock_session(), make_options(tmp_path / "run", decoders="ar,root-draw", temperatures="0,1", budgets="8",
                                       warmup=0, max_new_tokens=32, speed_tokens="round"))
    records = [r for r in load_records([tmp_path / "run"])]
    assert any(r.overshoot > 0 for r in records)  # a last round went past the limit: the case that matters
    exported = [n for path in export(str(tmp_path / "run"), str(tmp_path / "out"))
                for line in path.read_text().splitlines() for choice in json.loads(line)["choices"]
                for n in choice["new_tokens"]]
    assert max(exported) == 32 and sorted(exported) == sorted(r.new_tokens for r in records)


def test_the_exported_tau_is_the_reports_tau(tmp_path, mock_session, make_options, sweep):
    from evaluation.summary import analyse

    sweep(mock_session(), make_options(tmp_path / "run", decoders="ar,draft", temperatures="0", budgets="8",
                                       warmup=0))
    paths = {p.name: p for p in export(str(tmp_path / "run"), str(tmp_path / "out"))}
    setting = analyse(load_records([tmp_path / "run"]), 0.0, 8)
    _, tau = spec_bench_speed(paths["mock-draft-temperature-0-budget-8.jsonl"])
    assert tau == pytest.approx(setting.decoders["draft"].rounds.tau)


def docs_speed_reader() -> str:
    """docs/timing.md's command that reads an export as Spec-Bench's speed() does (a bash heredoc)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "timing.md").read_text(encoding="utf-8")
    start = text.index("python3 - runs/sweep1-spec-bench")
    return text[start:text.index("\nEND\n", start) + len("\nEND\n")]


def test_the_documented_reader_gives_spec_benchs_figures_of_an_export(tmp_path, make_record):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"models": {"target": {"model": "smollm2"}}, "sweep": {}}))
    delivered = {"ar": [(64, 8.0), (20, 2.0)], "root-draw": [(64, 4.0), (20, 1.6)]}  # (tokens, seconds)
    records = [make_record(f"spec-bench/{i}", d, tokens=n, seconds=s, overshoot=5 if n == 64 else 0,
                           grid_budget="all" if d == "ar" else 8, accepted=(1, 2, 4) if d != "ar" else (0, 0, 0),
                           tree_sizes=(8, 8, 8))
               for d, turns in delivered.items() for i, (n, s) in enumerate(turns, 1)]
    (run / "records.shard-1-of-1.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    export(str(run), str(tmp_path / "export"))
    command = docs_speed_reader().replace("python3 - runs/sweep1-spec-bench",
                                          f"{sys.executable} - {tmp_path / 'export'}", 1)
    said = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout
    rule, base = (64 / 4.0 + 20 / 1.6) / 2, (64 / 8.0 + 20 / 2.0) / 2  # each question's delivered tokens per s
    tau = (2 + 3 + 5) / 3  # accepted tokens per round, the bonus included
    assert said.strip() == f"tau {tau:.3f} root-draw {rule:.2f} tok/s ar {base:.2f} tok/s speedup {rule / base:.3f}"


def test_two_prompts_with_one_question_id_are_refused(make_record):
    with pytest.raises(InputError, match="would both be question 3"):
        export_module.answers([make_record("a/3", "ar"), make_record("b/3", "ar")], "m", "run")


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
