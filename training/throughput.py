"""How fast the target answers training prompts: transformers' generate in shards (the path of targets other
than Llama's) beside training.batched's slots, on the same prompts in one run.

    python -m training.throughput [--target smollm2] [--prompts 64] [--max-new 128] [--shard 16] [--slots 32]

Both paths answer the same prompts as train-head does and keep the same features; the figure is answer tokens
over seconds, beside the load average, the CPU model and its flags. The last line is one JSON document."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from models.options import DTYPES

KERNEL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def cpu() -> dict:
    """The CPU's model name, which of KERNEL_FLAGS it has and its usable cores."""
    from evaluation.provenance import cpu_flags, processor, usable_cpus

    flags = cpu_flags()
    return {"model": processor(), "flags": [f for f in KERNEL_FLAGS if f in flags], "cores": usable_cpus()}


def timed(answer) -> dict:
    """answer() -> the answer tokens it made, the seconds (wall clock, and this process's CPU time: on a loaded
    machine the second says more) and their ratios."""
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = sum(len(a.tokens) - a.start for a in answer())
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {"answer_tokens": tokens, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 1),
            "cpu_s": round(cpu_s, 2), "tokens_per_cpu_s": round(tokens / cpu_s, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="smollm2")
    p.add_argument("--prompts", type=int, default=64, help="templated training prompts (default: %(default)s)")
    p.add_argument("--max-new", type=int, default=128, help="answer tokens at most (default: %(default)s)")
    p.add_argument("--shard", type=int, default=16, help="generate's prompts per shard, half a call "
                   "(default: %(default)s, the embedded head's)")
    p.add_argument("--slots", type=int, default=32, help="sequences the slots decode at once (default: %(default)s)")
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="the target's dtype (auto: float32 on the CPU, as "
                   "train-head's)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice; 1 on a loaded machine, "
                   "where threads wait for each other)")
    args = p.parse_args(argv)
    if min(args.prompts, args.max_new, args.shard, args.slots) < 1:
        p.error("`prompts`, `max-new`, `shard` and `slots` must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    from training.batched import answer_all
    from training.cli import ends_and_pad, load_target, target_of
    from training.distill import generate_batch
    from training.prompts import training_prompts
    from training.train import head_config

    try:
        model, tokenizer = load_target(args.target, "cpu", args.dtype)
    except ValueError as e:
        p.error(str(e))
    layers = target_of(model, head_config(model.config, 8)).layers
    ends, pad = ends_and_pad(tokenizer)
    prompts = [tokenizer.chat_ids([t]) for t in training_prompts(args.prompts, 0)]
    load = [round(x, 2) for x in os.getloadavg()]
    common = dict(max_new=args.max_new, end_ids=ends, layers=layers)
    halves = [(s, half, [q for j, q in enumerate(prompts[s: s + args.shard], s) if j % 2 == half])
              for s in range(0, len(prompts), args.shard) for half in (0, 1)]  # train-head's calls until now
    generate = timed(lambda: [a for s, half, ids in halves if ids for a in generate_batch(
        model, ids, sample=bool(half), pad_id=pad, seed=s, **common)])
    slots = timed(lambda: answer_all(model, prompts, sample=[j % 2 == 1 for j in range(len(prompts))], seed=0,
                                     slots=args.slots, **common))
    ratio = lambda key: round(slots[key] / generate[key], 2)
    report = {"target": args.target, "dtype": str(model.dtype).removeprefix("torch."), "prompts": args.prompts,
              "max_new": args.max_new, "generate_shard": args.shard,
              "slots": args.slots, "generate": generate, "batched": slots,
              "ratio": ratio("tokens_per_s"), "ratio_cpu": ratio("tokens_per_cpu_s"), "cpu": cpu(),
              "threads": torch.get_num_threads(), "load_before": load,
              "load_after": [round(x, 2) for x in os.getloadavg()]}
    print(f"generate {generate['tokens_per_s']} tokens/s, slots {slots['tokens_per_s']} tokens/s: "
          f"{report['ratio']}x (load {load[0]}, {report['cpu']['model']})", file=sys.stderr)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
