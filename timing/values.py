"""python -m timing values RUN [RUN ...]: every selection rule compared at the shared contexts of recorded
rounds (runs made with --record-rounds), exact and independent of the machine's speed.

Per temperature: each rule's expected accepted tokens per round and per prompt at every budget, gains over
`draft` and of `root-draw` over `pearl` with paired prompt-bootstrap intervals, the share of the oracle's
advantage that `root` recovers, the budgets at which `draft` and `root` reach each other's value at B = 8,
how often the draw X1 falls off the pool's first level, the recording decoder's realized acceptance
against its value on the same rounds, (--cut-levels) the values of the pools cut after each level, and
(--by-category) the same per prompt group. Writes values.md
and values.png; with --json, stdout is one JSON line per (temperature, rule, budget) and per recorded
decoder setting.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from evaluation.rounds import decode_key
from evaluation.rounds_file import load_rounds
from programs.cli import files_program, run_files_program
from timing import prog
from timing.options import ValuesOptions
from timing.record_store import load_records, record_key, shard_files
from timing.values_common import ValuesInput
from timing.values_coverage import Coverage
from timing.values_rows import Rows
from timing.values_selection import Selection

log = logging.getLogger("values")

SECTIONS = (Selection, Coverage, Rows)  # each a part of the report (timing.values_common.Section), in order


def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("values"), "Compare every selection rule at the shared contexts of recorded "
                         "rounds (runs made with --record-rounds).", ValuesOptions,
                         ("runs", dict(nargs="+", metavar="RUN", help="a run's output directory (shards of one run "
                                                                      "may lie in several)")))


def main(argv: list[str] | None = None) -> int:
    return run_files_program(build_parser(), argv, ValuesOptions, lambda ns, options: values(ns.runs, options))


def load(runs: Sequence[str], options: ValuesOptions) -> ValuesInput:
    """The decodes of every rounds file of `runs`; damage is logged, one line each, and kept for the report."""
    data = ValuesInput(list(runs), options)
    for found in load_rounds(runs):
        data.provenance = data.provenance or found.provenance
        data.recording = data.recording or found.recording
        data.decodes += found.decodes
        data.damage += found.damage
    for d in data.damage:
        log.warning("%s", d)
    return data


def values(runs: Sequence[str], options: ValuesOptions) -> int:
    if options.check:
        return check(runs)
    data = load(runs, options)
    sections = [make(data) for make in SECTIONS]
    if options.json:
        for section in sections:
            for line in section.json_lines():
                print(json.dumps(line))
        return 0
    out = Path(options.out or runs[0])
    out.mkdir(parents=True, exist_ok=True)
    plots = [name for section in sections for name in section.plots(out)] if options.plots else []
    text = render(data, sections, plots)
    (out / "values.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


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


def render(data: ValuesInput, sections: Sequence, plots: Sequence[str]) -> str:
    provenance, options = data.provenance, data.options
    models, pool = provenance.get("models", {}), provenance.get("pool", {})
    target = models.get("target", {}).get("model", "(not recorded)")
    drafter = (models.get("drafter") or {}).get("model", "(not recorded)")
    lines = ["# Rules compared at shared contexts", "",
             f"- runs: {', '.join(data.runs)}",
             f"- target {target}, drafter {drafter}; pool topk={pool.get('topk')} depth={pool.get('depth')} "
             f"expand={pool.get('expand')}",
             "- value: expected accepted tokens of the tree a rule keeps from the round's pool, from the target's "
             "exact edge probabilities (the draw X1 counts as accepted for root-draw, pearl, pearl-top1 and "
             "oracle-draw); oracle: the best fixed tree (the ceiling of draft and root); oracle-draw: the best "
             "tree beneath each draw (the ceiling of the draw rules)",
             f"- intervals: {data.level} paired prompt-bootstrap percentile intervals ({options.resamples} resamples, "
             f"seed {options.bootstrap_seed}); per round pools rounds, per prompt averages each prompt's mean"]
    if data.damage:
        lines += ["", f"**The rounds files hold {len(data.damage)} damaged stretch(es)**; what they held is left out "
                      f"(`values --check` lists every decode that lost its rounds):", ""]
        lines += [f"- {d}" for d in data.damage]
    for section in sections:
        lines += section.markdown()
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines).rstrip() + "\n"
