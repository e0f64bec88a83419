"""python -m bench.overlap: what running the two processes side by side costs: each pass alone and beside the other's.

python -m bench.overlap [--pairs root:drafter,drafter:root,tree:drafter,compute:compute,memory:memory]
                        [--context 40] [--reps 9]

A pipelined round overlaps the target's root pass with the drafter's round, and drafting ahead overlaps
the drafter with the tree pass. On one machine the two processes run on different cores but share the
memory bus and the last-level cache, so a pass beside the other process's can take longer than alone, and
the round gains less than the sum of the two passes. Each pair MEASURED:BESIDE times MEASURED on one thread
with the other core idle and with a second process running BESIDE in a loop on one thread, both ways in
every repetition (either first in alternate repetitions), so that drift on a shared machine falls on both
alike. A slowdown is the median of the per-repetition ratios beside / alone, with its quartiles.

Workloads (WORKLOADS): the default pair's target root pass and tree pass of 8 nodes, and the int8
drafter's round (committing three tokens and growing a full CPU pool), at --context tokens; and two
synthetic ones that tell the shared resource: products of small matrices that stay in each core's cache
(compute-bound), and products of one row with a matrix larger than the last-level cache (memory-bound).
Two cores doing MEASURED and BESIDE together give 1/s_measured + 1/s_beside cores' work for one core's
(2.0 when nothing is shared); that figure needs both directions of a pair (for example root:drafter and
drafter:root), and the two give the wait for the drafter that a pipelined round implies: the drafter's
round beside the root pass, less the root pass beside it. The load average is printed before and after;
the last line of the output is one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from bench.common import at_least, bench_parser, close, command_line, load_bracket, paired_ratios, refuse, spread
from pipeline.config import ConfigError, split_list

WORKLOADS = {
    "root": "target root pass",
    "tree": "target tree pass B=8",
    "drafter": "drafter round",
    "compute": "256x256 products",
    "memory": "row x 64 MiB matrix",
}
DEFAULT_PAIRS = "root:drafter,drafter:root,tree:drafter,compute:compute,memory:memory"
START_TIMEOUT_S = 600.0  # loading the models in the background process


def workloads(names: set[str], context: int) -> dict[str, Callable[[], None]]:
    """name -> a call that runs one pass of it and waits for its result, each built once."""
    import torch

    from bench.passes import drafter_step, least_capacity, target_passes
    from models.load import load
    from models.options import ModelOptions

    out: dict[str, Callable[[], None]] = {}
    capacity = least_capacity([context], [8])
    if names & {"root", "tree"}:
        passes = target_passes(load(ModelOptions(), "target").model, context, capacity, "eager", [8])
        out["root"], out["tree"] = passes["root pass"], passes["tree pass B=8"]
    if "drafter" in names:
        model = load(ModelOptions(model="smollm2:int8"), "drafter").model
        out["drafter"] = drafter_step(model, context, capacity, "eager")["drafter step"]
    if "compute" in names:
        a = torch.randn(256, 256)  # 256 KiB: stays in a core's own cache

        def compute() -> None:
            for _ in range(200):
                a @ a
        out["compute"] = compute
    if "memory" in names:
        w, x = torch.randn(4096, 4096), torch.randn(1, 4096)  # 64 MiB of float32: twice the last-level cache

        def memory() -> None:
            for _ in range(10):
                x @ w.T
        out["memory"] = memory
    return {name: out[name] for name in names}


def _background(names: list[str], context: int, conn) -> None:
    """The second process: build `names`, then run the one the parent names in a loop until told to pause
    (None) or to stop ("exit"). Acknowledges each start after a whole pass, and each pause when the pass in
    flight is done, so the parent times only while the loop runs and only after it rests."""
    import torch

    torch.set_num_threads(1)
    try:
        calls = workloads(set(names), context)
        for fn in calls.values():
            fn()
    except Exception as e:  # the parent reports it, naming the workload
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None))
    running = None
    while True:
        if running is None or conn.poll():
            try:
                msg = conn.recv()
            except EOFError:  # the parent is gone
                return
            if msg == "exit":
                return
            running = msg
            if running is None:
                conn.send(("paused", None))
                continue
            calls[running]()
            conn.send(("running", None))
        calls[running]()


class Beside:
    """The background process, started with the workloads it may run."""

    def __init__(self, names: list[str], context: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch state shared with this one
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_background, args=(names, context, child), daemon=True)
        self.process.start()
        self._expect("ready", START_TIMEOUT_S)

    def _expect(self, what: str, timeout: float) -> None:
        try:
            if not self.conn.poll(timeout):
                raise RuntimeError(f"the background process did not answer {what!r} in {timeout:.0f} s")
            got, detail = self.conn.recv()
        except (EOFError, OSError):
            raise self._ended() from None
        if got != what:
            raise RuntimeError(f"the background process failed: {detail}" if got == "failed" else
                               f"the background process answered {got!r}, expected {what!r}")

    def _send(self, msg) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            raise self._ended() from None

    def _ended(self) -> RuntimeError:
        self.process.join(10)
        return RuntimeError(f"the background process ended (exit code {self.process.exitcode})")

    def run(self, name: str) -> None:
        self._send(name)
        self._expect("running", 120.0)

    def pause(self) -> None:
        self._send(None)
        self._expect("paused", 120.0)

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send("exit")
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


def measure(pairs: list[tuple[str, str]], context: int, reps: int) -> dict:
    """(measured, beside) -> {"alone": seconds of each repetition, "beside": ...}."""
    import torch

    torch.set_num_threads(1)
    calls = workloads({m for m, _ in pairs}, context)
    background = Beside(sorted({b for _, b in pairs}), context)
    try:
        for fn in calls.values():  # warm-up, the other core idle
            fn(), fn()
        times = {pair: {"alone": [], "beside": []} for pair in pairs}
        for rep in range(reps):
            for measured, beside in pairs:
                for how in (("alone", "beside") if rep % 2 == 0 else ("beside", "alone")):
                    if how == "beside":
                        background.run(beside)
                    t0 = time.perf_counter()
                    calls[measured]()
                    times[(measured, beside)][how].append(time.perf_counter() - t0)
                    if how == "beside":
                        background.pause()
        return times
    finally:
        background.close()


def two_cores(slowdowns: dict[tuple[str, str], float]) -> dict[str, float]:
    """"a:b" -> cores' work two cores give running a and b together (1/s_ab + 1/s_ba), for pairs timed both
    ways (a workload beside itself counts once for both)."""
    out = {}
    for (a, b), s in slowdowns.items():
        if (b, a) in slowdowns and f"{b}:{a}" not in out:
            out[f"{a}:{b}"] = 1 / s + 1 / slowdowns[(b, a)]
    return out


@dataclass(frozen=True, slots=True)
class OverlapOptions:
    """Workloads"""

    pairs: str = field(default=DEFAULT_PAIRS, metadata={
        "help": f"MEASURED:BESIDE workload pairs of {', '.join(WORKLOADS)}, comma-separated", "metavar": "LIST"})
    context: int = field(default=40, metadata={"help": "tokens of context before the model passes"})
    reps: int = field(default=9, metadata={"help": "repetitions of every pair, both ways"})

    def __post_init__(self) -> None:
        pairs(self.pairs)
        at_least("context", self.context, 2)
        at_least("reps", self.reps, 1)


def pairs(text: str) -> list[tuple[str, str]]:
    """The distinct (measured, beside) pairs of a comma-separated list of MEASURED:BESIDE."""
    found = []
    for item in split_list(text) or [text]:
        parts = item.split(":")
        if len(parts) != 2 or not set(parts) <= set(WORKLOADS):
            raise ConfigError("pairs", f"takes MEASURED:BESIDE pairs of {', '.join(WORKLOADS)}, comma-separated, "
                                       f"got {item!r}")
        found.append((parts[0], parts[1]))
    return list(dict.fromkeys(found))


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(OverlapOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    if len(os.sched_getaffinity(0)) < 2:
        refuse(__spec__.name, "this benchmark runs two processes side by side: it needs two or more cores")
    with load_bracket() as load:
        print(f"load average before: {load['before']}, 1 thread a process, {len(os.sched_getaffinity(0))} cores")
        times = measure(pairs(options.pairs), options.context, options.reps)
    print(f"median ms [quartiles] over {options.reps} repetitions, {options.context} tokens of context; slowdown "
          f"beside / alone per repetition")
    results, slowdowns = {}, {}
    for (measured, beside), t in times.items():
        ms = {how: spread(1e3 * np.asarray(t[how])) for how in ("alone", "beside")}
        slowdown = paired_ratios(t["alone"], t["beside"])
        slowdowns[(measured, beside)] = slowdown["median"]
        results[f"{measured}:{beside}"] = {"ms": ms, "slowdown": slowdown}
        a, b = ms["alone"], ms["beside"]
        print(f"  {WORKLOADS[measured]:<21} alone {a['median']:7.1f} [{a['q1']:6.1f},{a['q3']:6.1f}]  beside "
              f"{WORKLOADS[beside]:<21} {b['median']:7.1f} [{b['q1']:6.1f},{b['q3']:6.1f}]  slowdown "
              f"{slowdown['median']:.3f} [{slowdown['q1']:.3f}, {slowdown['q3']:.3f}]")
    together, wait = summary_lines(results, slowdowns)
    print(f"load average after: {load['after']}")
    close({"context": options.context, "reps": options.reps, "pairs": results, "two_cores": together,
           "implied_wait_ms": wait, "load_average": load})
    return 0


def summary_lines(results: dict, slowdowns: dict) -> tuple[dict, float | None]:
    """The cores' work of pairs timed both ways and the wait for the drafter they imply, printed."""
    together = two_cores(slowdowns)
    if together:
        print("cores' work two cores give, running both together: "
              + ", ".join(f"{pair} {work:.2f}" for pair, work in together.items()))
    wait = None
    if {"root:drafter", "drafter:root"} <= set(results):
        wait = results["drafter:root"]["ms"]["beside"]["median"] - results["root:drafter"]["ms"]["beside"]["median"]
        print(f"a pipelined round's wait for the drafter these imply (its round beside the root pass, less the root "
              f"pass beside it): {wait:.1f} ms")
    return together, wait


if __name__ == "__main__":
    sys.exit(main())
