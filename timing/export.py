"""python -m timing export RUN_DIR OUT_DIR --format spec-bench: a sweep's records as Spec-Bench model answers.

One JSONL file per (decoder, T, B), MODEL-DECODER-temperature-T-budget-B.jsonl (a sweep's `ar` in one file per T
without the budget), one line per question, as Spec-Bench's inference writes and its `evaluation/speed.py` reads:

    {"question_id": int, "category": str, "answer_id": str, "model_id": str, "tstamp": float,
     "choices": [{"index": i, "turns": [answer text per turn], "decoding_steps": [rounds per turn],
                  "new_tokens": [tokens per turn], "wall_time": [seconds per turn],
                  "accept_lengths": [tokens per round, bonus included, all turns in order]}]}

A choice is one sampling seed, or at T = 0 one of `--greedy-repeats` decodes; Spec-Bench's `speed` reads the first
alone. `new_tokens` counts the tokens delivered (never more than the limit); `wall_time` runs from the start of the
prefill to the last commit. Question ids are the prompt id's trailing integer (spec-bench/81 -> 81)."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from evaluation.paths import output_dir, output_file, refuse_overwrite, replace_atomically
from evaluation.record import DecodeRecord
from evaluation.summary import EVERY_BUDGET
from pipeline.config import InputError
from programs.cli import files_program, run_files_program
from timing import prog, run_config
from timing.options import ExportOptions
from timing.record_store import load_records



def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("export"), "Write a sweep's records in another tool's format.", ExportOptions,
                         ("run_dir", dict(metavar="RUN_DIR", help="a sweep's --out directory")),
                         ("out_dir", dict(metavar="OUT_DIR", help="where the answer files go")))


def main(argv: list[str] | None = None) -> int:
    def body(ns, options: ExportOptions) -> int:
        for path in export(ns.run_dir, ns.out_dir, options.model_id or None, overwrite=options.overwrite):
            print(path)
        return 0

    return run_files_program(build_parser(), argv, ExportOptions, body)


def export(run_dir: str, out_dir: str, model_id: str | None = None, *, overwrite: bool = False) -> list[Path]:
    """Write the Spec-Bench answer files of a sweep directory -> their paths. InputError, before any is written,
    where one exists already and `overwrite` is not set."""
    config = run_config.read_config(run_dir)  # a run directory with its config, before the output's is made
    out = output_dir(out_dir, "the output directory")
    model_id = model_id or _plain_name(config["models"]["target"]["model"])
    records = [r for r in load_records([run_dir]) if not r.warmup]
    if not records:
        raise InputError(f"{run_dir} holds no timed decode to export")
    groups: dict[tuple, list[DecodeRecord]] = {}
    for r in records:
        groups.setdefault((r.decoder, float(r.temperature), r.setting_budget), []).append(r)
    files = {out / answer_file(model_id, *key): rs for key, rs in sorted(groups.items(), key=lambda kv: str(kv[0]))}
    refuse_overwrite(files, overwrite, "a new OUT_DIR")
    for path, rs in files.items():
        lines = [json.dumps(answer) for answer in answers(rs, f"{model_id}-{rs[0].decoder}", run_dir)]
        output_file(path, "the answer file")
        with replace_atomically(path) as tmp:  # a failed write leaves no partial or empty answer file
            tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return list(files)


def answer_file(model_id: str, decoder: str, temperature: float, budget: int | str) -> str:
    """The answer file's name of a (decoder, T, B); a sweep's `ar`, decoded once for every budget, has one file
    whatever the budgets."""
    shared = budget == EVERY_BUDGET
    return f"{model_id}-{decoder}-temperature-{temperature:g}{'' if shared else f'-budget-{budget}'}.jsonl"


def answers(records: Sequence[DecodeRecord], model_id: str, run: str) -> list[dict]:
    """One answer per question from the records of one (decoder, T, B), questions in id order."""
    by_prompt: dict[str, list[DecodeRecord]] = {}
    for r in records:
        by_prompt.setdefault(r.prompt_id, []).append(r)
    ids: dict[int, str] = {}
    out = []
    for prompt_id, rs in by_prompt.items():
        qid = question_id(prompt_id)
        if qid in ids:
            raise InputError(f"prompts {ids[qid]!r} and {prompt_id!r} would both be question {qid}; export them "
                             f"from separate runs")
        ids[qid] = prompt_id
        seeds = sorted({r.seed for r in rs})
        choices = [_choice(i, sorted((r for r in rs if r.seed == s), key=lambda r: r.turn))
                   for i, s in enumerate(seeds)]
        r0 = rs[0]
        key = f"{run}/{prompt_id}/{r0.decoder}/{r0.temperature}/{r0.setting_budget}"
        out.append({"question_id": qid, "category": r0.category,
                    "answer_id": hashlib.blake2b(key.encode(), digest_size=11).hexdigest(), "model_id": model_id,
                    "choices": choices, "tstamp": max(r.finished for r in rs)})
    return sorted(out, key=lambda a: a["question_id"])


def _choice(index: int, turns: list[DecodeRecord]) -> dict:
    return {"index": index, "turns": [t.text.strip() for t in turns],
            "decoding_steps": [t.rounds for t in turns], "new_tokens": [t.new_tokens for t in turns],
            "wall_time": [t.seconds for t in turns], "accept_lengths": [a for t in turns for a in t.accept_lengths]}


def question_id(prompt_id: str) -> int:
    match = re.search(r"(\d+)$", prompt_id)
    if match is None:
        raise InputError(f"prompt {prompt_id!r} has no trailing number to serve as a Spec-Bench question_id")
    return int(match.group(1))


def _plain_name(model: str) -> str:
    """A model spec as a file-name part: smollm2:int8 -> smollm2-int8, org/model -> model."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model.rstrip("/").rsplit("/", 1)[-1])
