"""python -m bench.ahead: the drafter's idle halves used, each way against none, side by side per prompt.

Variants of the decoder: `none` (the paper's deployment and the default: the target keeps its cores, the
drafter drafts after each commit), `lend` (`--lend-cores`: a target on the CPU lends the drafter its cores
while it waits for a pool), `ahead` (lending, and `--ahead`: drafting ahead during verification), `cut`
(`--cut-pools`: the pool is asked for once the root pass is done, and has the levels grown by then),
`cut-weigh` (`--cut-pools --cut-weigh`: it grows on while a level pays for its wait), `cut+ahead`
(`--cut-pools --ahead`), and `window-N` and `cut+window-N` (`--drafter-window N`: the drafter starts on the
prompt's last N tokens only, alone or with cut pools). One pair (the embedded default on the CPU unless
--target/--drafter say otherwise) decodes each prompt with `ar`, then with each variant at each budget, in an
order rotated from prompt to prompt, so all see the same machine state. Prints, per budget, the summed speed
of each variant (and over `ar`), the paired per-prompt ratio of each variant over `none` (median and range),
each variant's median wait for the drafter per round, the hit rate and the drafting hidden per hit; and speeds
per prompt group. The load average is printed at the start and the end. The last line of stdout is one JSON
document; `--records FILE` also keeps every timed decode's record, for what the summary does not show (in a new
file: one that exists is refused unless --overwrite).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.common import bench_parser, close, command_line, load_bracket, refuse, spread
from evaluation.paths import refuse_overwrite
from evaluation.prompts import STRATA, PromptError, gather
from evaluation.record import BenchPlace, DecodeRecord
from evaluation.summary import category_group
from pipeline.config import ConfigError, InputError, split_list
from pipeline.settings import DecodeConfig
from programs.options import PromptOptions

VARIANTS = {"none": {"lend_cores": False, "ahead": False}, "lend": {"lend_cores": True, "ahead": False},
            "ahead": {"lend_cores": True, "ahead": True}, "cut": {"cut_pools": True},
            "cut-weigh": {"cut_pools": True, "cut_weigh": True}, "cut+ahead": {"cut_pools": True, "ahead": True}}
WINDOWED = {"window": {}, "cut+window": {"cut_pools": True}}  # NAME-N: with drafter_window N


def variant_settings(name: str) -> dict | None:
    """The decode settings of a variant's name, or None when it names none."""
    if name in VARIANTS:
        return VARIANTS[name]
    base, _, n = name.rpartition("-")
    if base in WINDOWED and n.isdecimal() and n.isascii() and int(n) > 0:
        return {**WINDOWED[base], "drafter_window": int(n)}
    return None


@dataclass(frozen=True, slots=True)
class AheadOptions:
    """Prompts, decodes and variants"""

    prompts: str = field(default="", metadata={
        "help": "a prompt source as the sweep takes it (spec-bench:PATH, humaneval, FILE.jsonl)", "metavar": "SOURCE",
        "required": True})
    limit_prompts: int = field(default=12, metadata={"help": "a subset stratified by category", "metavar": "N"})
    stratify: str = field(default="category", metadata={
        "help": "spread --limit-prompts over categories or over Spec-Bench's groups", "metavar": "category|group"})
    categories: str = field(default="", metadata={
        "help": "only prompts of these categories or Spec-Bench groups (comma-separated)", "metavar": "LIST"})
    decoder: str = field(default="root-draw", metadata={"help": "the decoder every variant runs"})
    budgets: str = field(default="8,auto", metadata={"help": "tree budgets, comma-separated", "metavar": "LIST"})
    temperature: float = field(default=0.0, metadata={"metavar": "T"})
    max_new_tokens: int = field(default=96, metadata={"metavar": "N"})
    target: str = field(default="", metadata={"help": "the pair's target (default: the embedded pair)"})
    drafter: str = field(default="", metadata={"help": "the pair's drafter (default: the embedded pair's)"})
    seed: int = 0
    records: str = field(default="", metadata={
        "help": "also write every timed decode's record to FILE, a new file unless --overwrite (JSON lines, each "
                "with its `bench_budget` and `bench_variant`, null for ar)", "metavar": "FILE"})
    overwrite: bool = field(default=False, metadata={"help": "write over the --records FILE that exists already"})
    variants: str = field(default=",".join(VARIANTS), metadata={
        "help": f"comma-separated, from {','.join(VARIANTS)}, window-N and cut+window-N (none is always run: the "
                "others' baseline)", "metavar": "LIST"})

    def __post_init__(self) -> None:
        if self.stratify not in STRATA:
            raise ConfigError("stratify", f"must be one of {', '.join(STRATA)}, got {self.stratify!r}")
        if unknown := [v for v in self.variant_names if variant_settings(v) is None]:
            raise ConfigError("variants", f"unknown {', '.join(unknown)} (from {', '.join(VARIANTS)}, window-N and "
                                          "cut+window-N, N a positive number of tokens)")
        for budget in self.budget_list:  # every decode's settings checked before the pair starts
            for name in self.variant_names:
                DecodeConfig(self.decoder, self.temperature, budget, self.max_new_tokens, seed=self.seed,
                             **variant_settings(name))

    @property
    def variant_names(self) -> list[str]:
        """The variants run: none first, then the others named, each once."""
        return list(dict.fromkeys(["none"] + [v for v in split_list(self.variants) if v != "none"]))

    @property
    def budget_list(self) -> list[int | str]:
        budgets = [b.strip() for b in self.budgets.split(",")]
        if not all(b == "auto" or (b.isdecimal() and b.isascii() and int(b) > 0) for b in budgets):
            raise ConfigError("budgets", f"takes comma-separated positive integers or auto, got {self.budgets!r}")
        return [b if b == "auto" else int(b) for b in budgets]


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(AheadOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    try:
        prompts = gather(PromptOptions(prompts=(options.prompts,), categories=options.categories,
                                       limit_prompts=options.limit_prompts, stratify=options.stratify), options.seed)
    except (PromptError, ConfigError) as e:
        refuse(__spec__.name, str(e))
    try:
        refuse_overwrite([options.records] if options.records else [], options.overwrite, "--records NEW_FILE")
    except InputError as e:
        refuse(__spec__.name, str(e))
    if options.records and (problem := _unwritable(Path(options.records))):
        refuse(__spec__.name, f"--records {options.records}: {problem}")
    with load_bracket() as load:
        print("load average at start: {:.2f} {:.2f} {:.2f}".format(*load["before"]), file=sys.stderr)
        rows = run(options, prompts)
    summary = summarize(rows, options.budget_list)
    summary.update(decoder=options.decoder, temperature=options.temperature, prompts=len(prompts),
                   max_new_tokens=options.max_new_tokens, load_average=load)
    for line in render(summary):
        print(line)
    close(summary)
    return 0


def run(options: AheadOptions, prompts: list) -> list[dict]:
    """One pair decodes each prompt with ar, then with each variant at each budget, in an order rotated from
    prompt to prompt -> a row of numbers per timed decode (with --records, each record kept too)."""
    from launch.api import Pair

    budgets, variants = options.budget_list, options.variant_names
    pair = Pair(**({"target": options.target} if options.target else {}),
                **({"drafter": options.drafter} if options.drafter else {}))
    rows = []
    with pair, records_file(options) as out:
        def kept(record: DecodeRecord, budget, variant) -> dict:
            if out is not None:
                out.write(json.dumps(record.placed(bench=BenchPlace(budget, variant)).to_json()) + "\n")
                out.flush()
            return _numbers(record)

        settings = dict(temperature=options.temperature, max_new_tokens=options.max_new_tokens, seed=options.seed)
        pair.decode(prompts[0].turns[0], "ar", **settings)  # warm-up, off the record
        pair.decode(prompts[0].turns[0], options.decoder, budget=budgets[0], ahead=True, **settings)
        for i, prompt in enumerate(prompts):
            text, group = prompt.turns[0], category_group(prompt.category)
            run_one = lambda decoder, **kw: pair.decode(  # noqa: E731
                text, decoder, prompt_id=prompt.id, **settings, **kw).record
            rows.append({"prompt": prompt.id, "group": group, "budget": None, "variant": None,
                         **kept(run_one("ar"), None, None)})
            for budget in budgets:
                for k in range(len(variants)):
                    name = variants[(i + k) % len(variants)]
                    rows.append({"prompt": prompt.id, "group": group, "budget": budget, "variant": name,
                                 **kept(run_one(options.decoder, budget=budget, **variant_settings(name)), budget,
                                        name)})
            print(f"{i + 1}/{len(prompts)} {prompt.id}", file=sys.stderr)
    return rows


def records_file(options: AheadOptions) -> contextlib.AbstractContextManager:
    """The --records file opened to write, a new one unless --overwrite (then what it held is replaced), or
    nothing without --records."""
    if not options.records:
        return contextlib.nullcontext()
    return open(options.records, "w" if options.overwrite else "x", encoding="utf-8")


def _unwritable(path: Path) -> str | None:
    """Why the records cannot be written at `path` (None: they can; whether a file there may be written over is
    refuse_overwrite's to say)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return "is not a regular file"
    if not path.parent.is_dir():
        return f"no directory {path.parent}"
    if not os.access(path.parent, os.W_OK):
        return f"directory {path.parent} is not writable"
    return None


def _numbers(record: DecodeRecord) -> dict:
    hits = np.asarray(record.ahead_hits)
    return {"tokens": record.new_tokens, "seconds": record.seconds, "rounds": record.rounds,
            "wait": [float(w) for w, b in zip(record.phase("wait"), record.budgets) if b > 0],
            "tried": int((hits >= 0).sum()), "hits": int((hits == 1).sum()),
            "hidden": [float(s) for s, h in zip(record.ahead_seconds, hits) if h == 1],
            "depths": [int(d) for d, b in zip(record.pool_depths, record.budgets) if b > 0],
            "emitted": [int(a) for a, b in zip(record.accept_lengths, record.budgets) if b > 0]}


def summarize(rows: list[dict], budgets: list) -> dict:
    """Per budget: each variant's speed, its paired ratio over `none` per prompt, waits, hits; per group."""
    out = {"budgets": {}}
    ar = {r["prompt"]: r for r in rows if r["budget"] is None}
    names = list(dict.fromkeys(["none"] + [r["variant"] for r in rows if r["variant"]]))
    for budget in budgets:
        variants = {v: {r["prompt"]: r for r in rows if r["budget"] == budget and r["variant"] == v}
                    for v in names}
        variants = {v: by_prompt for v, by_prompt in variants.items() if by_prompt}
        prompts = sorted(variants["none"])
        entry = {}
        for v, by_prompt in variants.items():
            got = list(by_prompt.values())
            waits = [w for r in got for w in r["wait"]]
            tried = sum(r["tried"] for r in got)
            hidden = [h for r in got for h in r["hidden"]]
            ratio = [_speed([by_prompt[p]]) / _speed([variants["none"][p]]) for p in prompts]
            entry[v] = {
                "tokens_per_second": _speed(got), "over_ar": _speed(got) / _speed(list(ar.values())),
                "over_none_median": spread(ratio)["median"], "over_none_range": [float(min(ratio)), float(max(ratio))],
                "wait_ms_median": 1000 * spread(waits)["median"] if waits else None,
                "hit_rate": sum(r["hits"] for r in got) / tried if tried else None,
                "hidden_ms_median": 1000 * spread(hidden)["median"] if hidden else None,
                "pool_depth_mean": float(np.mean([d for r in got for d in r["depths"]] or [0])),
                "tau": float(np.mean([a for r in got for a in r["emitted"]] or [0]))}
        entry["by_group"] = {}
        for group in sorted({r["group"] for r in rows}):
            mine = [p for p in prompts if variants["none"][p]["group"] == group]
            entry["by_group"][group] = {"prompts": len(mine), "ar": _speed([ar[p] for p in mine]),
                                        **{v: _speed([by_prompt[p] for p in mine])
                                           for v, by_prompt in variants.items()}}
        out["budgets"][str(budget)] = entry
    out["ar_tokens_per_second"] = _speed(list(ar.values()))
    return out


def _speed(rows: list[dict]) -> float:
    return sum(r["tokens"] for r in rows) / sum(r["seconds"] for r in rows)


def render(s: dict) -> list[str]:
    lines = [f"{s['decoder']} at T = {s['temperature']:g}, {s['prompts']} prompts, {s['max_new_tokens']} new tokens; "
             f"ar {s['ar_tokens_per_second']:.2f} tok/s; load average {s['load_average']['before'][0]:.2f} at start, "
             f"{s['load_average']['after'][0]:.2f} at the end"]
    for budget, e in s["budgets"].items():
        width = max(len(v) for v in e if v != "by_group")
        for v, x in e.items():
            if v != "by_group":
                lines.append(f"  B={budget} {v:>{width}}: {x['tokens_per_second']:.2f} tok/s ({x['over_ar']:.3f}x "
                             f"ar; over none per prompt {x['over_none_median']:.3f} [{x['over_none_range'][0]:.3f}, "
                             f"{x['over_none_range'][1]:.3f}]), wait median {_ms(x['wait_ms_median'])} ms, tokens "
                             f"per drafted round {x['tau']:.2f}, pool depth {x['pool_depth_mean']:.1f}, hit rate "
                             f"{_pct(x['hit_rate'])}, hidden per hit {_ms(x['hidden_ms_median'])} ms")
        for group, g in e["by_group"].items():
            lines.append(f"    {group} ({g['prompts']}): ar {g['ar']:.2f} tok/s; "
                         + ", ".join(f"{v} {x / g['ar']:.3f}x" for v, x in g.items() if v not in ("prompts", "ar")))
    return lines


def _ms(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


if __name__ == "__main__":
    sys.exit(main())
