"""python -m timing values RUN [RUN ...]: every selection rule compared at the shared contexts of recorded
rounds (runs made with --record-rounds), exact and independent of the machine's speed.

The command line and `--check`, which reads the runs' records beside their rounds files; the study itself (its
sections, tables and figures) is study.program's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from evaluation.rounds import decode_key
from evaluation.rounds_file import load_rounds
from programs.cli import files_program, run_files_program
from study.options import ValuesOptions
from study.program import values
from timing import prog
from timing.record_store import load_records, record_key, shard_files


def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("values"), "Compare every selection rule at the shared contexts of recorded "
                         "rounds (runs made with --record-rounds).", ValuesOptions,
                         ("runs", dict(nargs="+", metavar="RUN", help="a run's output directory (shards of one run "
                                                                      "may lie in several)")))


def main(argv: list[str] | None = None) -> int:
    return run_files_program(build_parser(), argv, ValuesOptions, lambda ns, options: command(ns.runs, options))


def command(runs: Sequence[str], options: ValuesOptions) -> int:
    """`--check`, or the study's values.md (or JSON lines) -> the exit status."""
    return check(runs) if options.check else values(runs, options)


def check(runs: Sequence[str]) -> int:
    """Every damaged stretch of the runs' rounds files, and every timed decode whose record has no readable
    rounds, one line each -> 0 when there is none, else 1."""
    files = list(load_rounds(runs))
    have = {decode_key(d.key) for f in files for d in f.decodes}
    records = [r for run in runs if shard_files(run) for r in load_records([run])]
    missing = [r for r in records if not r.warmup and record_key(r) not in have]
    problems = [str(d) for f in files for d in f.damage if not d.recovered]
    problems += [f"no readable rounds for the recorded decode prompt_id={r.prompt_id!r} turn={r.turn} "
                 f"decoder={r.decoder} temperature={r.temperature:g} budget={r.setting_budget} "
                 f"seed={r.seed}" for r in missing]
    for line in problems:
        print(line)
    decodes = sum(len(f.decodes) for f in files)
    recovered = sum(d.recovered for f in files for d in f.damage)
    print(f"{len(files)} rounds file(s), {decodes} decodes readable, {len(records)} records, {recovered} chunk(s) "
          f"recovered by their checksum: " + (f"{len(problems)} problem(s)" if problems else "nothing damaged or "
                                                                                             "missing"))
    return 1 if problems else 0
