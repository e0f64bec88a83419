"""Latency table for the GPU path: eager against graph replay per pass, and one pipelined decode each.

python -m tests.gpu.check [--device cuda:0] [--gpus 0 | 0,1] [--target-shape S] [--drafter-shape S]
The last line of the output is one JSON document with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from models.hf import HFRunner
from models.shapes import random_model
from timing.run_config import cuda_driver
from pipeline.tree import Tree
from target_proc.target import Target

ROOT = Path(__file__).resolve().parents[2]
TREE_SIZES = (8, 16, 32, 64)  # non-root nodes of a tree pass


def chain_tree(n: int) -> Tree:
    """A tree of n nodes in 8 chains (the shape's only cost is n; the mask differs, not the work)."""
    parent = np.array([-1 if i < 8 else i - 8 for i in range(n)])
    return Tree(np.arange(1, n + 1) % 500 + 1, parent, np.arange(n))


def timed(fn, device: str, reps: int) -> float:
    """Median milliseconds of fn() between CUDA events (CPU: perf_counter), after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if device.startswith("cuda"):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def kernel_ms(fn, device: str) -> float | None:
    """Summed device time of the kernels of one eager call (torch.profiler), in ms."""
    if not device.startswith("cuda"):
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / 1e3


def pass_latencies(shape: str, device: str, context: int, capacity: int, reps: int) -> dict:
    """Eager and graph ms per pass after a `context`-token prefill, with a `capacity`-slot cache (graph
    passes attend over the whole cache, so their cost follows the capacity, not the context)."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    model = random_model(shape, device, dtype)
    rows = {}
    targets = {}
    for graphs in (False, True):
        target = Target(HFRunner(model, capacity, graphs=graphs))
        target.prefill(list(range(1, context)))
        targets[graphs] = target
    for name, call in [("root pass", lambda t: t.root_pass(7))] + [
            (f"tree {n}", lambda t, n=n: t.tree_pass(chain_tree(n), None)) for n in TREE_SIZES] + [
            (f"root+tree {n}", lambda t, n=n: t.tree_pass(chain_tree(n), 7)) for n in (8, 64)]:
        eager = timed(lambda: call(targets[False]), device, reps)
        graph = timed(lambda: call(targets[True]), device, reps) if device.startswith("cuda") else None
        rows[name] = {"eager_ms": eager, "graph_ms": graph}
    rows["root pass"]["kernel_ms"] = kernel_ms(lambda: targets[False].root_pass(7), device)
    del targets, model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def pipelined(target_shape: str, drafter_shape: str, gpus: str | None, max_new: int) -> list[dict]:
    cmd = [str(ROOT / "launch" / "pair.sh"), "--target", f"random:{target_shape}",
           "--drafter", f"random:{drafter_shape}", "--decoders", "ar,draft,pearl,pearl-top1,root-draw,root",
           "--prompts", "builtin", "--max-new-tokens", str(max_new), "--json"]
    if gpus:
        cmd += ["--gpus", gpus]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"pipelined decode failed with status {proc.returncode}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def summarize(records: list[dict]) -> dict:
    out = {}
    for decoder in dict.fromkeys(r["decoder"] for r in records):
        rows = [r for r in records if r["decoder"] == decoder]
        phases = {k: [x for r in rows for x in r["round_phases"][k]] for k in rows[0]["round_phases"]}
        rounds = [sum(v) for r in rows for v in zip(*[r["round_phases"][k] for k in r["round_phases"]
                                                       if k != "draft"])]
        out[decoder] = {
            "tok_per_s": sum(len(r["new_tokens"]) for r in rows) / sum(r["seconds"] for r in rows),
            "median_round_ms": 1e3 * statistics.median(rounds),
            **{f"median_{k}_ms": 1e3 * statistics.median(v) for k, v in phases.items()},
            # host work per round: selection and the commit's launch/sync, everything outside the passes
            "median_host_ms": 1e3 * statistics.median([s + c for s, c in zip(phases["select"], phases["commit"])]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--gpus", default=None, help="placement of the pipelined decode (default: 0,1 "
                                                     "with two GPUs, else 0)")
    parser.add_argument("--target-shape", default="llama-3.1-8b")
    parser.add_argument("--drafter-shape", default="llama-3.2-1b")
    parser.add_argument("--context", type=int, default=512, help="prefix length before each timed pass")
    parser.add_argument("--max-context", type=int, default=2048, help="KV cache slots, as the runtime's option")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    report = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
              "cuda_driver": cuda_driver(), "torch": torch.__version__}
    print(f"device {report['device']}, CUDA driver {report['cuda_driver']}, torch {report['torch']}")
    for role, shape in (("drafter", args.drafter_shape), ("target", args.target_shape)):
        rows = pass_latencies(shape, args.device, args.context, args.max_context, args.reps)
        report[f"{role}:{shape}"] = rows
        print(f"\n{role} {shape}: median ms per pass at a {args.context}-token context, "
              f"{args.max_context}-slot cache")
        print(f"{'pass':<16}{'eager':>10}{'graph':>10}{'kernels':>10}")
        for name, r in rows.items():
            fmt = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10}"
            print(f"{name:<16}{fmt(r['eager_ms'])}{fmt(r['graph_ms'])}{fmt(r.get('kernel_ms'))}")
    gpus = args.gpus
    if gpus is None and args.device.startswith("cuda"):
        gpus = "0,1" if torch.cuda.device_count() > 1 else "0"
    summary = summarize(pipelined(args.target_shape, args.drafter_shape, gpus, args.max_new_tokens))
    report["pipelined"] = {"gpus": gpus, "decoders": summary}
    print(f"\npipelined decode ({args.target_shape} with {args.drafter_shape}, gpus {gpus}): medians per round")
    keys = ["tok_per_s", "median_round_ms", "median_draft_ms", "median_root_ms", "median_wait_ms",
            "median_tree_ms", "median_host_ms"]
    print(f"{'decoder':<12}" + "".join(f"{k.replace('median_', ''):>12}" for k in keys))
    for decoder, s in summary.items():
        print(f"{decoder:<12}" + "".join(f"{s[k]:12.2f}" for k in keys))
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
