"""python -m bench.linears: the CPU target's passes with torch's stock linear kernels and with those tuned at load.

python -m bench.linears [--context 40] [--trees 8,59] [--reps 15] [--threads 1] [--kernels LIST]

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
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from bench.common import at_least, bench_parser, close, command_line, ints, load_bracket, paired_ratios, spread
from models.options import CPU_BUCKETS
from pipeline.config import ConfigError, split_list


def available() -> list[str]:
    from models.cpu_linear import available

    return available()


@dataclass(frozen=True, slots=True)
class LinearsOptions:
    """Passes"""

    context: int = field(default=40, metadata={"help": "tokens of context before the passes"})
    trees: tuple[int, ...] = field(default=(8, 59), metadata={
        "help": "tree pass sizes, comma-separated", "parse": "ints", "metavar": "B,B"})
    reps: int = field(default=15, metadata={"help": "repetitions of every pass, both ways"})
    threads: int = field(default=1, metadata={"help": "torch threads, while tuning and timing"})
    kernels: str = field(default="", metadata={
        "help": "the kernels tuning may choose from, comma-separated (stock is always among them; default: every "
                "kernel available)", "metavar": "LIST"})

    def __post_init__(self) -> None:
        ints("trees", self.trees, 1, CPU_BUCKETS[-1])
        at_least("context", self.context, 2)
        at_least("reps", self.reps, 1)
        at_least("threads", self.threads, 1)
        if self.kernels and any(k not in available() for k in self.kernel_list):  # torch loads only then
            raise ConfigError("kernels", f"must name kernels from {','.join(available())}, got {self.kernels!r}")

    @property
    def kernel_list(self) -> list[str]:
        """stock, then the other kernels named (all available ones by default), each once."""
        named = split_list(self.kernels) if self.kernels else available()
        return ["stock", *(k for k in dict.fromkeys(named) if k != "stock")]


def measure(context: int, trees: list[int], reps: int, kernels: list[str] | None = None
            ) -> tuple[dict, dict, float, int]:
    """-> (kernel choice, (pass, "stock" | "tuned") -> seconds of each repetition, seconds the tuning took,
    bytes of the weight copies it added)."""
    import contextlib

    from bench.passes import target_passes
    from models.cpu_linear import copies_bytes, stock_kernels, tune
    from models.load import load
    from models.options import ModelOptions

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


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(LinearsOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    import torch

    torch.set_num_threads(options.threads)
    with load_bracket() as load:
        print(f"load average before: {load['before']}, {options.threads} thread(s), {os.cpu_count()} cores")
        choice, times, tune_seconds, copies = measure(options.context, list(options.trees), options.reps,
                                                      options.kernel_list)
    print(f"tuned in {tune_seconds:.1f} s, {copies / 2**20:.0f} MiB of weight copies: {choice or 'every shape stock'}")
    print(f"median ms [quartiles] over {options.reps} repetitions at {options.context} tokens of context; speedup "
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
    print(f"load average after: {load['after']}")
    close({"context": options.context, "threads": options.threads, "reps": options.reps,
           "kernels": options.kernel_list, "choice": choice,
           "tune_seconds": tune_seconds, "copies_bytes": copies, "passes": results,
           "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
