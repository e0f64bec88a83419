"""python -m timing report DIR [DIR ...]: speeds, paired gains and round times of finished sweeps.

Merges the shards of the given directories (whose configs must agree), leaves warm-ups out, and per (T, B) writes
report.md's tables and the PNG plots the run has data for; the last line of stdout is one JSON document."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from evaluation.paths import output_dir, refuse_overwrite
from evaluation.record import DecodeRecord
from evaluation.stats import percent
from evaluation.summary import (DELIVERED, PAPER_ROUND, Setting, analyse, as_json, category_group, group_order,
                                phase_ms, settings_of)
from pipeline.config import InputError
from pipeline.result import PHASES
from programs.cli import files_program, run_files_program
from timing import prog, run_config
from timing.figures import phase_profile
from timing.options import ReportOptions
from timing.record_store import load_records

# Every plot a report may draw (see draw), each refused where it exists already unless --overwrite
PLOTS = ("gains.png", "timeline.png", "speed.png", "acceptance.png", "tree_sizes.png", "phases.png",
         "speed_by_category.png", "acceptance_by_category.png", "tree_sizes_by_category.png", "phases_by_category.png")


def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("report"), "Report the speeds and gains of one or more sweep directories "
                         "(shards of one sweep may lie in several).", ReportOptions,
                         ("dirs", dict(nargs="+", metavar="DIR", help="a sweep's --out directory")))


def main(argv: list[str] | None = None) -> int:
    return run_files_program(build_parser(), argv, ReportOptions, lambda ns, options: report(ns.dirs, options))


def report(dirs: Sequence[str], options: ReportOptions) -> int:
    config = merged_config(dirs)  # each a run directory with its config, before --out is made
    out = output_dir(options.out or dirs[0], "--out")
    refuse_overwrite((out / name for name in ("report.md", *(PLOTS if options.plots else ()))), options.overwrite,
                     "--out NEW_DIR")
    records = load_records(dirs)
    timed = [r for r in records if not r.warmup]
    if not timed:
        raise InputError(f"{', '.join(dirs)} hold no timed decode yet ({len(records)} warm-ups)")
    kw = dict(speed_tokens=config["sweep"].get("speed_tokens", DELIVERED), n_resamples=options.resamples,
              confidence_level=options.confidence, rng=options.bootstrap_seed)
    settings = [analyse(timed, t, b, **kw) for t, b in settings_of(timed)]
    by_category = {}
    if options.by_category:
        groups = group_order({category_group(r.category) for r in timed})
        by_category = {s.label: [analyse(timed, s.temperature, s.budget, g, **kw) for g in groups]
                       for s in settings}
    plots = draw(settings, by_category, options, out) if options.plots else []
    text = render(dirs, config, records, settings, by_category, options, plots)
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    print(json.dumps({"report": str(out / "report.md"), "plots": [str(out / p) for p, _ in plots],
                      "settings": [as_json(s) for s in settings]}))
    return 0


def draw(settings: Sequence[Setting], by_category: dict[str, list[Setting]], options: ReportOptions,
         out: Path) -> list[tuple[str, str]]:
    """Each plot the run has the data for, written to `out` -> (file name, what it shows) of those written."""
    from timing import figures as f, plots as p  # matplotlib: only when drawing

    cats = by_category
    wanted = [
        ("gains.png", f"each comparison's speed gain per setting, with its {options.confidence:.0%} interval where "
                      f"enough prompts give one; a gain a caution concerns is a cross",
         lambda path: p.plot_gains(settings, path, options.confidence)),
        ("timeline.png", "the drafter's and the target's phases in the rounds nearest the median round time",
         lambda path: p.plot_timeline(settings, options.timeline_decoder, path)),
        ("speed.png", "speed (tokens per second, no interval) and τ (tokens per round; hatched where 1 by "
                      "construction) by decoder, temperature and budget",
         lambda path: p.plot_speed(f.speed_panels(settings), path)),
        ("acceptance.png", "acceptance by depth: the share of tree rounds that accepted at least d tree tokens "
                           "(open circle: 100% by construction; shaded: depths only context lookup's chains reach)",
         lambda path: p.plot_acceptance(f.decoder_panels(settings, f.has_acceptance), path)),
        ("tree_sizes.png", "under budget auto, the share of rounds at each tree size (0: a plain round), for the "
                           "settings where some round verified a tree",
         lambda path: p.plot_tree_sizes(f.informative(f.decoder_panels(settings, f.ran_auto)), path)),
        ("phases.png", "where a round's time goes: median ms per phase, tree and plain rounds apart",
         lambda path: p.plot_phases(f.decoder_panels(settings, f.has_rounds), path)),
    ]
    if cats:
        wanted += [
            ("speed_by_category.png", "speed and τ by prompt category, per setting",
             lambda path: p.plot_speed(f.category_speed_panels(settings, cats), path)),
            ("acceptance_by_category.png", "acceptance by depth by prompt category, per setting and decoder",
             lambda path: p.plot_acceptance(f.category_panels(settings, cats, f.has_acceptance), path)),
            ("tree_sizes_by_category.png", "tree sizes under budget auto by prompt category",
             lambda path: p.plot_tree_sizes(f.informative(f.category_panels(settings, cats, f.ran_auto)), path)),
            ("phases_by_category.png", "where a round's time goes by prompt category, per setting and decoder",
             lambda path: p.plot_phases(f.category_panels(settings, cats, f.has_rounds), path)),
        ]
    assert {name for name, _, _ in wanted} <= set(PLOTS), "a plot missing from PLOTS would be written over unasked"
    return [(name, caption) for name, caption, plot in wanted if plot(out / name)]


def merged_config(dirs: Sequence[str]) -> dict:
    """The first directory's config, after checking that every other one times the same thing."""
    configs = [run_config.read_config(d) for d in dirs]
    for d, c in zip(dirs[1:], configs[1:]):
        diff = run_config.differences(run_config.compared(configs[0]), run_config.compared(c))
        if diff:
            raise run_config.ConfigMismatch(f"{dirs[0]} and {d} hold sweeps with other settings:\n  "
                                            + "\n  ".join(diff))
    return configs[0]


def _per_shard(records: Sequence[DecodeRecord]) -> str:
    """How the warm-ups spread over shards, when there were several: each shard warms up on its own."""
    shards = {r.sweep.shard for r in records if r.warmup}
    return f", run in each of {len(shards)} shards" if len(shards) > 1 else ""


def render(dirs: Sequence[str], config: dict, records: Sequence[DecodeRecord], settings: Sequence[Setting],
           by_category: dict[str, list[Setting]], options: ReportOptions, plots: Sequence[tuple[str, str]]) -> str:
    models, pool, sweep = config["models"], config["pool"], config["sweep"]
    drafter = models["drafter"]["model"] if models.get("drafter") else "(not recorded)"
    warmups = sum(r.warmup for r in records)
    counted = {PAPER_ROUND: "tokens up to the first end-of-sequence token with the last round whole (the paper's "
                            "count, chosen by the sweep; outputs themselves stop at the limit)",
               DELIVERED: "the tokens delivered (the output, at most the limit)"}[sweep.get("speed_tokens", DELIVERED)]
    lines = [
        "# Timing report", "",
        f"- directories: {', '.join(dirs)}",
        f"- target {models['target']['model']} on {models['target']['device']} ({models['target']['dtype']}), "
        f"drafter {drafter}; pool topk={pool['topk']} depth={pool['depth']} expand={pool['expand']}"
        f"{' + context lookup ' + str(sweep['lookup']) if sweep.get('lookup') else ''}; "
        f"max new tokens {sweep['max_new_tokens']}; turns: {sweep.get('turns', 'first')}",
        *[f"- {role} weights: {m.get('revision')} ({m.get('dtype')}, {m.get('device')})"
          for role, m in (config.get("identity") or {}).items()],
        f"- {len(records) - warmups} timed decodes ({warmups} warm-ups left out{_per_shard(records)}); speed is "
        f"summed tokens over summed seconds (prefill included), counting {counted}; gains are paired-bootstrap "
        f"{options.confidence:.0%} percentile intervals over prompts ({options.resamples} resamples, seed "
        f"{options.bootstrap_seed})",
        "- τ: tokens per round, the bonus token included (Spec-Bench's mean accepted tokens); tok/pass: per "
        "target pass after the prefill (a root-pass rule makes two a round); acceptance at depth d: rounds "
        "that accepted a node at depth d among those that reached depth d - 1 with candidates below it (after "
        "`chains`: the depths beyond the deepest pool the drafter sent, which only context lookup's chains reach)",
        "",
    ]
    for s in settings:
        lines += _setting(s, options, 2)
        for c in by_category.get(s.label, []):
            lines += _setting(c, options, 3)
    lines += _phase_table(settings, by_category)
    if plots:
        lines += ["## Plots", ""]
    for name, caption in plots:
        lines += [f"- `{name}`: {caption}", "", f"![{name}]({name})", ""]
    return "\n".join(lines).rstrip() + "\n"


def _setting(s: Setting, options: ReportOptions, level: int) -> list[str]:
    seeds = f", seeds {', '.join(map(str, s.seeds))} summed per prompt" if len(s.seeds) > 1 else ""
    out = ["#" * level + f" {s.label}", "",
           f"{len(s.prompt_ids)} of {s.prompts_seen} prompts have every decoder at this setting{seeds}.", ""]
    if not s.prompt_ids:
        return out
    if s.cautions:
        out += ["**Caution: gains marked ⚠ measure the machine, not speculation.**", "",
                *(f"- ⚠ {c.kind}: {c.message}." for c in s.cautions), ""]
    out += _decoder_table(s) + _round_tables(s)
    if s.gains:
        out += [f"| gain | estimate | {options.confidence:.0%} interval | lowest prompt | prompts | caution |",
                "|---|---|---|---|---|---|"]
        for (a, b), g in s.gains.items():
            flags = ", ".join(c.kind for c in s.cautions if c.concerns((a, b))) or "—"
            out.append(f"| {a} over {b} | {_flagged(s, (a, b))}{percent(g.gain)} | {g.interval_text()} | "
                       f"{percent(g.lowest)} | {g.n_prompts} | {flags} |")
        out.append("")
        out += _pass_table(s, options)
    elif len(s.decoders) > 1:
        out += ["No gains: they need at least two complete prompts and a comparison decoder.", ""]
    out += ["Round ms: median target-side round (root + wait + select + tree + commit); phase columns are "
            "medians over rounds, draft on the drafter, concurrent with root.", ROOT_MS, ""] if level == 2 else []
    return out


def _pass_table(s: Setting, options: ReportOptions) -> list[str]:
    """Tokens per target pass of each comparison (the machine's speed aside), on the speed gains' resamples."""
    if not s.pass_gains:
        return []
    out = [f"| tokens per target pass | a | b | a over b | {options.confidence:.0%} interval | prompts |",
           "|---|---|---|---|---|---|"]
    for (a, b), g in s.pass_gains.items():
        out.append(f"| {a} over {b}, per pass | {g.speed_a:.3f} | {g.speed_b:.3f} | {percent(g.gain)} | "
                   f"{g.interval_text()} | {g.n_prompts} |")
    return out + [""]


def _round_tables(s: Setting) -> list[str]:
    """The setting's tables of what rounds did beyond the speeds: budget auto's choices, drafting ahead's hits
    and cut pools' depths, each where a decoder used it."""
    out: list[str] = []
    auto = {d: st for d, st in s.decoders.items() if "auto" in st.budgets}
    if auto:
        sizes = sorted({b for st in auto.values() for b in st.budget_shares()})
        out += ["Budget auto: share of rounds at each tree budget (0: speculation off, a plain round).", "",
                "| decoder | " + " | ".join(map(str, sizes)) + " |", "|" + "---|" * (len(sizes) + 1)]
        for d, st in auto.items():
            shares = st.budget_shares()
            out.append(f"| {d} | " + " | ".join(f"{100 * shares.get(b, 0.0):.0f}%" for b in sizes) + " |")
        out.append("")
    ahead = {d: summary for d, st in s.decoders.items() if (summary := st.ahead_summary())}
    if ahead:
        out += ["Drafting ahead: of the rounds whose pool was predicted, the share that used the pool grown "
                "ahead, and the median drafting such a pool had done before its round asked for it.", "",
                "| decoder | rounds predicted | hit rate | drafting hidden ms |", "|---|---|---|---|"]
        out += [f"| {d} | {a['ahead_tried']} | {100 * a['ahead_hit_rate']:.0f}% | {a['ahead_hidden_ms']:.2f} |"
                for d, a in ahead.items()]
        out.append("")
    cut = {d: summary for d, st in s.decoders.items() if (summary := st.cut_summary())}
    if cut:
        out += ["Cut pools: the mean depth of the pools the rounds verified from (the target asked for each "
                "pool when its root pass was done).", "", "| decoder | rounds | mean pool depth |", "|---|---|---|"]
        out += [f"| {d} | {c['cut_rounds']} | {c['pool_depth_mean']:.2f} |" for d, c in cut.items()]
        out.append("")
    copied = {d: summary for d, st in s.decoders.items() if (summary := st.copied_summary())}
    if copied:
        out += ["Context lookup: the accepted tokens that only a chain copied from the context proposed (candidates "
                "the drafter's pool lacked), and their share of all accepted tokens.", "",
                "| decoder | copied | share |", "|---|---|---|"]
        out += [f"| {d} | {c['copied']} | {100 * c['copied_share']:.0f}% |" for d, c in copied.items()]
        out.append("")
    return out


ROOT_MS = ("Root ms is the same one-token pass for every decoder, but not on the same cores: `ar` and plain "
           "rounds run it on every core the target may use (`--solo-threads`), a root-pass rule on `--threads` "
           "(1 by default) while the drafter drafts beside it. On a quiet machine the two are close; on a loaded "
           "one a pass spread over every core waits at each step for its slowest thread, so `ar`'s root ms can "
           "exceed a root-pass rule's by far (the load caution says when the machine was loaded).")


def _decoder_table(s: Setting) -> list[str]:
    """A setting's row per decoder: speed, its gain over ar, tokens, acceptance and round phases."""
    head = ["decoder", "tok/s", "vs ar", "tokens", "seconds", "τ", "tok/pass", "tree size", "acceptance by depth",
            "round ms"]
    head += [f"{p} ms" for p in PHASES]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d, st in s.decoders.items():
        name = d if st.budgets == [s.budget] or d == "ar" else f"{d} (cap {', '.join(map(str, st.budgets))})"
        ms = phase_ms(st)
        gain = s.gains.get((d, "ar"))
        cells = [name, f"{st.speed:.1f}", "—" if gain is None else _gain(s, (d, "ar"), gain),
                 f"{st.tokens.sum():.0f}", f"{st.seconds.sum():.2f}", f"{st.rounds.tau:.2f}",
                 f"{st.tokens_per_pass:.2f}", f"{st.rounds.mean_tree_size:.2f}" if st.rounds.mean_tree_size else "—",
                 st.acceptance_text(), _ms(ms["round_ms"])]
        cells += [_ms(ms[f"{p}_ms"]) for p in PHASES]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _phase_table(settings: Sequence[Setting], by_category: dict[str, list[Setting]]) -> list[str]:
    """Where a round's time goes: median ms per phase per setting, decoder (and category) and round kind."""
    rows = []
    for s in settings:
        for c in [s, *by_category.get(s.label, [])]:
            for d, st in c.decoders.items():
                for kind, (n, seconds) in (phase_profile(st).items() if c.prompt_ids else ()):
                    rows.append([s.label, c.category or "all", d, f"{kind} ({n})",
                                 *(f"{1000 * x:.2f}" for x in seconds), f"{1000 * seconds[1:].sum():.2f}"])
    if not rows:
        return []
    head = ["setting", "category", "decoder", "rounds", *(f"{p} ms" for p in PHASES), "target ms"]
    return ["## Where a round's time goes", "",
            "Median ms per round of each phase over the rounds of a kind (tree: a budget above 0; plain: none); "
            "draft runs on the drafter beside root, the target's phases follow one another and target ms sums "
            "their medians.", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows), ""]


def _gain(s: Setting, pair: tuple[str, str], g) -> str:
    """A gain and its interval, marked when a caution concerns it."""
    return f"{_flagged(s, pair)}{percent(g.gain)} {g.interval_text()}"


def _flagged(s: Setting, pair: tuple[str, str]) -> str:
    return "⚠ " if any(c.concerns(pair) for c in s.cautions) else ""


def _ms(ms: float | None) -> str:
    return "—" if ms is None else f"{ms:.2f}"
