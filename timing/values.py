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
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from evaluation.rounds import decode_key
from evaluation.rounds_file import load_rounds
from evaluation.values import (VALUED, Agreement, Averages, Estimate, RoundValues, agreement, evaluate,
                               reach)
from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import category_group, group_order
from programs.cli import files_program, run_files_program
from timing import prog
from timing.options import ValuesOptions
from timing.record_store import load_records, record_key, shard_files

log = logging.getLogger("values")

# The paper's anchors (DESIGN.md section 8), printed beside this run's figures.
PAPER = ("root over draft up to +8.0% at B = 59 and larger at B = 8 (Table 2); root recovers 35-57% of the "
         "oracle's advantage at B = 59 (D.13); root-draw over pearl up to +14.2% at B = 8 (Table 12); draft needs "
         "11-22 nodes to reach root's value at B = 8 (Table 13); realized acceptance within about 0.02 tokens of "
         "its value")
SHOWN = ("root", "root-draw", "pearl", "pearl-top1", "oracle", "oracle-draw")  # gains over draft, in this order


def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("values"), "Compare every selection rule at the shared contexts of recorded "
                         "rounds (runs made with --record-rounds).", ValuesOptions,
                         ("runs", dict(nargs="+", metavar="RUN", help="a run's output directory (shards of one run "
                                                                      "may lie in several)")))


def main(argv: list[str] | None = None) -> int:
    return run_files_program(build_parser(), argv, ValuesOptions, lambda ns, options: values(ns.runs, options))


def values(runs: Sequence[str], options: ValuesOptions) -> int:
    if options.check:
        return check(runs)
    decodes, provenance, damage = [], None, []
    for found in load_rounds(runs):
        provenance = provenance or found.provenance
        decodes += found.decodes
        damage += found.damage
    for d in damage:
        log.warning("%s", d)
    tables = evaluate(decodes, options.budget_list, cut_levels=options.cut_levels)
    kw = dict(n_resamples=options.resamples, confidence=options.confidence, seed=options.bootstrap_seed)
    if options.json:
        for rv in tables:
            for line in json_lines(rv, Averages(rv, **kw), agreement(rv, options.confidence)):
                print(json.dumps(line))
        return 0
    out = Path(options.out or runs[0])
    out.mkdir(parents=True, exist_ok=True)
    plots = []
    if options.plots:
        from timing.plots import plot_value_gains  # matplotlib: only when drawing

        plot_value_gains([(rv.temperature, Averages(rv, **kw)) for rv in tables], out / "values.png")
        plots.append("values.png")
    text = render(runs, provenance or {}, tables, options, plots, damage)
    (out / "values.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def check(runs: Sequence[str]) -> int:
    """Every damaged stretch of the runs' rounds files, and every timed decode whose record has no readable
    rounds, one line each -> 0 when there is none, else 1."""
    files = list(load_rounds(runs))
    have = {decode_key(d.key) for f in files for d in f.decodes}
    records = [r for run in runs if shard_files(run) for r in load_records([run])]
    missing = [r for r in records if not r.get("warmup") and record_key(r) not in have]
    problems = [str(d) for f in files for d in f.damage if not d.recovered]
    problems += [f"no readable rounds for the recorded decode prompt_id={r['prompt_id']!r} turn={r['turn']} "
                 f"decoder={r['decoder']} temperature={r['temperature']:g} budget={r.get('grid_budget', r['budget'])} "
                 f"seed={r['seed']}" for r in missing]
    for line in problems:
        print(line)
    decodes = sum(len(f.decodes) for f in files)
    recovered = sum(d.recovered for f in files for d in f.damage)
    print(f"{len(files)} rounds file(s), {decodes} decodes readable, {len(records)} records, {recovered} chunk(s) "
          f"recovered by their checksum: " + (f"{len(problems)} problem(s)" if problems else "nothing damaged or "
                                                                                             "missing"))
    return 1 if problems else 0


def json_lines(rv: RoundValues, avg: Averages, agreements: Sequence[Agreement]) -> list[dict]:
    lines = []
    gains = {rule: avg.gain(rule, "draft") for rule in VALUED}
    for rule in VALUED:
        per_round, per_prompt = avg.per_round(rule), avg.per_prompt(rule)
        for k, budget in enumerate(rv.budgets.tolist()):
            g = gains[rule][k]
            lines.append({"kind": "value", "temperature": rv.temperature, "rule": rule, "budget": budget,
                          "rounds": rv.rounds, "prompts": avg.n_prompts, "value_per_round": float(per_round[k]),
                          "value_per_prompt": float(per_prompt[k]), "gain_over_draft": g.value,
                          "gain_low": g.low, "gain_high": g.high})
    for rule, values in rv.by_depth.items():
        means = values.mean(0)  # (D, K)
        for level in range(means.shape[0]):
            for k, budget in enumerate(rv.budgets.tolist()):
                lines.append({"kind": "cut", "temperature": rv.temperature, "rule": rule, "budget": budget,
                              "levels": level + 1, "rounds": rv.rounds, "value_per_round": float(means[level, k])})
    for a in agreements:
        lines.append({"kind": "agreement", "temperature": rv.temperature, "decoder": a.decoder, "budget": a.budget,
                      "rounds": a.rounds, "realized_per_round": a.realized, "value_per_round": a.expected,
                      "difference": a.difference.value, "low": a.difference.low, "high": a.difference.high,
                      "disagrees": a.disagrees, "ahead_hit_probability": None if math.isnan(a.ahead) else a.ahead,
                      "ahead_rounds": a.ahead_rounds})
    return lines


def render(runs: Sequence[str], provenance: dict, tables: Sequence[RoundValues], options: ValuesOptions,
           plots: Sequence[str], damage: Sequence = ()) -> str:
    models, pool = provenance.get("models", {}), provenance.get("pool", {})
    target = models.get("target", {}).get("model", "(not recorded)")
    drafter = (models.get("drafter") or {}).get("model", "(not recorded)")
    level = f"{options.confidence:.0%}"
    lines = ["# Rules compared at shared contexts", "",
             f"- runs: {', '.join(runs)}",
             f"- target {target}, drafter {drafter}; pool topk={pool.get('topk')} depth={pool.get('depth')} "
             f"expand={pool.get('expand')}",
             "- value: expected accepted tokens of the tree a rule keeps from the round's pool, from the target's "
             "exact edge probabilities (the draw X1 counts as accepted for root-draw, pearl, pearl-top1 and "
             "oracle-draw); oracle: the best fixed tree (the ceiling of draft and root); oracle-draw: the best "
             "tree beneath each draw (the ceiling of the draw rules)",
             f"- intervals: {level} paired prompt-bootstrap percentile intervals ({options.resamples} resamples, "
             f"seed {options.bootstrap_seed}); per round pools rounds, per prompt averages each prompt's mean",
             f"- the paper's anchors: {PAPER}", ""]
    if damage:
        lines += [f"**The rounds files hold {len(damage)} damaged stretch(es)**; what they held is left out "
                  f"(`values --check` lists every decode that lost its rounds):", ""]
        lines += [f"- {d}" for d in damage] + [""]
    for rv in tables:
        avg = Averages(rv, n_resamples=options.resamples, confidence=options.confidence, seed=options.bootstrap_seed)
        lines += _temperature(rv, avg, agreement(rv, options.confidence),
                              level)
        if options.by_category:
            lines += _by_category(rv, options, level)
    lines += [f"![{p}]({p})" for p in plots]
    return "\n".join(lines).rstrip() + "\n"


def _temperature(rv: RoundValues, avg: Averages, agreements: Sequence[Agreement], level: str) -> list[str]:
    budgets = rv.budgets.tolist()
    head = "| rule | " + " | ".join(f"B = {b}" for b in budgets) + " |"
    rule_line = "|" + "---|" * (len(budgets) + 1)
    out = [f"## T = {rv.temperature:g}: {rv.rounds} rounds, {avg.n_prompts} prompts", "",
           "Expected accepted tokens per round (per prompt below it).", "", head, rule_line]
    for rule in VALUED:
        out.append(f"| {rule} | " + " | ".join(f"{v:.3f}" for v in avg.per_round(rule)) + " |")
        out.append(f"| ↳ per prompt | " + " | ".join(f"{v:.3f}" for v in avg.per_prompt(rule)) + " |")
    out += ["", f"Gain over draft per round, {level} interval (per prompt in the second table).", "",
            "| budget | " + " | ".join(SHOWN) + " | root-draw over pearl |", "|" + "---|" * (len(SHOWN) + 2)]
    for prompt_first in (False, True):
        gains = {rule: avg.gain(rule, "draft", prompt_first=prompt_first) for rule in SHOWN}
        over_pearl = avg.gain("root-draw", "pearl", prompt_first=prompt_first)
        for k, b in enumerate(budgets):
            cells = [_est(gains[rule][k]) for rule in SHOWN] + [_est(over_pearl[k])]
            out.append(f"| {b}{' (per prompt)' if prompt_first else ''} | " + " | ".join(cells) + " |")
    share = avg.share("root", "draft", "oracle")
    out += ["", f"Share of the oracle's advantage over draft that root recovers: "
            + "; ".join(f"B = {b}: {_share(s)}" for b, s in zip(budgets, share)), ""]
    draft_reach, root_reach = reach(rv.mean_curves, "draft", "root"), reach(rv.mean_curves, "root", "draft")
    out += [f"Budgets (searching every budget up to the pool, {len(rv.mean_curves['draft'])}): draft reaches root's "
            f"value at B = 8 at B = {draft_reach or 'never'}; root reaches draft's value at B = 8 at "
            f"B = {root_reach or 'never'}.", ""]
    if rv.record_seconds.any():
        out += [f"Recording: the measurement pass over a round's pool of {len(rv.mean_curves['draft'])} took a median of "
                f"{1000 * float(np.median(rv.record_seconds)):.1f} ms (mean "
                f"{1000 * float(rv.record_seconds.mean()):.1f} ms), outside the decode's timed phases.", ""]
    out += _cut_table(rv)
    off = avg.off_pool_share()
    out += [f"The draw X1 is off the pool's first level in {_pct(off.value, 1, sign=False)} of rounds "
            f"[{_pct(off.low, 1, sign=False)}, {_pct(off.high, 1, sign=False)}] (expected, from the root row).", ""]
    if agreements:
        out += ["Agreement with the online decoder: its realized accepted tokens per round against its value at "
                "each round's own budget, on the same rounds (normal interval of the mean difference: given its "
                "context, a round's difference has mean zero, so its standard error is sqrt(sum d²) / rounds).", "",
                "| decoder | budget | rounds | realized | value | difference | " + level + " interval | |",
                "|---|---|---|---|---|---|---|---|"]
        for a in agreements:
            d = a.difference
            flag = "**disagrees: a bug in the recording or in the decoder**" if a.disagrees else "agrees"
            out.append(f"| {a.decoder} | {a.budget} | {a.rounds} | {a.realized:.3f} | {a.expected:.3f} | "
                       f"{d.value:+.3f} | [{d.low:+.3f}, {d.high:+.3f}] | {flag} |")
        out.append("")
        out += ["Drafting ahead (`--ahead`): how often its prediction of where a round ends (the draft's greedy "
                "path through the tree, then the drafter's next token) would have been right on these rounds, "
                "from the target's edges along it (rounds whose prediction ends beyond the pool's expanded "
                "candidates are left out).", "", "| decoder | budget | rounds | hit probability |",
                "|---|---|---|---|"]
        out += [f"| {a.decoder} | {a.budget} | {a.ahead_rounds} | "
                + ("—" if math.isnan(a.ahead) else f"{100 * a.ahead:.1f}%") + " |" for a in agreements]
        out.append("")
    return out


def _cut_table(rv: RoundValues) -> list[str]:
    """Expected accepted tokens per round from pools cut after each level (`--cut-pools`), against the whole."""
    if not rv.by_depth:
        return []
    budgets = rv.budgets.tolist()
    picks = [b for b in (8, 59) if b in budgets] or budgets[:1]
    ks = [budgets.index(b) for b in picks]
    means = {rule: v.mean(0) for rule, v in rv.by_depth.items()}  # (D, K)
    head = ["levels"] + [f"{rule} B = {b}" for b in picks for rule in means]
    out = ["Pools cut after a number of levels (what `--cut-pools` sends when the target asks for the pool "
           "then): expected accepted tokens per round, and in brackets the share of the whole pool's tokens per "
           "round (accepted tokens and the continuation, value + 1), which the rounds a second must make up for "
           "(`python -m timing.round_model`).", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    depth = next(iter(means.values())).shape[0]
    for level in range(depth):
        cells = [f"{means[rule][level, k]:.3f} ({(means[rule][level, k] + 1) / (means[rule][-1, k] + 1):.0%})"
                 for k in ks for rule in means]
        out.append(f"| {level + 1} | " + " | ".join(cells) + " |")
    return out + [""]


def _by_category(rv: RoundValues, options: ValuesOptions, level: str) -> list[str]:
    groups = {}
    for i, c in enumerate(rv.categories):
        groups.setdefault(category_group(c), []).append(i)
    budgets = rv.budgets.tolist()
    picks = [b for b in (8, 59) if b in budgets] or budgets[:1]
    head = ["group", "prompts", "rounds"] + [f"root over draft B = {b}" for b in picks] + \
           [f"root-draw over pearl B = {b}" for b in picks] + ["X1 off the pool"]
    out = [f"### T = {rv.temperature:g} by category (per round, {level} intervals)", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in group_order(set(groups)):
        avg = Averages(rv, prompts=np.array(groups[g]), n_resamples=options.resamples,
                       confidence=options.confidence, seed=options.bootstrap_seed)
        root, rd = avg.gain("root", "draft"), avg.gain("root-draw", "pearl")
        ks = [budgets.index(b) for b in picks]
        off = avg.off_pool_share()
        est = (lambda e: _est(e)) if avg.n_prompts >= MIN_INTERVAL_PROMPTS else (lambda e: f"{_pct(e.value)} (no interval)")
        out.append(f"| {g} | {avg.n_prompts} | {int(avg.rounds.sum())} | " + " | ".join(
            [est(root[k]) for k in ks] + [est(rd[k]) for k in ks] + [_pct(off.value, 1, sign=False)]) + " |")
    return out + ["", f"No interval below {MIN_INTERVAL_PROMPTS} prompts: a bootstrap over fewer is about the range "
                      "of their values.", ""]


def _est(e: Estimate) -> str:
    return f"{_pct(e.value)} [{_pct(e.low)}, {_pct(e.high)}]"


def _share(e: Estimate) -> str:
    return "—" if not math.isfinite(e.value) else f"{_pct(e.value, 0, sign=False)} [{_pct(e.low, 0, sign=False)}, " \
                                                   f"{_pct(e.high, 0, sign=False)}]"


def _pct(x: float, digits: int = 1, sign: bool = True) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{100 * x:+.{digits}f}%" if sign else f"{100 * x:.{digits}f}%"
