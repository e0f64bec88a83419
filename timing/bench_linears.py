"""The CPU target's passes with torch's stock linear kernels and with the kernels tuned at load, side by side.

python -m timing.bench_linears [--context 40] [--trees 8,59] [--reps 15] [--threads 1] [--kernels LIST]

Loads the default pair's target, tunes its linear layers (models.cpu_linear: prints the choice and the seconds
it took), then times its root pass and tree passes of each size in --trees, each repetition once with every
layer on the stock kernel (`stock_kernels`) and once tuned, in turn and either first in alternate
repetitions, so that drift on a shared machine falls on both alike. --kernels offers the tuning fewer kernels
(say stock,transposed), to see what a smaller set of weight copies gives up. The kernels are timed here
every time, never taken from the machine's kept choice. A speedup is the median of the
per-repetition ratios stock / tuned, with its quartiles. The load average is printed before and after; the
last line of the output is one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time

import numpy as np
import torch

from models.cpu_linear import available, copies_bytes, stock_kernels, tune
from models.hf import CPU_BUCKETS
from models.load import load
from models.options import ModelOptions
from timing.bench_context import at_least, load_average, paired_ratios, sizes, spread, target_passes


def measure(context: int, trees: list[int], reps: int, kernels: list[str] | None = None
            ) -> tuple[dict, dict, float, int]:
    """-> (kernel choice, (pass, "stock" | "tuned") -> seconds of each repetition, seconds the tuning took,
    bytes of the weight copies it added)."""
    loaded = load(ModelOptions(tune_linears=False), "target")
    t0 = time.perf_counter()
    choice = tune(loaded.model, kernels)
    tune_seconds = time.perf_counter() - t0
    capacity = context + max(trees) + 8
    passes = target_passes(loaded.model, context, capacity, "eager", trees)

    def timed(fn, stock: bool) -> float:
        with stock_kernels(loaded.model) if stock else contextlib.nullcontext():  # entered before the clock
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

    for fn in passes.values():  # warm-up
        for stock in (True, False):
            timed(fn, stock), timed(fn, stock)
    times = {(name, kind): [] for name in passes for kind in ("stock", "tuned")}
    for rep in range(reps):
        for name, fn in passes.items():
            for kind in (("stock", "tuned") if rep % 2 == 0 else ("tuned", "stock")):  # either first in turn
                times[(name, kind)].append(timed(fn, kind == "stock"))
    return choice, times, tune_seconds, copies_bytes(loaded.model)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m timing.bench_linears", description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=40, help="tokens of context before the passes")
    parser.add_argument("--trees", default="8,59", help="tree pass sizes, comma-separated")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, while tuning and timing")
    parser.add_argument("--kernels", default=",".join(available()),
                        help="the kernels tuning may choose from, comma-separated (stock is always among them)")
    args = parser.parse_args()
    kernels = ["stock", *(k for k in dict.fromkeys(args.kernels.split(",")) if k != "stock")]
    if any(k not in available() for k in kernels):
        parser.error(f"--kernels must name kernels from {','.join(available())}, got {args.kernels!r}")
    trees = sizes(parser, "--trees", args.trees, 1, CPU_BUCKETS[-1])
    at_least(parser, ("--context", args.context, 2), ("--reps", args.reps, 1), ("--threads", args.threads, 1))
    torch.set_num_threads(args.threads)
    before = load_average()
    print(f"load average before: {before}, {args.threads} thread(s), {os.cpu_count()} cores")
    choice, times, tune_seconds, copies = measure(args.context, trees, args.reps, kernels)
    after = load_average()
    print(f"tuned in {tune_seconds:.1f} s, {copies / 2**20:.0f} MiB of weight copies: {choice or 'every shape stock'}")
    print(f"median ms [quartiles] over {args.reps} repetitions at {args.context} tokens of context; speedup "
          f"stock / tuned per repetition")
    results = {}
    for name in dict.fromkeys(k[0] for k in times):
        stock, tuned = times[(name, "stock")], times[(name, "tuned")]
        ms = {kind: spread(1e3 * np.asarray(times[(name, kind)])) for kind in ("stock", "tuned")}
        speedup = paired_ratios(tuned, stock)
        results[name] = {"ms": ms, "speedup": speedup}
        print(f"  {name:<16} stock {ms['stock']['median']:7.1f} [{ms['stock']['q1']:6.1f},{ms['stock']['q3']:6.1f}]"
              f"  tuned {ms['tuned']['median']:7.1f} [{ms['tuned']['q1']:6.1f},{ms['tuned']['q3']:6.1f}]"
              f"  speedup {speedup['median']:.3f} [{speedup['q1']:.3f}, {speedup['q3']:.3f}]")
    print(f"load average after: {after}")
    print(json.dumps({"context": args.context, "threads": args.threads, "reps": args.reps, "kernels": kernels,
                      "choice": choice,
                      "tune_seconds": tune_seconds, "copies_bytes": copies, "passes": results,
                      "load_average": {"before": before, "after": after}}))


if __name__ == "__main__":
    main()
