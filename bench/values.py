"""python -m bench.values: what does the values program cost, on one CPU core?

Its results: results/bench_values.txt (results/benchmarks.md); it backs docs/values.md's lines on the
program's time (`bench.values` times the program on 10,000 rounds) and the coverage figures'.

Writes ROUNDS recorded rounds of the paper's pool to a rounds file, then times, on one thread and in seconds
and CPU seconds: reading them and every rule and ceiling at the 13 budgets with their averages and intervals;
the coverage figures (study.coverage) and the decoder without a root pass (study.no_root_pass); then the whole
values program (study.program, no plots) and each of its sections alone. The rounds are synthetic by default
(the program's work does not depend on the numbers), without retained rows; --recording DIR repeats a run's
recorded decodes instead, retained rows and all. The last line of stdout is one JSON document."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from bench.common import bench_parser, close, command_line, load_bracket, refuse
from pipeline.config import ConfigError, InputError, check_int


@dataclass(frozen=True, slots=True)
class ValuesOptions:
    """Rounds"""

    rounds: int = field(default=10_000, metadata={"help": "recorded rounds written and read"})
    prompts: int = field(default=40, metadata={"help": "prompts the synthetic rounds are spread over"})
    resamples: int = field(default=2000, metadata={"help": "bootstrap resamples of the intervals"})
    recording: str = field(default="", metadata={
        "help": "a run directory recorded with --record-rounds: its decodes, repeated, instead of synthetic "
                "rounds (--prompts is then unused)", "metavar": "DIR"})

    def __post_init__(self) -> None:
        for name in ("rounds", "prompts", "resamples"):
            check_int(name, getattr(self, name), 1)
        if self.recording:
            from evaluation.rounds_file import round_files

            if not os.path.isdir(self.recording):
                raise ConfigError("recording", f"{self.recording} is not a directory; give a run's output directory")
            if not round_files(self.recording):
                raise ConfigError("recording", f"{self.recording} holds no rounds.shard-I-of-N.bin file; was the run "
                                               f"made with --record-rounds?")


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
    recording = read_recording(options.recording) if options.recording else None  # refused before torch loads
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    with load_bracket() as load, threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        size = write_copies(tmp, recording, options.rounds) if recording else write_rounds(tmp, options)
        recording = None  # held no longer: what is timed reads the file
        doc = timed(tmp, options) | program(tmp, options)
    close(doc | {"file_mb": round(size / 2**20, 1), "source": options.recording or "synthetic",
                 "threads": torch.get_num_threads(), "load_average": load})
    return 0


def timed(folder: str, options: ValuesOptions) -> dict:
    """Time reading the rounds of `folder`, the values and their statistics, the coverage figures and the
    decoder without a root pass -> their part of the JSON document."""
    from study.coverage import coverage_tables
    from study.no_root_pass import held_rounds
    from evaluation.rounds_file import load_rounds
    from study.values import VALUED, Averages, evaluate
    from pipeline.config import PoolConfig

    t0 = time.perf_counter()
    found = list(load_rounds([folder]))
    decodes = [d for f in found for d in f.decodes]
    t1 = time.perf_counter()
    tables = evaluate(decodes)
    t2 = time.perf_counter()
    averages = [Averages(rv, n_resamples=options.resamples) for rv in tables]
    stats = [{rule: (avg.per_round(rule), avg.per_prompt(rule), avg.gain(rule, "draft")) for rule in VALUED}
             for avg in averages]
    t3, cpu3 = time.perf_counter(), time.process_time()
    coverage = coverage_tables(decodes)
    t4, cpu4 = time.perf_counter(), time.process_time()
    held_rounds(decodes)
    t5, cpu5 = time.perf_counter(), time.process_time()
    return {"rounds": sum(rv.rounds for rv in tables), "temperatures": [rv.temperature for rv in tables],
            "pool": PoolConfig(**found[0].provenance.get("pool", {})).size, "rules": list(VALUED),
            "budgets": tables[0].budgets.tolist(), "read_s": round(t1 - t0, 2), "values_s": round(t2 - t1, 2),
            "statistics_s": round(t3 - t2, 2), "total_s": round(t3 - t0, 2),
            "coverage_s": round(t4 - t3, 2), "coverage_cpu_s": round(cpu4 - cpu3, 2),
            "coverage_cells": sum(int(c.coverage.size) for c in coverage), "no_root_pass_s": round(t5 - t4, 2),
            "no_root_pass_cpu_s": round(cpu5 - cpu4, 2), "root_gain_b8": round(stats[0]["root"][2][2].value, 4)}


def program(folder: str, options: ValuesOptions) -> dict:
    """Time the whole values program over `folder` (its report to a file beside it, no plots), then each of its sections
    alone (made from the decodes read once, then written in Markdown) -> their part of the JSON document."""
    from study.options import ValuesOptions as ProgramOptions
    from study.program import SECTIONS, load, values

    settings = ProgramOptions(out=os.path.join(folder, "report"), resamples=options.resamples, plots=False)
    t0, cpu0 = time.perf_counter(), time.process_time()
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        values([folder], settings)
    t1, cpu1 = time.perf_counter(), time.process_time()
    data = load([folder], settings)
    sections, made = {}, {}
    for _, make in SECTIONS:
        name = make.__name__.removesuffix("_section")
        t, cpu = time.perf_counter(), time.process_time()
        made[name] = make(data)
        made[name].markdown()
        sections[name] = {"s": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - cpu, 2)}
    rows = any(at.rows is not None for at in made["rows"].temperatures)
    return {"program_s": round(t1 - t0, 2), "program_cpu_s": round(cpu1 - cpu0, 2), "sections": sections,
            "retained_rows": rows, "timed": "study.program.values: reading the rounds, every section's tables and "
            "values.md, no plots" + ("" if rows else "; the rounds hold no retained rows, so the rows section has "
                                                   "no row figures, substitutes, mixtures or rows reranker")}


def write_rounds(folder: str, options: ValuesOptions) -> int:
    """The synthetic rounds as one rounds file in `folder` -> its size in bytes."""
    from dataclasses import asdict

    from evaluation.rounds_file import RoundStore, rounds_path
    from pipeline.config import PoolConfig

    per_prompt: dict[int, list] = {}
    for p, rnd in synthetic_rounds(options.rounds, options.prompts):
        per_prompt.setdefault(p, []).append(rnd)
    with RoundStore(rounds_path(folder, 1, 1), {"bench": "values", "pool": asdict(PoolConfig())}) as store:
        for p, rounds in per_prompt.items():
            store.append({"prompt_id": f"p{p}", "category": "qa", "turn": 0, "decoder": "root-draw",
                          "temperature": 1.0, "budget": 8, "seed": 0}, rounds)
    return os.path.getsize(rounds_path(folder, 1, 1))


def read_recording(directory: str):
    """Every rounds file of a recorded run (evaluation.rounds_file.RoundsFile), refused in one line when one
    holds no whole chunk or none holds a timed decode with rounds."""
    from evaluation.rounds_file import load_rounds

    try:
        found = list(load_rounds([directory]))
    except InputError as e:  # a file holding no whole chunk
        refuse(__spec__.name, f"--recording {e}")
    if not any(timed_decodes(found)):
        refuse(__spec__.name, f"--recording {directory} holds no timed decode with rounds")
    return found


def timed_decodes(found) -> list:
    """The decodes of rounds files that the values program reads: not warm-ups, with rounds."""
    return [d for f in found for d in f.decodes if d.rounds and not d.key.get("warmup", False)]


def write_copies(folder: str, found, rounds: int) -> int:
    """A recording's timed decodes, repeated in order until they hold at least `rounds` rounds, as one rounds
    file in `folder` with the recording's provenance: the first copy under the recorded prompt ids, copy c
    under "copyC/ID" (a prompt of its own for the bootstrap, its category kept) -> the file's size in bytes."""
    from evaluation.rounds_file import RoundStore, rounds_path

    decodes, written, copy = timed_decodes(found), 0, 1
    path = rounds_path(folder, 1, 1)
    with RoundStore(path, found[0].provenance, found[0].recording) as store:
        while written < rounds:
            for d in decodes:
                prompt = d.key["prompt_id"] if copy == 1 else f"copy{copy}/{d.key['prompt_id']}"
                store.append({**d.key, "prompt_id": prompt}, d.rounds, d.prompt_tokens)
                written += len(d.rounds)
                if written >= rounds:
                    break
            copy += 1
    return os.path.getsize(path)


if __name__ == "__main__":
    sys.exit(main())
