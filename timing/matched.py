"""python -m timing matched DIR [DIR ...]: the root-draw cap that matches pearl's mean tree size.

Appendix D.14's last comparison: the smallest root-draw cap whose mean tree size on the recorded rounds still
reaches pearl's at B = 59 (a round with `available` nodes under X1 gives min(c, available) at cap c, so one
sweep's records give every cap). Prints the launch/pair.sh command of the matched run; the last line of stdout
is one JSON document."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
from collections.abc import Sequence

import numpy as np

from evaluation.record import DecodeRecord
from models.options import ModelOptions
from pipeline.config import InputError, PoolConfig
from pipeline.settings import DecodeConfig
from programs.cli import EXIT_USAGE, files_program, run_files_program, to_argv
from timing import prog
from timing.options import SWEEP_DECODE, MatchedOptions
from timing.record_store import load_records
from timing.report import merged_config

log = logging.getLogger("timing")


def build_parser() -> argparse.ArgumentParser:
    return files_program(prog("matched"), "Find root-draw's cap whose mean tree size matches pearl's and "
                         "print the sweep command that times both at it.", MatchedOptions,
                         ("dirs", dict(nargs="+", metavar="DIR", help="a finished sweep's --out directory")))


def main(argv: list[str] | None = None) -> int:
    return run_files_program(build_parser(), argv, MatchedOptions, lambda ns, options: matched(ns.dirs, options))


def matched(dirs: Sequence[str], options: MatchedOptions) -> int:
    config = merged_config(dirs)
    records = [r for r in load_records(dirs) if not r.warmup and r.setting_budget == options.budget]
    found, failed = {}, {}
    for t in sorted({float(r.temperature) for r in records}):
        try:
            found[t] = match(records, t)
        except InputError as e:
            failed[t] = str(e)
            log.warning("T=%g B=%d: no matched run: %s", t, options.budget, e)
    if not found:
        if failed:
            return EXIT_USAGE
        raise InputError(f"no timed record at B = {options.budget} in {', '.join(dirs)}")
    temperatures = sorted(found)
    base = options.out or dirs[0].rstrip("/") + "-matched"
    commands, caps = [], sorted({m["cap"] for m in found.values()})
    groups = [(temperatures, base)] if len(caps) == 1 else [
        ([t], f"{base}-T{t:g}") for t in temperatures]  # one cap per run: one run per temperature
    for ts, out in groups:
        commands.append(command(config, ts, options.budget, found[ts[0]]["cap"], options.num_seeds, out))
    for t, m in found.items():
        print(f"T={t:g} B={options.budget}: pearl's mean tree size {m['pearl_mean']:.2f} over {m['prompts']} "
              f"prompts; root-draw's {m['root_draw_mean']:.2f} at {options.budget} (estimated "
              f"{m['estimate_at_budget']:.2f}); cap {m['cap']} gives {m['mean_at_cap']:.2f}"
              + ("" if m["cap"] <= options.budget else
                 f" (above {options.budget}: root-draw's trees are the smaller ones)"))
    for c in commands:
        print(c)
    print(json.dumps({"budget": options.budget, "temperatures": {f"{t:g}": m for t, m in found.items()},
                      "unmatched": {f"{t:g}": why for t, why in failed.items()}, "commands": commands}))
    return 0


def match(records: Sequence[DecodeRecord], temperature: float) -> dict:
    """Pearl's and root-draw's mean tree sizes at one temperature and the smallest matching cap.
    Uses the prompts that have both decoders for every seed recorded; raises InputError when a decoder is missing or
    root-draw's records lack the pool count under X1."""
    at = [r for r in records if float(r.temperature) == temperature]
    by = {d: [r for r in at if r.decoder == d] for d in ("pearl", "root-draw")}
    for d, rs in by.items():
        if not rs:
            raise InputError(f"no {d} records")
    keys = {d: {(r.prompt_id, r.seed) for r in rs} for d, rs in by.items()}
    both = keys["pearl"] & keys["root-draw"]
    if not both:
        raise InputError("no prompt has both pearl and root-draw")
    pearl = np.array([t for r in by["pearl"] if (r.prompt_id, r.seed) in both for t in r.tree_sizes], float)
    rd = [r for r in by["root-draw"] if (r.prompt_id, r.seed) in both]
    if any(0 in r.available for r in rd):
        raise InputError("root-draw's records lack `available` (pool nodes under and including the drawn first "
                         "token per round), which the estimate needs; sweep again with a runtime that records it")
    available = np.array([a for r in rd for a in r.available], np.int64)
    sizes = np.array([t for r in rd for t in r.tree_sizes], float)
    target = float(pearl.mean())
    caps = np.arange(1, int(available.max()) + 1)
    means = np.minimum(caps[:, None], available[None, :]).mean(axis=1)  # (caps,)
    reach = np.flatnonzero(means >= target - 1e-9)
    if len(reach) == 0:
        raise InputError(f"root-draw's trees hold {means[-1]:.2f} nodes even uncapped, below pearl's {target:.2f}")
    cap = int(caps[reach[0]])
    budget = int(rd[0].budget)  # what root-draw ran with (its setting's B unless overridden)
    return {"pearl_mean": target, "root_draw_mean": float(sizes.mean()),
            "estimate_at_budget": float(np.minimum(budget, available).mean()), "cap": cap,
            "mean_at_cap": float(means[cap - 1]), "prompts": len({p for p, _ in both}), "rounds": len(available)}


def command(config: dict, temperatures: Sequence[float], budget: int, cap: int, num_seeds: int, out: str) -> str:
    """The launch/pair.sh sweep command timing pearl at `budget` and root-draw at `cap` with the first
    sweep's models, pool, prompts, output limit and drafting options."""
    models, sweep = config["models"], config["sweep"]
    target = ModelOptions(**models["target"])
    drafter = ModelOptions(**models["drafter"]) if models.get("drafter") else None
    argv = ["launch/pair.sh", "sweep", "--target", target.model, "--drafter", drafter.model if drafter else "SPEC"]
    starts = config.get("starts") or [{}]
    visible = starts[-1].get("cuda_visible_devices") or {}
    if visible.get("target") is not None and visible.get("drafter") is not None:
        gpus = visible["target"] if visible["target"] == visible["drafter"] else f"{visible['target']},{visible['drafter']}"
        argv += ["--gpus", gpus]
    else:
        argv += ["--target-device", target.device, "--drafter-device", drafter.device if drafter else "cpu"]
    argv += _changed(target, ModelOptions(), skip=("model", "device", "retune", "retime"))  # the launcher gives both sides these
    argv += to_argv(PoolConfig(**config["pool"]), prefix="pool-")
    for source in sweep["prompts"]:
        argv += ["--prompts", source]
    if sweep.get("categories"):
        argv += ["--categories", sweep["categories"]]
    if sweep.get("stratify", "category") != "category":
        argv += ["--stratify", sweep["stratify"]]
    if sweep.get("turns", "first") != "first":
        argv += ["--turns", sweep["turns"]]
    carried = {name: sweep[name] for name in SWEEP_DECODE if name in sweep}  # the sweep's decode settings
    argv += _changed(DecodeConfig(**carried), DecodeConfig(), skip=("max_new_tokens", "seed"))  # given below
    argv += ["--limit-prompts", str(sweep["limit_prompts"]), "--decoders", "pearl,root-draw",
             "--temperatures", ",".join(f"{t:g}" for t in temperatures), "--budgets", str(budget),
             "--budget-overrides", f"root-draw@{budget}={cap}", "--max-new-tokens", str(sweep["max_new_tokens"]),
             "--seed", str(sweep["seed"]), "--num-seeds", str(num_seeds), "--warmup", str(sweep["warmup"]),
             *(["--greedy-repeats", str(sweep["greedy_repeats"])] if sweep.get("greedy_repeats", 1) > 1 else []),
             "--out", out]
    return shlex.join(argv) + ("" if drafter else "   # SPEC: the drafter was not recorded in config.json")


def _changed(options, default, skip: tuple[str, ...]) -> list[str]:
    """to_argv of `options`, keeping only fields that differ from `default`."""
    argv = []
    for f in dataclasses.fields(options):
        if f.name not in skip and getattr(options, f.name) != getattr(default, f.name):
            argv += to_argv(options, skip=tuple(g.name for g in dataclasses.fields(options) if g.name != f.name))
    return argv
