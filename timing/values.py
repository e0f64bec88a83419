"""python -m timing values RUN [RUN ...]: every selection rule compared at the shared contexts of recorded
rounds (runs made with --record-rounds), exact and independent of the machine's speed.

The command line and `--check`, which reads the runs' records beside their rounds files; the study itself (its
sections, tables and figures) is study.program's."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from evaluation.record import DecodeRecord
from evaluation.rounds_check import check_rounds
from evaluation.rounds_file import load_rounds
from programs.cli import files_program, run_files_program
from study.options import ValuesOptions
from study.program import values
from timing import prog
from timing.record_store import DamagedRecords, read_records, shard_files

log = logging.getLogger("values")


def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("values"), "Compare every selection rule at the shared contexts of recorded "
                         "rounds (runs made with --record-rounds).", ValuesOptions,
                         ("runs", dict(nargs="+", metavar="RUN", help="a run's output directory (shards of one run "
                                                                      "may lie in several)")))


def main(argv: list[str] | None = None) -> int:
    return run_files_program(build_parser(), argv, ValuesOptions, lambda ns, options: command(ns.runs, options))


def command(runs: Sequence[str], options: ValuesOptions) -> int:
    """`--check`, or the study's values.md (or JSON lines) -> the exit status."""
    if options.check:
        return check(runs, options.json)
    try:
        records = run_records(runs)
    except DamagedRecords as e:  # the rounds are read without them: only a file cut short goes unsaid
        log.warning("%s", e)
        records = {}
    return values(runs, options, records)


def run_records(runs: Sequence[str]) -> dict[Path, list[DecodeRecord]]:
    """Each records file of `runs` (by resolved path) -> its records in order."""
    return {path.resolve(): read_records(path) for run in runs for path in shard_files(run)}


def check(runs: Sequence[str], as_json: bool = False) -> int:
    """Every problem of the runs' rounds files against their records (evaluation.rounds_check), one line each
    (with `as_json` one JSON object each, then the counts) -> 0 when there is none, else 1."""
    checked = check_rounds(list(load_rounds(runs)), run_records(runs))
    for line in checked.json_lines() if as_json else [f.message for f in checked.findings] + [checked.summary()]:
        print(json.dumps(line) if as_json else line)
    return 1 if checked.findings else 0
