"""This device's pass times for budget auto (pipeline.budget turns them into each rule's costs): a plain
round, the root pass while the drafter works, tree passes of each candidate size and the prefill, alone and
beside the drafter, timed once on a scratch context before the first decode that needs them."""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.budget import MeasuredPasses, candidate_sizes
from pipeline.tree import Tree
from target_proc.target import Target

CONTEXT = 64  # scratch tokens before the timed passes (fewer where the cache is smaller)
# What the timing took for the embedded pair on two shared CPU cores (30 s from the command line, 47 s through
# the Python API, at the default --budget-max): said before it starts, as a hint of the wait.
TYPICAL = "about 30-50 s for the embedded pair on two CPU cores"

log = logging.getLogger("budget")


def chain_tree(n: int) -> Tree:
    """n nodes in four chains: the cost of a tree pass depends on its size, not its shape."""
    parent = np.array([-1 if i < 4 else i - 4 for i in range(n)], np.int64)
    return Tree(np.arange(1, n + 1, dtype=np.int64), parent, np.arange(n, dtype=np.int64))


def timed(fn, reps: int) -> float:
    """Median seconds of fn() after one untimed call; fn's own host read (a sync) ends each call."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure(target: Target, cap: int, reps: int = 3) -> MeasuredPasses:
    """Seconds of a plain pass, a root pass beside the drafter, tree passes of every candidate size,
    without (root-pass rules) and with (draft) the root's row, and of the prefill per token, alone and beside
    the drafter. Leaves the cache to the next prefill. Says on the log when it starts (with how long it
    typically takes) and when it is done."""
    t0 = time.perf_counter()
    sizes = [b for b in candidate_sizes(cap) if b]
    # At WARNING, so that the Python API (which logs at WARNING by default) says it too: half a minute of
    # waiting before a first decode must not pass in silence.
    log.warning("budget auto: timing this machine's passes once per session (%d kinds of pass, %d times each; %s) "
                "before the first decode", 4 + 2 * len(sizes), reps + 1, TYPICAL)
    out = _measure(target, cap, sizes, reps)
    log.info("budget auto: passes timed in %.1f s (a plain pass %.1f ms)", time.perf_counter() - t0, 1000 * out.plain)
    return out


def _measure(target: Target, cap: int, sizes: list[int], reps: int) -> MeasuredPasses:
    tokens = list(range(1, max(1, min(CONTEXT, target.capacity - 1 - cap)) + 1))  # room for the largest tree

    def prefill(shared: bool) -> None:
        target.prefill(tokens, overlapped=shared)
        target.synchronize()

    shared, alone = (timed(lambda: prefill(s), reps) / len(tokens) for s in (True, False))  # cache filled
    read = lambda logits: float(logits.reshape(-1)[0])  # noqa: E731  (a host read: the pass is done)
    out = MeasuredPasses(
        plain=timed(lambda: read(target.root_pass(5)), reps),
        overlapped=timed(lambda: read(target.root_pass(5, overlapped=True)), reps),
        tree={b: timed(lambda b=b: read(target.tree_pass(chain_tree(b), None)), reps) for b in sizes},
        tree_with_root={b: timed(lambda b=b: read(target.tree_pass(chain_tree(b), 5)), reps) for b in sizes},
        prefill=alone, prefill_shared=shared)
    target.before_root = 0
    return out
