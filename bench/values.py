"""python -m bench.values: the values program's speed on one CPU core.

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
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from bench.common import at_least, bench_parser, close, command_line, load_average


@dataclass(frozen=True, slots=True)
class ValuesOptions:
    """Rounds"""

    rounds: int = field(default=10_000, metadata={"help": "recorded rounds written and read"})
    prompts: int = field(default=40, metadata={"help": "prompts the rounds are spread over"})
    resamples: int = field(default=2000, metadata={"help": "bootstrap resamples of the intervals"})

    def __post_init__(self) -> None:
        for name in ("rounds", "prompts", "resamples"):
            at_least(name, getattr(self, name), 1)


def synthetic_rounds(rounds: int, prompts: int, vocab: int = 2000, distinct_pools: int = 40, seed: int = 0):
    """(prompt index, RecordedRound) pairs: `distinct_pools` pools grown from random rows, each round with
    its own random edge probabilities."""
    import torch

    from evaluation.rounds import RecordedRound
    from pipeline.config import PoolConfig
    from pipeline.pool import grow_pool

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


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(ValuesOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    import torch

    torch.set_num_threads(1)
    close(timed(options))
    return 0


def timed(options: ValuesOptions) -> dict:
    """Write the synthetic rounds, then time reading them, the values and their statistics, the coverage
    figures and the decoder without a root pass -> the JSON document."""
    import torch

    from evaluation.coverage import coverage_tables
    from evaluation.no_root_pass import held_rounds
    from evaluation.rounds_file import load_rounds
    from evaluation.values import VALUED, Averages, evaluate
    from pipeline.config import PoolConfig

    with tempfile.TemporaryDirectory() as tmp:
        size = write_rounds(tmp, options)
        t0 = time.perf_counter()
        decodes = [d for found in load_rounds([tmp]) for d in found.decodes]
        t1 = time.perf_counter()
        (rv,) = evaluate(decodes)
        t2 = time.perf_counter()
        avg = Averages(rv, n_resamples=options.resamples)
        stats = {rule: (avg.per_round(rule), avg.per_prompt(rule), avg.gain(rule, "draft")) for rule in VALUED}
        t3, cpu3 = time.perf_counter(), time.process_time()
        (coverage,) = coverage_tables(decodes)
        t4, cpu4 = time.perf_counter(), time.process_time()
        held_rounds(decodes)
        t5, cpu5 = time.perf_counter(), time.process_time()
    return {"rounds": rv.rounds, "pool": PoolConfig().size, "rules": list(VALUED), "budgets": rv.budgets.tolist(),
            "file_mb": round(size / 2**20, 1), "read_s": round(t1 - t0, 2), "values_s": round(t2 - t1, 2),
            "statistics_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
            "coverage_s": round(t4 - t3, 2), "coverage_cpu_s": round(cpu4 - cpu3, 2),
            "coverage_cells": int(coverage.coverage.size), "no_root_pass_s": round(t5 - t4, 2),
            "no_root_pass_cpu_s": round(cpu5 - cpu4, 2), "threads": torch.get_num_threads(),
            "load_average": load_average()[0], "root_gain_b8": round(stats["root"][2][2].value, 4)}


def write_rounds(folder: str, options: ValuesOptions) -> int:
    """The synthetic rounds as one rounds file in `folder` -> its size in bytes."""
    from evaluation.rounds_file import RoundStore, rounds_path

    per_prompt: dict[int, list] = {}
    for p, rnd in synthetic_rounds(options.rounds, options.prompts):
        per_prompt.setdefault(p, []).append(rnd)
    with RoundStore(rounds_path(folder, 1, 1), {"bench": "values"}) as store:
        for p, rounds in per_prompt.items():
            store.append({"prompt_id": f"p{p}", "category": "qa", "turn": 0, "decoder": "root-draw",
                          "temperature": 1.0, "budget": 8, "seed": 0}, rounds)
    return os.path.getsize(rounds_path(folder, 1, 1))


if __name__ == "__main__":
    sys.exit(main())
