"""python -m bench.forward: the CPU target's passes through transformers' forward and through models.llama_cpu's.

python -m bench.forward [--context 40] [--trees 8,59] [--reps 15] [--threads 1]

Loads the default pair's target as a run does (its linear kernels tuned, or taken from the machine's kept
choice), then times its root pass and tree passes of each size in --trees, each repetition once through
transformers' forward and once through models.llama_cpu's (what the runner takes on the CPU), in turn and
either first in alternate repetitions, so that drift on a shared machine falls on both alike; each way has
its own cache, filled by the same prefill. The rows of every pass are compared too: the two forwards compute
the same operations in the same order, so they must be equal. A speedup is the median of the per-repetition
ratios transformers / lean, with its quartiles. The load average is printed before and after; the last line
of the output is one JSON document.
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


@dataclass(frozen=True, slots=True)
class ForwardOptions:
    """Passes"""

    context: int = field(default=40, metadata={"help": "tokens of context before the passes"})
    trees: tuple[int, ...] = field(default=(8, 59), metadata={
        "help": "tree pass sizes, comma-separated", "parse": "ints", "metavar": "B,B"})
    reps: int = field(default=15, metadata={"help": "repetitions of every pass, both ways"})
    threads: int = field(default=1, metadata={"help": "torch threads"})

    def __post_init__(self) -> None:
        ints("trees", self.trees, 1, CPU_BUCKETS[-1])
        at_least("context", self.context, 2)
        at_least("reps", self.reps, 1)
        at_least("threads", self.threads, 1)


def measure(context: int, trees: list[int], reps: int) -> tuple[dict, bool]:
    """-> ((pass, "transformers" | "lean") -> seconds of each repetition, whether every pass's rows were equal)."""
    import torch

    from bench.passes import target_passes
    from models.load import load
    from models.options import ModelOptions

    loaded = load(ModelOptions(), "target")
    capacity = context + max(trees) + 8
    ways = {way: target_passes(loaded.model, context, capacity, "eager", trees, lean=way == "lean")
            for way in ("transformers", "lean")}
    equal = True
    for name in ways["lean"]:  # warm-up, and the rows compared
        rows = {way: ways[way][name]() for way in ways}
        equal &= bool(torch.equal(rows["transformers"], rows["lean"]))
        ways["transformers"][name](), ways["lean"][name]()
    times = {(name, way): [] for name in ways["lean"] for way in ways}
    for rep in range(reps):
        for name in ways["lean"]:
            for way in (("transformers", "lean") if rep % 2 == 0 else ("lean", "transformers")):
                t = time.perf_counter()
                ways[way][name]()
                times[(name, way)].append(time.perf_counter() - t)
    return times, equal


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(ForwardOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    import torch

    torch.set_num_threads(options.threads)
    with load_bracket() as load:
        print(f"load average before: {load['before']}, {options.threads} thread(s), {os.cpu_count()} cores")
        times, equal = measure(options.context, list(options.trees), options.reps)
    print(f"rows of every pass equal both ways: {equal}")
    print(f"median ms [quartiles] over {options.reps} repetitions at {options.context} tokens of context; speedup "
          f"transformers / lean per repetition")
    results = {}
    for name in dict.fromkeys(k[0] for k in times):
        ms = {way: spread(1e3 * np.asarray(times[(name, way)])) for way in ("transformers", "lean")}
        speedup = paired_ratios(times[(name, "lean")], times[(name, "transformers")])
        results[name] = {"ms": ms, "speedup": speedup}
        print(f"  {name:<16} transformers {ms['transformers']['median']:7.1f} "
              f"[{ms['transformers']['q1']:6.1f},{ms['transformers']['q3']:6.1f}]"
              f"  lean {ms['lean']['median']:7.1f} [{ms['lean']['q1']:6.1f},{ms['lean']['q3']:6.1f}]"
              f"  speedup {speedup['median']:.3f} [{speedup['q1']:.3f}, {speedup['q3']:.3f}]")
    print(f"load average after: {load['after']}")
    close({"context": options.context, "threads": options.threads, "reps": options.reps, "equal": equal,
           "passes": results, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
