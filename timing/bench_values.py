"""python -m timing.bench_values: the values program's speed on one CPU core.

Writes ROUNDS recorded rounds of the paper's pool (top-k 10, depth 8, expand 10: 710 candidates) to a
rounds file, grown from random draft rows with random target edge probabilities (the program's work does
not depend on what the numbers are), then times reading them and computing every rule and both ceilings at
the 13 budgets, with their per-round and per-prompt averages and bootstrap intervals; then the coverage
figures (every rule and ceiling, 5 scored sets, 4 stopping rules, 13 budgets: evaluation.coverage) and the
decoder without a root pass (evaluation.no_root_pass), each in seconds and in this process's CPU seconds. The
last line of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from evaluation.coverage import coverage_tables
from evaluation.no_root_pass import held_rounds
from evaluation.rounds import RecordedRound
from evaluation.rounds_file import RoundStore, load_rounds, rounds_path
from evaluation.values import VALUED, Averages, evaluate
from pipeline.config import PoolConfig
from pipeline.pool import grow_pool


def synthetic_rounds(rounds: int, prompts: int, vocab: int = 2000, distinct_pools: int = 40, seed: int = 0):
    """(prompt index, RecordedRound) pairs: `distinct_pools` pools grown from random rows, each round with
    its own random edge probabilities."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    pools = []
    for _ in range(distinct_pools):
        expand = lambda nodes, tokens, parents, depth: torch.log_softmax(4 * torch.randn(len(nodes), vocab), -1)
        pools.append(grow_pool(torch.log_softmax(4 * torch.randn(vocab), -1), expand, PoolConfig()))
    for i in range(rounds):
        pool = pools[i % distinct_pools]
        edge = rng.beta(0.3, 1.5, len(pool)) / pool.depth.clip(max=3)  # first-level sums stay below 1
        yield i % prompts, RecordedRound(budget=8, accepted=1, emitted=np.array([int(pool.token[0]), 7]),
                                         pool=pool, edge=edge)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m timing.bench_values", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args(argv)
    for name in ("rounds", "prompts", "resamples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        per_prompt: dict[int, list[RecordedRound]] = {}
        for p, rnd in synthetic_rounds(args.rounds, args.prompts):
            per_prompt.setdefault(p, []).append(rnd)
        with RoundStore(rounds_path(tmp, 1, 1), {"bench": "values"}) as store:
            for p, rounds in per_prompt.items():
                store.append({"prompt_id": f"p{p}", "category": "qa", "turn": 0, "decoder": "root-draw",
                              "temperature": 1.0, "budget": 8, "seed": 0}, rounds)
        size = os.path.getsize(rounds_path(tmp, 1, 1))
        t0 = time.perf_counter()
        decodes = [d for found in load_rounds([tmp]) for d in found.decodes]
        t1 = time.perf_counter()
        (rv,) = evaluate(decodes)
        t2 = time.perf_counter()
        avg = Averages(rv, n_resamples=args.resamples)
        stats = {rule: (avg.per_round(rule), avg.per_prompt(rule), avg.gain(rule, "draft")) for rule in VALUED}
        t3, cpu3 = time.perf_counter(), time.process_time()
        (coverage,) = coverage_tables(decodes)
        t4, cpu4 = time.perf_counter(), time.process_time()
        held_rounds(decodes)
        t5, cpu5 = time.perf_counter(), time.process_time()
    result = {"rounds": rv.rounds, "pool": 710, "rules": list(VALUED), "budgets": rv.budgets.tolist(),
              "file_mb": round(size / 2**20, 1), "read_s": round(t1 - t0, 2), "values_s": round(t2 - t1, 2),
              "statistics_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
              "coverage_s": round(t4 - t3, 2), "coverage_cpu_s": round(cpu4 - cpu3, 2),
              "coverage_cells": int(coverage.coverage.size), "no_root_pass_s": round(t5 - t4, 2),
              "no_root_pass_cpu_s": round(cpu5 - cpu4, 2), "threads": torch.get_num_threads(),
              "load_average": os.getloadavg()[0], "root_gain_b8": round(stats["root"][2][2].value, 4)}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
