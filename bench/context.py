"""python -m bench.context: how pass costs grow with the context on the CPU, and what a captured GPU pass reads.

python -m bench.context [--contexts 40,2000] [--trees 8,59] [--reps 9] [--threads 1]
                        [--paths eager[,ladder,whole]] [--capacity N] [--model-only]

Times, at each context: the target's one-token (root) pass, its tree passes of each size in --trees
(bushy trees over the root, bench.passes) and a drafter step of the int8 drafter: committing three tokens
and growing a full CPU pool (models.options.EMBEDDED_POOL). Every pass of every context and path is timed
once per repetition, in turn, so that drift on a shared machine falls on all of them alike; a ratio is the
median of the per-repetition ratios last context / first context, with its quartiles. Paths (bench.passes.PATHS)
are the runner's ways of running a pass, all eager on the CPU: the CPU's own (exact sizes, over the used
slots), and a GPU's, padded to the CUDA buckets, over the span ladder's span or over the whole cache (as
captured graphs attended before the ladder); with two or more, each path after the first is also compared
with the first, pass by pass, at each context (paired per repetition). --capacity sets the caches' logical
slots (what the whole cache and the ladder's spans are made of).
Then the model of bench.pass_bytes for a captured pass of Llama-3.1-8B shapes at 8k and 32k capacity, and for
the eager CPU passes timed here (what the context adds to a memory-bound and to a compute-bound pass). The load
average is printed before and after. The last line of the output is one JSON document.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from bench.common import at_least, bench_parser, close, command_line, ints, load_bracket, names, paired_ratios, spread
from bench.passes import PATHS, least_capacity
from models.options import CPU_BUCKETS
from pipeline.config import ConfigError, split_list

GPU_SHAPE, GPU_CAPACITIES, GPU_ROWS = "llama-3.1-8b", (8192, 32768), (1, 72)
GPU_CONTEXTS = (512, 2048, 8000, 30000)  # committed tokens of the byte model's passes (those within capacity)
CPU_SHAPE = "smollm2-135m"


@dataclass(frozen=True, slots=True)
class ContextOptions:
    """Contexts and passes"""

    contexts: tuple[int, ...] = field(default=(40, 2000), metadata={
        "help": "context lengths, comma-separated", "parse": "ints", "metavar": "N,N"})
    trees: tuple[int, ...] = field(default=(8, 59), metadata={
        "help": "tree pass sizes (59: budget auto's largest by default)", "parse": "ints", "metavar": "B,B"})
    reps: int = field(default=9, metadata={"help": "repetitions of every pass"})
    threads: int = field(default=1, metadata={"help": "torch threads of every pass"})
    paths: str = field(default="eager", metadata={"help": f"runner paths: {', '.join(PATHS)}", "metavar": "LIST"})
    capacity: int = field(default=0, metadata={
        "help": "logical KV slots of every cache (0: what the largest context needs)"})
    model_only: bool = field(default=False, metadata={"help": "print the GPU byte model alone"})

    def __post_init__(self) -> None:
        contexts = tuple(sorted(set(ints("contexts", self.contexts, 2))))
        if len(contexts) < 2:
            raise ConfigError("contexts", f"needs two or more different lengths, got "
                                          f"{','.join(map(str, self.contexts))!r}")
        object.__setattr__(self, "contexts", contexts)  # ascending: the ratios are last over first
        ints("trees", self.trees, 1, CPU_BUCKETS[-1])
        names("paths", self.paths, tuple(PATHS))
        at_least("reps", self.reps, 1)
        at_least("threads", self.threads, 1)
        least = least_capacity(list(contexts), list(self.trees))
        if self.capacity and self.capacity < least:
            raise ConfigError("capacity", f"{self.capacity} cannot hold {contexts[-1]} tokens and the largest pass: "
                                          f"at least {least}")

    @property
    def slots(self) -> int:
        """The caches' logical slots."""
        return self.capacity or least_capacity(list(self.contexts), list(self.trees))


def measure(contexts: list[int], trees: list[int], paths: list[str], reps: int, capacity: int) -> dict:
    """(path, pass, context) -> seconds of each repetition."""
    from bench.passes import drafter_step, target_passes
    from models.load import load
    from models.options import ModelOptions

    target_model = load(ModelOptions(), "target").model
    drafter_model = load(ModelOptions(model="smollm2:int8"), "drafter").model
    calls = {}
    for path in paths:
        for c in contexts:
            for name, fn in {**target_passes(target_model, c, capacity, path, trees),
                             **drafter_step(drafter_model, c, capacity, path)}.items():
                calls[(path, name, c)] = fn
    for fn in calls.values():  # warm-up
        fn(), fn()
    times = {key: [] for key in calls}
    for _ in range(reps):
        for key, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    return times


def compare_paths(times: dict, paths: list[str], contexts: list[int]) -> dict:
    """path -> pass -> context -> spread of the per-repetition ratios path / paths[0] (paths after the first)."""
    out = {}
    for path in paths[1:]:
        passes = dict.fromkeys(k[1] for k in times if k[0] == path)
        out[path] = {name: {c: paired_ratios(times[(paths[0], name, c)], times[(path, name, c)]) for c in contexts}
                     for name in passes}
    return out


def gpu_model() -> dict:
    """Bytes a captured pass of GPU_SHAPE reads at each capacity (bf16), from bench.pass_bytes: over the whole
    cache, and after each of GPU_CONTEXTS tokens over the span that covers them."""
    from bench.pass_bytes import captured_pass_bytes

    out = {}
    for cap in GPU_CAPACITIES:
        for rows in GPU_ROWS:
            for context in (None, *(c for c in GPU_CONTEXTS if c + rows < cap)):
                b = captured_pass_bytes(GPU_SHAPE, cap, rows, context=context)
                at = "whole cache" if context is None else f"{context} tokens"
                out[f"{cap} capacity, {rows} rows, {at}"] = {
                    "slots": b.slots, "weights_gb": b.weights / 1e9, "kv_gb": b.kv / 1e9, "mask_gb": b.mask / 1e9,
                    "kv_over_weights": b.kv_over_weights}
    return out


def cpu_model(contexts: list[int]) -> dict:
    """Per context, what an eager pass of the default pair's target (float32) adds over no context at all:
    K/V bytes over weight bytes (a memory-bound one-token pass) and attention over weight multiply-adds
    (a compute-bound large tree)."""
    from bench.pass_bytes import attention_flop_share, pass_bytes
    from models.hf import covering_span

    out = {}
    for c in contexts:
        span = covering_span(c + 1)  # the used slots rounded up, as models.hf reads them
        b = pass_bytes(CPU_SHAPE, span, itemsize=4)
        out[c] = {"span": span, "kv_over_weights": b.kv_over_weights,
                  "attention_flop_share": attention_flop_share(CPU_SHAPE, span)}
    return out


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(ContextOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    gpu, cpu = byte_models(options)
    if options.model_only:
        close({"gpu_model": gpu, "cpu_model": cpu})
        return 0
    import torch

    torch.set_num_threads(options.threads)
    paths = split_list(options.paths)
    with load_bracket() as load:
        print(f"load average before: {load['before']}, {options.threads} thread(s), {os.cpu_count()} cores")
        times = measure(list(options.contexts), list(options.trees), paths, options.reps, options.slots)
    results, compared = report(times, options, paths)
    print(f"load average after: {load['after']}")
    close({"contexts": list(options.contexts), "threads": options.threads, "reps": options.reps,
           "capacity": options.slots, "passes": results, "paths_over_first": compared,
           "load_average": load, "gpu_model": gpu, "cpu_model": cpu})
    return 0


def byte_models(options: ContextOptions) -> tuple[dict, dict]:
    """The GPU and CPU byte models, printed."""
    gpu = gpu_model()
    print(f"captured pass of {GPU_SHAPE} (bf16): it attends over the smallest captured span covering the context")
    for name, g in gpu.items():
        print(f"  {name:<41} slots {g['slots']:6d}  weights {g['weights_gb']:6.2f} GB  K/V {g['kv_gb']:5.2f} GB "
              f"({100 * g['kv_over_weights']:4.1f}% of weights)  mask {g['mask_gb']:5.3f} GB")
    cpu = cpu_model(list(options.contexts))
    print(f"eager pass of {CPU_SHAPE} (float32) over the used slots rounded up: what the context adds")
    for c, m in cpu.items():
        print(f"  {c:6d} tokens, span {m['span']:5d}: K/V {100 * m['kv_over_weights']:5.1f}% of weight bytes, "
              f"attention {100 * m['attention_flop_share']:5.1f}% of weight multiply-adds")
    return gpu, cpu


def report(times: dict, options: ContextOptions, paths: list[str]) -> tuple[dict, dict]:
    """Each path's passes at each context and their ratio last / first, and the paths compared, printed."""
    lo, hi = options.contexts[0], options.contexts[-1]
    results = {}
    print(f"\nmedian ms [quartiles] over {options.reps} repetitions, {options.slots} slots a cache; ratio {hi}/{lo} "
          f"per repetition")
    for path in paths:
        print(f"path {path}")
        for name in dict.fromkeys(k[1] for k in times if k[0] == path):
            row = {c: spread(1e3 * np.asarray(times[(path, name, c)])) for c in options.contexts}
            ratio = paired_ratios(times[(path, name, lo)], times[(path, name, hi)])
            results[f"{path}: {name}"] = {"ms": row, f"ratio_{hi}_{lo}": ratio}
            cells = "".join(f"{c:>6}: {r['median']:7.1f} [{r['q1']:6.1f},{r['q3']:6.1f}]" for c, r in row.items())
            print(f"  {name:<16}{cells}   ratio {ratio['median']:.3f} [{ratio['q1']:.3f}, {ratio['q3']:.3f}]")
    compared = compare_paths(times, paths, list(options.contexts))
    for path, by_pass in compared.items():
        print(f"{path} over {paths[0]}, per repetition")
        for name, by_context in by_pass.items():
            cells = "".join(f"{c:>6}: {r['median']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}]" for c, r in by_context.items())
            print(f"  {name:<16}{cells}")
    return results, compared


if __name__ == "__main__":
    sys.exit(main())
