"""How pass costs grow with the context, on the CPU default pair; and what a captured GPU pass reads.

python -m timing.bench_context [--contexts 40,2000] [--trees 8,59] [--reps 9] [--threads 1]
                               [--paths eager[,ladder,whole]] [--capacity N]

Times, at each context: the target's one-token (root) pass, its tree passes of each size in --trees
(bushy trees over the root, as in timing.bench_pair) and a drafter step of the int8 drafter: committing
three tokens and growing a full CPU pool (models.options.EMBEDDED_POOL). Every pass of every context and
path is timed once per repetition, in turn, so that drift on a shared machine falls on all of them alike;
a ratio is the median of the per-repetition ratios last context / first context, with its quartiles.
Paths (PATHS) are the runner's ways of running a pass, all eager on the CPU: the CPU's own (exact sizes,
over the used slots), and a GPU's, padded to the CUDA buckets, over the span ladder's span or over the
whole cache (as captured graphs attended before the ladder); with two or more, each path after the first
is also compared with the first, pass by pass, at each context (paired per repetition). --capacity sets
the caches' logical slots (what the whole cache and the ladder's spans are made of).
Then the model of models.pass_bytes for a captured pass of Llama-3.1-8B shapes at 8k and 32k capacity, and for
the eager CPU passes timed here (what the context adds to a memory-bound and to a compute-bound pass). The load
average is printed before and after. The last line of the output is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from drafter_proc.drafter import Drafter
from models.hf import CPU_BUCKETS, CUDA_BUCKETS, HFRunner, covering_span
from models.load import load
from models.options import EMBEDDED_POOL, ModelOptions
from models.pass_bytes import attention_flop_share, captured_pass_bytes, pass_bytes
from target_proc.target import Target
from timing.bench_pair import bushy_tree

PATHS = {  # path -> (buckets, what a pass attends over: models.hf.ATTEND): every runner path, run eagerly
    "eager": (CPU_BUCKETS, "used"),  # the CPU's: every size its own bucket, the used slots rounded up
    "ladder": (CUDA_BUCKETS, "ladder"),  # a GPU's: padded to the CUDA buckets, the ladder's span
    "whole": (CUDA_BUCKETS, "whole"),  # a GPU's before the ladder: padded, the whole cache
}
COMMITTED = [5, 6, 7]  # tokens a drafter step commits before growing its pool
GPU_SHAPE, GPU_CAPACITIES, GPU_ROWS = "llama-3.1-8b", (8192, 32768), (1, 72)
GPU_CONTEXTS = (512, 2048, 8000, 30000)  # committed tokens of the byte model's passes (those within capacity)
CPU_SHAPE = "smollm2-135m"


def load_average() -> list[float]:
    return [float(x) for x in os.getloadavg()]


def spread(values) -> dict:
    """Median and quartiles of a sample."""
    q1, med, q3 = np.percentile(np.asarray(values, float), [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def paired_ratios(first: list[float], last: list[float]) -> dict:
    """Spread of last[i] / first[i]: timings taken in the same repetition, so shared drift cancels."""
    return spread(np.asarray(last, float) / np.asarray(first, float))


def sizes(parser: argparse.ArgumentParser, flag: str, text: str, least: int, most: int | None = None) -> list[int]:
    """The comma-separated integers `text` of `flag`, each from `least` to `most`; else one line naming the flag
    (status 2)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < least or (most is not None and max(values) > most):
        bound = f"from {least} to {most}" if most is not None else f"of at least {least}"
        parser.error(f"`{flag}` takes comma-separated integers {bound}, got {text!r}")
    return values


def at_least(parser: argparse.ArgumentParser, *checks: tuple[str, int, int]) -> None:
    """Each (flag, value, least): a value below its least ends in one line naming the flag (status 2)."""
    for flag, value, least in checks:
        if value < least:
            parser.error(f"`{flag}` must be at least {least}, got {value}")


def runner(model, capacity: int, path: str) -> HFRunner:
    """An eager runner of `path` (PATHS)."""
    buckets, attend = PATHS[path]
    return HFRunner(model, capacity, graphs=False, buckets=buckets, attend=attend)


def target_passes(model, context: int, capacity: int, path: str, trees: list[int]) -> dict:
    """name -> a call that runs one pass and reads its result back (the pass is done when it returns)."""
    rng = np.random.default_rng(context)
    ids = rng.integers(100, 40000, context).tolist()
    target = Target(runner(model, capacity, path))
    target.prefill(ids[:-1])
    target.root_pass(ids[-1])  # the root's K/V in slot P: tree passes below hang off it
    passes = {"root pass": lambda: float(target.root_pass(ids[-1])[0])}
    for b in trees:
        tree = bushy_tree(b)
        passes[f"tree pass B={b}"] = lambda tree=tree: float(target.tree_pass(tree, None)[0, 0])
    return passes


def drafter_step(model, context: int, capacity: int, path: str) -> dict:
    rng = np.random.default_rng(context + 1)
    drafter = Drafter(runner(model, capacity, path), EMBEDDED_POOL)
    drafter.start(rng.integers(100, 40000, context).tolist())
    length = drafter.through_root

    def step() -> None:
        drafter.commit(COMMITTED)  # grow_pool reads the pool back: the passes are done
        drafter.through_root = length

    return {"drafter step": step}


def least_capacity(contexts: list[int], trees: list[int]) -> int:
    """Logical slots the largest context needs with its largest pass."""
    return max(contexts) + max(trees + [EMBEDDED_POOL.n_expanded]) + len(COMMITTED) + 8


def measure(contexts: list[int], trees: list[int], paths: list[str], reps: int, capacity: int) -> dict:
    """(path, pass, context) -> seconds of each repetition."""
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
        names = dict.fromkeys(k[1] for k in times if k[0] == path)
        out[path] = {name: {c: paired_ratios(times[(paths[0], name, c)], times[(path, name, c)]) for c in contexts}
                     for name in names}
    return out


def gpu_model() -> dict:
    """Bytes a captured pass of GPU_SHAPE reads at each capacity (bf16), from models.pass_bytes: over the whole
    cache, and after each of GPU_CONTEXTS tokens over the span that covers them."""
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
    out = {}
    for c in contexts:
        span = covering_span(c + 1)  # the used slots rounded up, as models.hf reads them
        b = pass_bytes(CPU_SHAPE, span, itemsize=4)
        out[c] = {"span": span, "kv_over_weights": b.kv_over_weights,
                  "attention_flop_share": attention_flop_share(CPU_SHAPE, span)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m timing.bench_context", description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="40,2000", help="context lengths, comma-separated, ascending")
    parser.add_argument("--trees", default="8,59", help="tree pass sizes (59: budget auto's largest by default)")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every pass")
    parser.add_argument("--paths", default="eager", help=f"runner paths: {', '.join(PATHS)}")
    parser.add_argument("--capacity", type=int, default=0,
                        help="logical KV slots of every cache (default: what the largest context needs)")
    parser.add_argument("--model-only", action="store_true", help="print the GPU byte model alone")
    args = parser.parse_args()
    contexts = sorted(set(sizes(parser, "--contexts", args.contexts, 2)))
    if len(contexts) < 2:
        parser.error(f"`--contexts` needs two or more different lengths, got {args.contexts!r}")
    trees = sizes(parser, "--trees", args.trees, 1, CPU_BUCKETS[-1])
    paths = args.paths.split(",")
    if unknown := set(paths) - set(PATHS):
        parser.error(f"`--paths`: unknown {', '.join(sorted(unknown))}")
    at_least(parser, ("--reps", args.reps, 1), ("--threads", args.threads, 1))
    capacity = args.capacity or least_capacity(contexts, trees)
    if capacity < least_capacity(contexts, trees):
        parser.error(f"`--capacity` {capacity} cannot hold {contexts[-1]} tokens and the largest pass: at least "
                     f"{least_capacity(contexts, trees)}")

    gpu = gpu_model()
    print(f"captured pass of {GPU_SHAPE} (bf16): it attends over the smallest captured span covering the context")
    for name, g in gpu.items():
        print(f"  {name:<41} slots {g['slots']:6d}  weights {g['weights_gb']:6.2f} GB  K/V {g['kv_gb']:5.2f} GB "
              f"({100 * g['kv_over_weights']:4.1f}% of weights)  mask {g['mask_gb']:5.3f} GB")
    cpu = cpu_model(contexts)
    print(f"eager pass of {CPU_SHAPE} (float32) over the used slots rounded up: what the context adds")
    for c, m in cpu.items():
        print(f"  {c:6d} tokens, span {m['span']:5d}: K/V {100 * m['kv_over_weights']:5.1f}% of weight bytes, "
              f"attention {100 * m['attention_flop_share']:5.1f}% of weight multiply-adds")
    if args.model_only:
        print(json.dumps({"gpu_model": gpu, "cpu_model": cpu}))
        return

    torch.set_num_threads(args.threads)
    load_before = load_average()
    print(f"load average before: {load_before}, {args.threads} thread(s), {os.cpu_count()} cores")
    times = measure(contexts, trees, paths, args.reps, capacity)
    load_after = load_average()
    lo, hi = contexts[0], contexts[-1]
    results = {}
    print(f"\nmedian ms [quartiles] over {args.reps} repetitions, {capacity} slots a cache; ratio {hi}/{lo} "
          f"per repetition")
    for path in paths:
        print(f"path {path}")
        for name in dict.fromkeys(k[1] for k in times if k[0] == path):
            row = {c: spread(1e3 * np.asarray(times[(path, name, c)])) for c in contexts}
            ratio = paired_ratios(times[(path, name, lo)], times[(path, name, hi)])
            results[f"{path}: {name}"] = {"ms": row, f"ratio_{hi}_{lo}": ratio}
            cells = "".join(f"{c:>6}: {r['median']:7.1f} [{r['q1']:6.1f},{r['q3']:6.1f}]" for c, r in row.items())
            print(f"  {name:<16}{cells}   ratio {ratio['median']:.3f} [{ratio['q1']:.3f}, {ratio['q3']:.3f}]")
    compared = compare_paths(times, paths, contexts)
    for path, by_pass in compared.items():
        print(f"{path} over {paths[0]}, per repetition")
        for name, by_context in by_pass.items():
            cells = "".join(f"{c:>6}: {r['median']:.3f} [{r['q1']:.3f}, {r['q3']:.3f}]" for c, r in by_context.items())
            print(f"  {name:<16}{cells}")
    print(f"load average after: {load_after}")
    print(json.dumps({"contexts": contexts, "threads": args.threads, "reps": args.reps, "capacity": capacity,
                      "passes": results, "paths_over_first": compared,
                      "load_average": {"before": load_before, "after": load_after}, "gpu_model": gpu,
                      "cpu_model": cpu}))


if __name__ == "__main__":
    main()
