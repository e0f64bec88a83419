"""python -m bench.prefill: the drafter's prefill beside the target's on long prompts, and a bounded drafting context.

python -m bench.prefill --prompts spec-bench:PATH [--categories summarization,rag] [--limit 1]
                        [--windows 0,128,256] [--reps 3] [--max-new-tokens 48] [--budget 8]

On the CPU default pair with the deployed threads (the target: one thread while the drafter works, every
core after; the drafter: one thread, in its own process), for each long prompt: the target's prefill
alone, and beside the drafter's first round (its prefill and first pool) as pipeline.decode runs them,
with the drafter seeing the whole prompt or its last K tokens (DecodeConfig.drafter_window, --windows; 0:
the whole prompt). Then, in one process, greedy `draft` decodes with each window: tokens per round (tau)
and the drafter's seconds per round. The load average is printed before and after. The last line of the
output is one JSON document.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from bench.common import at_least, bench_parser, close, command_line, ints, load_bracket, refuse, spread
from models.options import EMBEDDED_POOL, ModelOptions
from pipeline.config import split_list

DRAFTER = "smollm2:int8"  # the drafter model


def drafter_worker(jobs, done, results) -> None:
    """A drafter process: for each (prompt, window) job, its first round; sets `done` when the pool is there."""
    import torch

    from drafter_proc.drafter import Drafter
    from models.load import load

    torch.set_num_threads(1)
    model = load(ModelOptions(model=DRAFTER), "drafter")
    drafter_of = {}
    results.put("ready")
    while (job := jobs.get()) is not None:
        prompt, window = job
        if window not in drafter_of:
            drafter_of[window] = Drafter(model.runner(len(prompt) + EMBEDDED_POOL.n_expanded + 8), EMBEDDED_POOL)
        t0 = time.perf_counter()
        drafter_of[window].start(prompt[-window:] if window else prompt)
        done.set()
        results.put(time.perf_counter() - t0)


def prefill_times(target, prompts: list[list[int]], windows: list[int], reps: int) -> dict:
    """Seconds of the target's prefill alone and beside the drafter's first round of each window."""
    ctx = mp.get_context("spawn")
    jobs, results, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    worker = ctx.Process(target=drafter_worker, args=(jobs, done, results), daemon=True)
    worker.start()
    assert results.get(timeout=600) == "ready"
    times = {"alone": [], **{f"beside drafter, window {w}": [] for w in windows},
             **{f"drafter first round, window {w}": [] for w in windows}}
    try:
        for rep in range(reps + 1):  # the first repetition warms up
            for prompt in prompts:
                t0 = time.perf_counter()
                target.prefill(prompt[:-1])
                alone = time.perf_counter() - t0
                for w in windows:
                    done.clear()
                    jobs.put((prompt, w))
                    t0 = time.perf_counter()
                    target.prefill(prompt[:-1], overlapped=lambda: not done.is_set())
                    beside = time.perf_counter() - t0
                    drafted = results.get(timeout=600)
                    if rep:
                        times[f"beside drafter, window {w}"].append(beside)
                        times[f"drafter first round, window {w}"].append(drafted)
                if rep:
                    times["alone"].append(alone)
    finally:
        jobs.put(None)
        worker.join(timeout=60)
    return times


class LocalFeed:
    """The drafter in this process, one call after another (pipeline.decode's DrafterClient)."""

    def __init__(self, drafter) -> None:
        self.drafter, self.pending, self.seconds = drafter, None, []

    def start(self, prompt) -> None:
        self.pending = self.drafter.start(prompt)

    def commit(self, tokens) -> None:
        self.pending = self.drafter.commit(tokens)
        self.seconds.append(self.pending.seconds)

    def pool(self):
        pending, self.pending = self.pending, None
        return pending

    def has_pool(self) -> bool:
        return self.pending is not None

    def end(self) -> None:
        self.pending = None


def acceptance(target_model, prompts: list[list[int]], windows: list[int], max_new: int, budget: int) -> dict:
    """Per window: tokens per round of greedy `draft` decodes and the drafter's median seconds per round."""
    import torch

    from drafter_proc.drafter import Drafter
    from models.load import load
    from pipeline.decode import decode
    from pipeline.settings import DecodeConfig
    from target_proc.target import Target

    drafter_model = load(ModelOptions(model=DRAFTER), "drafter")
    eos = frozenset(target_model.tokenizer.eos)
    torch.set_num_threads(1)
    out = {}
    for w in windows:
        config = DecodeConfig(decoder="draft", temperature=0.0, budget=budget, max_new_tokens=max_new,
                              drafter_window=w)
        tokens = rounds = 0
        seconds = []
        for prompt in prompts:
            cap = config.kv_slots(len(prompt)) + EMBEDDED_POOL.n_expanded + 8
            target = Target(target_model.runner(cap))
            feed = LocalFeed(Drafter(drafter_model.runner(cap), EMBEDDED_POOL))
            result = decode(target, feed, prompt, config, eos, None)
            tokens += sum(r.emitted for r in result.rounds)
            rounds += len(result.rounds)
            seconds += feed.seconds
        out[f"window {w}"] = {"tau": tokens / rounds, "rounds": rounds,
                              "drafter_round_ms": spread(1e3 * np.asarray(seconds))}
    return out


@dataclass(frozen=True, slots=True)
class PrefillOptions:
    """Prompts and windows"""

    prompts: str = field(default="", metadata={
        "help": "spec-bench:PATH, or another prompt source", "metavar": "SOURCE", "required": True})
    categories: str = field(default="summarization,rag", metadata={"help": "prompt categories, comma-separated",
                                                                   "metavar": "LIST"})
    limit: int = field(default=1, metadata={"help": "prompts per category"})
    windows: tuple[int, ...] = field(default=(0, 128, 256), metadata={
        "help": "drafting windows (0: the whole prompt), comma-separated", "parse": "ints", "metavar": "K,K"})
    reps: int = field(default=3, metadata={"help": "repetitions of every prompt's prefills"})
    max_new_tokens: int = field(default=48, metadata={"help": "tokens of each greedy draft decode"})
    budget: int = field(default=8, metadata={"help": "tree budget of the draft decodes"})

    def __post_init__(self) -> None:
        ints("windows", self.windows, 0)
        at_least("limit", self.limit, 1)
        at_least("reps", self.reps, 1)
        at_least("max_new_tokens", self.max_new_tokens, 1)
        at_least("budget", self.budget, 1)


def long_prompt_texts(options: PrefillOptions) -> list[str]:
    """The first --limit prompts of each category, before any model loads; one line naming the flag when the
    source is not one or holds none of them."""
    from evaluation.prompts import PromptError, load_prompts

    try:
        source = load_prompts(options.prompts)
    except PromptError as e:
        refuse(__spec__.name, f"--prompts: {e}")
    texts = [p.text for category in split_list(options.categories)
             for p in [p for p in source if p.category == category][: options.limit]]
    if not texts:
        refuse(__spec__.name, f"--categories: no prompt of {options.categories} in {options.prompts}")
    return texts


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(PrefillOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    texts = long_prompt_texts(options)
    from models.load import load
    from target_proc.target import Target

    target_model = load(ModelOptions(), "target")
    prompts = [target_model.tokenizer.prompt_ids(text) for text in texts]
    lengths, windows = [len(p) for p in prompts], list(options.windows)
    with load_bracket() as load:
        print(f"{len(prompts)} prompts of {lengths} tokens; load average before: {load['before']}, "
              f"{os.cpu_count()} cores")
        target = Target(target_model.runner(max(lengths) + 8), ModelOptions().cpu_threads)
        times = prefill_times(target, prompts, windows, options.reps)
        rows = {name: spread(1e3 * np.asarray(t)) for name, t in times.items()}
        print(f"\nprefill, median ms [quartiles] over {options.reps} repetitions of every prompt")
        for name, r in rows.items():
            print(f"  {name:<32}{r['median']:8.0f} [{r['q1']:6.0f}, {r['q3']:6.0f}]")
        accepted = acceptance(target_model, prompts, windows, options.max_new_tokens, options.budget)
        print(f"\ngreedy draft decodes, B={options.budget}, {options.max_new_tokens} new tokens, one thread each")
        for name, a in accepted.items():
            print(f"  {name:<12} tau {a['tau']:.2f} over {a['rounds']} rounds, drafter round "
                  f"{a['drafter_round_ms']['median']:.0f} ms [{a['drafter_round_ms']['q1']:.0f}, "
                  f"{a['drafter_round_ms']['q3']:.0f}]")
    print(f"load average after: {load['after']}")
    close({"prompt_tokens": lengths, "prefill_ms": rows, "acceptance": accepted, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
