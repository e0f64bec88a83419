"""python -m bench.forward: what does a round's target pass cost, and where does its time go?

Its results: results/cpu-smollm2-forward.txt (results/kernels.md); it backs DESIGN.md section 7's lean
forward (`python -m bench.forward` times both side by side), and --parts where a pass's time goes
(models.llama_cpu's clock).

Times the default pair's target (its linear kernels tuned or kept) on its root pass and tree passes of each
size in --trees, each repetition once through transformers' forward and once through models.llama_cpu's, in turn,
each way on its own cache; the rows of every pass must be equal. A speedup is the median of the per-repetition
ratios transformers / lean, with its quartiles. --parts profiles the lean passes instead: the median ms of each
part as models.llama_cpu.forward's clock names them, the runner's staging and what is left, beside the plain
pass's (under `taskset -c 0` and --threads 1 for a machine with half the arithmetic). The load average is printed
before and after; the last line of the output is one JSON document."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.common import bench_parser, close, command_line, ints, load_bracket, paired_ratios, spread
from models.kernel_cache import usable_cpus
from models.options import CPU_BUCKETS
from pipeline.config import check_int
from pipeline.tree import Tree


@dataclass(frozen=True, slots=True)
class ForwardOptions:
    """Passes"""

    context: int = field(default=40, metadata={"help": "tokens of context before the passes"})
    trees: tuple[int, ...] = field(default=(8, 59), metadata={
        "help": "tree pass sizes, comma-separated", "parse": "ints", "metavar": "B,B"})
    reps: int = field(default=15, metadata={"help": "repetitions of every pass, both ways"})
    threads: int = field(default=1, metadata={"help": "torch threads"})
    parts: bool = field(default=False, metadata={"help": "profile the lean passes part by part"})

    def __post_init__(self) -> None:
        ints("trees", self.trees, 1, CPU_BUCKETS[-1])
        check_int("context", self.context, 2)
        check_int("reps", self.reps, 1)
        check_int("threads", self.threads, 1)


def bushy_tree(n: int) -> Tree:
    """A tree of `n` nodes: four children of the root, then three children of each node in turn."""
    parent = np.array([-1 if i < 4 else (i - 4) // 3 for i in range(n)])
    return Tree(100 + np.arange(n), parent, np.arange(n))


def target_passes(model, context: int, capacity: int, trees: list[int], lean: bool,
                  tick: Callable[[str], None] | None = None) -> dict[str, Callable[[], object]]:
    """name -> a call that runs one pass of an eager CPU runner (every size its own bucket, the used slots) after
    `context` random tokens, reads its result back (the pass is done when it returns) and returns its rows (valid until
    the runner's next pass): the root pass and a tree pass over bushy_tree(B) for each B of `trees`. lean: through
    models.llama_cpu's forward, else transformers'; tick: the runner's profile clock (models.hf.HFRunner.tick)."""
    from models.hf import HFRunner
    from target_proc.target import Target

    ids = np.random.default_rng(context).integers(100, 40000, context).tolist()
    target = Target(HFRunner(model, capacity, graphs=False, buckets=CPU_BUCKETS, attend="used", lean=lean))
    target.runner.tick = tick
    target.prefill(ids[:-1])
    target.root_pass(ids[-1])  # the root's K/V in slot P: tree passes below hang off it

    def read(rows):
        float(rows.reshape(-1)[0])  # a host read: the pass is done
        return rows

    passes = {"root pass": lambda: read(target.root_pass(ids[-1]))}
    for b in trees:
        tree = bushy_tree(b)
        passes[f"tree pass B={b}"] = lambda tree=tree: read(target.tree_pass(tree, None))
    return passes


def measure(context: int, trees: list[int], reps: int) -> tuple[dict, bool]:
    """-> ((pass, "transformers" | "lean") -> seconds of each repetition, whether every pass's rows were equal)."""
    import torch

    from models.load import load
    from models.options import ModelOptions

    loaded = load(ModelOptions(), "target")
    capacity = context + max(trees) + 8
    ways = {way: target_passes(loaded.model, context, capacity, trees, lean=way == "lean")
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


class PartClock:
    """Milliseconds of each part of one pass: called with a part's name as it ends (models.llama_cpu.forward's
    tick, models.hf's staging); `start` before the pass, `end` after it (what is left: Python, the host read)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.last = 0.0

    def start(self) -> None:
        self.ms, self.last = {}, time.perf_counter()

    def __call__(self, part: str) -> None:
        now = time.perf_counter()
        self.ms[part] = self.ms.get(part, 0.0) + 1e3 * (now - self.last)
        self.last = now

    def end(self) -> dict[str, float]:
        self(LEFT)
        return self.ms


LEFT = "Python and the host read"


def profile(context: int, trees: list[int], reps: int) -> dict[str, dict[str, list[float]]]:
    """-> pass name -> part -> milliseconds of each repetition, the lean passes in turn each repetition."""
    from models.load import load
    from models.options import ModelOptions

    loaded = load(ModelOptions(), "target")
    clock = PartClock()
    passes = target_passes(loaded.model, context, context + max(trees) + 8, trees, lean=True, tick=clock)
    out: dict[str, dict[str, list[float]]] = {name: {} for name in passes}
    for rep in range(reps + 1):  # the first a warm-up
        for name in (list(passes) if rep % 2 == 0 else list(reversed(passes))):
            clock.start()
            passes[name]()
            for part, ms in clock.end().items():
                if rep:
                    out[name].setdefault(part, []).append(ms)
    return out


def print_profile(times: dict[str, dict[str, list[float]]]) -> dict:
    """The table of median milliseconds per part and pass, each beside the plain pass's -> the JSON figures."""
    from models.hf import MASK
    from models.llama_cpu import PARTS

    names = list(times)
    parts = [*PARTS, MASK, LEFT]
    med = {n: {p: float(np.median(times[n].get(p, [0.0]))) for p in parts} for n in names}
    total = {n: float(np.median(np.sum([times[n][p] for p in times[n]], axis=0))) for n in names}
    print(f"median ms per part; in brackets, times the root pass's ({names[0]})")
    print(f"  {'part':<38}" + "".join(f"{n:>22}" for n in names))
    for p in [*parts, "whole pass"]:
        row = (lambda n: total[n]) if p == "whole pass" else (lambda n, p=p: med[n][p])
        base = row(names[0]) or float("nan")
        print(f"  {p:<38}" + "".join(f"{row(n):10.2f} [{row(n) / base:5.2f}x]    " for n in names))
    return {"median_ms": med, "whole_ms": total}


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(ForwardOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    import torch

    from evaluation.machine import device_words
    from evaluation.provenance import environment

    torch.set_num_threads(options.threads)
    cpu = device_words(environment(), "cpu")  # the CPU as a run's header names it: model, vector width, cores
    with load_bracket() as load:
        print(f"load average before: {load['before']}, {options.threads} thread(s), {usable_cpus()} CPUs, {cpu}")
        if options.parts:
            figures = {"parts": print_profile(profile(options.context, list(options.trees), options.reps))}
        else:
            figures = print_ways(*measure(options.context, list(options.trees), options.reps), options.reps,
                                 options.context)
    print(f"load average after: {load['after']}")
    close({"context": options.context, "threads": options.threads, "reps": options.reps, **figures,
           "cpu": cpu, "load_average": load})
    return 0


def print_ways(times: dict, equal: bool, reps: int, context: int) -> dict:
    """The table of both forwards' passes -> the JSON figures."""
    print(f"rows of every pass equal both ways: {equal}")
    print(f"median ms [quartiles] over {reps} repetitions at {context} tokens of context; speedup "
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
    return {"equal": equal, "passes": results}


if __name__ == "__main__":
    sys.exit(main())
