"""The values program's work (`python -m timing values`, timing.values): the recorded rounds of the runs read,
every section's tables made from them, and values.md, its figures or the JSON lines written (docs/values.md
lists the sections and figures). It never writes over a report a folder holds unless told to (--overwrite),
and says on stderr which section it is computing and where it wrote."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from evaluation.held_rows import held_rows
from evaluation.paths import output_dir, refuse_overwrite
from evaluation.record import DecodeRecord, record_key
from evaluation.rounds import RecordedDecode, decode_key, key_text
from evaluation.rounds_check import timed_keys
from evaluation.rounds_file import ends_early, load_rounds, records_beside
from pipeline.config import InputError
from study import tables
from study.coverage_section import coverage_section
from study.options import ValuesOptions
from study.rows_section import FIGURE as ROWS_FIGURE, rows_section
from study.section import ValuesInput
from study.selection_section import FIGURES as SELECTION_FIGURES, Selection, selection_section

log = logging.getLogger("values")

# Each makes a part of the report (a study.section.Section) from the recorded rounds; in the report's order,
# with the words progress names it by.
SECTIONS = (("the rules' values", selection_section), ("coverage", coverage_section),
            ("the retained rows", rows_section))
REPORT = "values.md"
OUTPUTS = (REPORT, *SELECTION_FIGURES, ROWS_FIGURE)  # every file a report may write


def output_directory(runs: Sequence[str], options: ValuesOptions) -> Path:
    """Where the report goes: `options.out`, else the first run. InputError, before any work, when it holds a
    report or figures already and `options.overwrite` is not set: a run's committed study is never lost to a
    rerun that did not ask for it."""
    out = Path(options.out or runs[0])
    refuse_overwrite((out / name for name in OUTPUTS), options.overwrite, "--out NEW_DIR")
    return out


def load(runs: Sequence[str], options: ValuesOptions,
         records: Mapping[Path, Sequence[DecodeRecord]] | None = None) -> ValuesInput:
    """The decodes of every rounds file of `runs` (`records`: each records file's records, by resolved path, to
    tell a file cut short on a chunk boundary and which rounds held their root's row); damage is logged, one line
    each, and kept for the report."""
    data = ValuesInput(list(runs), options)
    for found in load_rounds(runs):
        data.provenance = data.provenance or found.provenance
        data.recording = data.recording or found.recording
        data.decodes += found.decodes
        data.damage += found.damage
        if cut := ends_early(found, timed_keys((records or {}).get(records_beside(found.path).resolve(), []))):
            data.damage.append(cut)
    for d in data.damage:
        log.warning("%s", d)
    if options.short:
        data.short = load_short(options.short, data.decodes)
    by_key = {record_key(r): r for listed in (records or {}).values() for r in listed}
    for d in data.decodes:  # which rounds held their root's row (`cover`), how the output ended: the records say
        record = by_key.get(decode_key(d.key))
        d.held, d.finish = held_rows(record, d.rounds), record.finish_reason if record else ""
    return data


def load_short(run: str, decodes: Sequence[RecordedDecode]) -> list[RecordedDecode]:
    """The decodes of `run` (--short), a run of the same prompts, decoders, budgets and temperatures as `decodes`
    limited to LATE tokens; InputError naming what differs, or the first round that starts at LATE or later."""
    try:
        found = list(load_rounds([run]))
    except InputError as e:
        raise InputError(f"--short: {e}") from None
    short = [d for f in found for d in f.decodes]
    for d in (d for f in found for d in f.damage):
        log.warning("--short: %s", d)
    timed = [[d.key for d in ds if d.rounds and not d.key.get("warmup", False)] for ds in (decodes, short)]
    differ = []
    for what, of in (("prompts", lambda k: str(k["prompt_id"])), ("decoders", lambda k: str(k["decoder"])),
                     ("budgets", lambda k: str(k.get("grid_budget", k["budget"]))),
                     ("temperatures", lambda k: f"{float(k['temperature']):g}")):
        mine, theirs = ({of(k) for k in keys} for keys in timed)
        if mine != theirs:
            differ.append(f"{what} ({', '.join(sorted(mine - theirs)[:3]) or 'none'} only in the run, "
                          f"{', '.join(sorted(theirs - mine)[:3]) or 'none'} only in {run})")
    if differ:
        raise InputError(f"--short {run}: not the same decodes as the run's: {'; '.join(differ)}")
    if late := next((d for d in short for r in d.rounds if r.position >= tables.LATE), None):
        raise InputError(f"--short {run}: decode {key_text(late.key)} has rounds from output token "
                         f"{tables.LATE} on; record it at --max-new-tokens {tables.LATE}")
    return short


def values(runs: Sequence[str], options: ValuesOptions,
           records: Mapping[Path, Sequence[DecodeRecord]] | None = None) -> int:
    """Every section over the recorded rounds of `runs`: values.md and its figures in `options.out` (the first
    run when empty; see output_directory), or with `options.json` one JSON line per figure on stdout -> 0.
    Progress and the files written go to the log (stderr)."""
    if options.out and not options.json:  # before the work: an --out that cannot be made is said at once
        output_dir(options.out, "--out")
    out = None if options.json else output_directory(runs, options)
    data = load(runs, options, records)
    log.info("read %d decodes (%d rounds) from %s", len(data.decodes), sum(len(d.rounds) for d in data.decodes),
             ", ".join(runs))
    sections = []
    for i, (name, make) in enumerate(SECTIONS, 1):
        log.info("computing %s (%d/%d)", name, i, len(SECTIONS))
        sections.append(make(data))
    if options.json:
        for section in sections:
            for line in section.json_lines():
                print(json.dumps(line))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if options.plots:
        log.info("drawing the figures")
    plots = [name for section in sections for name in section.plots(out)] if options.plots else []
    (out / REPORT).write_text(render(data, sections, plots), encoding="utf-8")
    log.info("wrote %s", ", ".join(str(out / name) for name in (REPORT, *plots)))
    return 0


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
    lines += [line for s in sections if isinstance(s, Selection) for line in ["", *s.headline()]]  # the opening screen
    if data.damage:
        lines += ["", f"**The rounds files hold {len(data.damage)} damaged stretch(es)**; what they held is left out "
                      f"(`values --check` lists every decode that lost its rounds):", ""]
        lines += [f"- {d}" for d in data.damage]
    for section in sections:
        lines += section.markdown()
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines).rstrip() + "\n"
