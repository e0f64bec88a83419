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

from evaluation.rounds_check import check_rounds, timed_keys
from evaluation.rounds_file import ends_early, load_rounds, records_beside
from programs.cli import files_program, run_files_program
from timing import prog
from timing.options import ValuesOptions
from timing.record_store import DamagedRecords, read_records, shard_files
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
    try:
        records = run_records(runs)
    except DamagedRecords as e:  # the rounds are read without them: only a file cut short goes unsaid
        log.warning("%s", e)
        records = {}
    for found in load_rounds(runs):
        data.provenance = data.provenance or found.provenance
        data.recording = data.recording or found.recording
        data.decodes += found.decodes
        data.damage += found.damage
        if cut := ends_early(found, timed_keys(records.get(records_beside(found.path).resolve(), []))):
            data.damage.append(cut)
    for d in data.damage:
        log.warning("%s", d)
    return data


def run_records(runs: Sequence[str]) -> dict:
    """Each records file of `runs` (by resolved path) -> its records in order."""
    return {path.resolve(): read_records(path) for run in runs for path in shard_files(run)}


def values(runs: Sequence[str], options: ValuesOptions) -> int:
    if options.check:
        return check(runs, options.json)
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


def check(runs: Sequence[str], as_json: bool = False) -> int:
    """Every problem of the runs' rounds files against their records (evaluation.rounds_check), one line each
    (with `as_json` one JSON object each, then the counts) -> 0 when there is none, else 1."""
    checked = check_rounds(list(load_rounds(runs)), run_records(runs))
    for line in checked.json_lines() if as_json else [f.message for f in checked.findings] + [checked.summary()]:
        print(json.dumps(line) if as_json else line)
    return 1 if checked.findings else 0


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
