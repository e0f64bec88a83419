"""python -m bench.spin: how long torch's idle OpenMP threads spin, each setting against the others, side by side.

python -m bench.spin [--values N,N,...] [--repeats R] [--prompts SOURCE]... [--limit N] [--stratify group]
                     [--max-new-tokens N] [--budget B] [--decoders LIST] [--drafter SPEC]

The default pair (launch/pair.sh, the embedded target and `--drafter`) decodes the same prompts once per
`GOMP_SPINCOUNT` value in turn, `--repeats` times round, each run in fresh processes (libgomp reads the
variable when it loads). 300000 is libgomp's own default; the launcher sets models.options.CPU_SPINCOUNT.
Prints, per value, each decoder's speed (summed tokens over summed seconds, the runs pooled), its median
wait for the pool and tree pass, and the target's mean time per round outside the phases (what a round's
Commit to the drafter and the rest between rounds take); then each value's speed over the first value's,
run by run (runs of one repetition see the same machine state). The load average is printed at the start
and the end; the last line of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

from bench.common import bench_parser, check_stratify, close, command_line, load_bracket
from bench.pair import pair_run, prompts_or_refuse
from evaluation.record import DecodeRecord
from evaluation.summary import analyse
from models.kernel_cache import processor
from models.options import DEFAULT_DRAFTER, embedded_pool
from pipeline.config import ConfigError, check_budget, check_int, split_list
from pipeline.result import PHASES
from programs.options import check_decoders

ON_TARGET = tuple(name for name in PHASES if name != "draft")  # the phases the target's clock counts


@dataclass(frozen=True, slots=True)
class SpinOptions:
    """Settings and decodes"""

    values: str = field(default="300000,100000", metadata={
        "help": "GOMP_SPINCOUNT values compared, the first the reference (300000: libgomp's default)",
        "metavar": "N,N,..."})
    repeats: int = field(default=3, metadata={"help": "runs of each value, in turn", "metavar": "R"})
    prompts: tuple[str, ...] = field(default=(), metadata={
        "help": "prompt source, repeatable, as a sweep takes it (default: builtin)", "metavar": "SOURCE"})
    limit: int = field(default=6, metadata={"metavar": "N"})
    stratify: str = field(default="group", metadata={"metavar": "category|group"})
    max_new_tokens: int = field(default=96, metadata={"metavar": "N"})
    budget: int | str = field(default=8, metadata={"metavar": "B", "parse": "budget"})
    decoders: str = field(default="ar,draft", metadata={"metavar": "LIST"})
    drafter: str = field(default=DEFAULT_DRAFTER, metadata={"metavar": "SPEC"})

    def __post_init__(self) -> None:
        check_int("repeats", self.repeats, 1)
        check_int("limit", self.limit, 1)
        check_int("max_new_tokens", self.max_new_tokens, 1)
        check_budget("budget", self.budget)
        check_decoders("decoders", self.decoders)
        check_stratify("stratify", self.stratify)
        values = split_list(self.values)
        if len(values) < 2 or not all(v.isdigit() for v in values) or len(set(values)) < len(values):
            raise ConfigError("values", f"must be two or more distinct spin counts (whole numbers), got "
                                        f"{self.values!r}")


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(SpinOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    prompts = prompts_or_refuse(options, __spec__.name)
    values, decoders = split_list(options.values), split_list(options.decoders)
    runs: dict[str, list[list[DecodeRecord]]] = {v: [] for v in values}
    with load_bracket() as load:
        print(f"load average at the start: {load['before']}", flush=True)
        for r in range(options.repeats):
            for v in values[r % len(values):] + values[: r % len(values)]:  # each value leads a repetition in turn
                runs[v].append(pair_run(prompts, options.max_new_tokens, options.budget, decoders, options.drafter,
                                        embedded_pool(options.drafter), env={"GOMP_SPINCOUNT": v}))
    print(f"load average at the end: {load['after']}")
    summary = {v: _figures([r for run in runs[v] for r in run], options.budget) for v in values}
    print(f"\n{len(prompts)} prompts, T=0, B={options.budget}, {options.max_new_tokens} new tokens, "
          f"{options.repeats} runs a value, {options.drafter}")
    print(f"{'GOMP_SPINCOUNT':<16}{'decoder':<11}{'tok/s':>8}{'wait ms':>9}{'tree ms':>9}{'outside ms':>12}")
    for v in values:
        for d in decoders:
            f = summary[v][d]
            print(f"{v:<16}{d:<11}{f['tok_per_s']:8.1f}{f['median_wait_ms']:9.1f}{f['median_tree_ms']:9.1f}"
                  f"{f['outside_ms_per_round']:12.2f}")
    speeds = {v: [_figures(run, options.budget) for run in runs[v]] for v in values}  # run by run
    ratios = {v: {d: [run[d]["tok_per_s"] / ref[d]["tok_per_s"] for run, ref in zip(speeds[v], speeds[values[0]])]
                  for d in decoders} for v in values[1:]}
    for v, by in ratios.items():
        for d, xs in by.items():
            print(f"{d} at {v} over {values[0]}, run by run: {', '.join(f'{x:.3f}' for x in xs)}")
    close({"values": values, "figures": summary, "ratios": ratios, "prompts": len(prompts),
           "max_new_tokens": options.max_new_tokens, "budget": options.budget, "drafter": options.drafter,
           "repeats": options.repeats, "cpu": processor(), "load_average": load})
    return 0


def _figures(records: list[DecodeRecord], budget: int | str) -> dict:
    """Per decoder: speed and median wait and tree pass (evaluation.summary's, as bench.pair prints them), and
    the target's mean seconds a round outside its phases."""
    setting = analyse(records, 0.0, budget, speed_tokens="output")
    figures = {}
    for decoder, st in setting.decoders.items():
        mine = [r for r in records if r.decoder == decoder]
        outside = sum(r.seconds - r.prefill_seconds - sum(sum(r.phase(k)) for k in ON_TARGET) for r in mine)
        rounds = sum(r.rounds for r in mine)
        figures[decoder] = {"tok_per_s": st.speed, "median_wait_ms": 1e3 * (st.phase_median("wait") or 0.0),
                            "median_tree_ms": 1e3 * (st.phase_median("tree") or 0.0),
                            "outside_ms_per_round": 1e3 * outside / rounds, "rounds": rounds}
    return figures


if __name__ == "__main__":
    sys.exit(main())
