"""This device's pass times for budget auto (pipeline.budget turns them into each rule's costs): a plain
round, the root pass while the drafter works, tree passes of each candidate size, the prefill, alone and
beside the drafter (as a decode's first round starts it, on PREFILL tokens), and the drafter's pool after a
one-token commit, timed on a scratch context (docs/budget-auto.md says why each is timed, not learnt).

What was timed is kept (PassTimes) beside the CPU linear kernels' choice, under a key of everything the timings
depend on (`timing_key`), so that later starts on this machine reuse it: `kept_or_measured`. `--retime`
(ModelOptions.retime) times them again."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from evaluation.record import machine_load
from models.kept_file import KeptFile
from models.kernel_cache import default_path, processor, usable_cpus
from pipeline.budget import MeasuredPasses, candidate_sizes
from pipeline.config import MAX_POOL_CANDIDATES, is_int
from pipeline.decode import DrafterClient, takes_features
from pipeline.feed import DrafterFeed
from pipeline.tree import Tree
from target_proc.target import Target

CONTEXT = 64  # scratch tokens before the timed passes (fewer where the cache is smaller)
PREFILL = 256  # scratch tokens of the prefill timed beside the drafter's start (fewer where the cache is smaller)
# What the timing took for the embedded pair on two shared CPU cores at the default --budget-max: 6.2-6.4 s from
# the command line (`launch/pair.sh sweep`, `launch/pair.sh --budget auto`) at a load average about 1.5, 46 s
# at about 3 and minutes above (47 s was once seen through the Python API): said before it starts, as a hint.
TYPICAL = "about 5-10 s for the embedded pair on two CPU cores, a minute or more while other work shares them"
REPS = 3  # timings of each pass after an untimed one
FORMAT = 1  # of the kept file; also in each key: a change to what is timed, or how, makes earlier timings another key's
FILE_NAME = "pass-timings.json"  # beside the kernels' choice (models.kernel_cache.default_path)

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


def measure(target: Target, cap: int, reps: int = REPS, drafter: DrafterClient | None = None,
            pool_size: int = 0) -> MeasuredPasses:
    """Seconds of a plain pass, a root pass beside the drafter, tree passes of every candidate size,
    without (root-pass rules) and with (draft) the root's row, of the prefill per token, alone and beside
    the drafter, and with a `drafter` (whose pools hold up to `pool_size` candidates) of its pool after a
    one-token commit. Leaves the cache to the next prefill and the drafter without a request. Says on the log
    when it starts (with how long it typically takes) and when it is done."""
    t0 = time.perf_counter()
    sizes = [b for b in candidate_sizes(cap) if b]
    # At WARNING, so that the Python API (which logs at WARNING by default) says it too: seconds of waiting (a
    # minute on a busy machine) before a first decode must not pass in silence.
    log.warning("budget auto: timing this machine's passes (%d kinds of pass, %d times each; %s)",
                4 + 2 * len(sizes) + (drafter is not None), reps + 1, TYPICAL)
    out = _measure(target, cap, sizes, reps)
    if drafter is not None:
        out = dataclasses.replace(out, pool=pool_seconds(target, drafter, pool_size, reps))
        if takes_features(drafter):  # a head starts after the prefill whose features it reads, which runs as
            out = dataclasses.replace(out, prefill_shared=out.prefill)  # alone: its start adds nothing to it
        elif both := prefill_seconds(target, drafter, pool_size, reps):
            out = dataclasses.replace(out, prefill=both[0], prefill_shared=both[1])
    log.warning("budget auto: passes timed in %.1f s (a plain pass %.1f ms, the drafter's pool %.1f ms)",
                time.perf_counter() - t0, 1000 * out.plain, 1000 * out.pool)
    return out


def pool_seconds(target: Target, drafter: DrafterClient, pool_size: int, reps: int) -> float:
    """The fastest seconds from a one-token commit to its pool (a steady round's request; the target idle) on a
    scratch context, after the drafter's first pool and one untimed commit; 0 where the cache has no room
    for a context of two tokens and the pool. Leaves the cache to the next prefill."""
    vocab = target.runner.vocab_size
    context = min(CONTEXT, target.capacity - pool_size - reps - 3)  # the drafter's cache is as large
    if context < 2 or vocab < 2:
        return 0.0
    history = [1 + i % (vocab - 1) for i in range(context)]
    feed = DrafterFeed(drafter, 0, target.features if takes_features(drafter) else None)
    target.prefill(history[:-1])
    feed.ask(history)  # the drafter's prefill and first pool, untimed
    drafter.pool()
    times = []
    for _ in range(reps + 1):
        target.root_pass(history[-1])  # writes the root (and its features): committed below
        target.commit([])
        history.append(1 + len(history) % (vocab - 1))
        t0 = time.perf_counter()
        feed.ask(history)
        drafter.pool()
        times.append(time.perf_counter() - t0)
    target.synchronize()
    feed.end()
    target.before_root = 0
    return min(times[1:])  # the fastest, as for the passes (see fastest)


def prefill_seconds(target: Target, drafter: DrafterClient, pool_size: int, reps: int) -> tuple[float, float] | None:
    """Seconds per token of the target's prefill of a scratch prompt, alone and beside a standalone drafter's
    start on it (its prefill and first pool, as a decode's first round starts it: the target leaves the drafter
    its cores until the pool is there), the fastest of `reps` of each, interleaved, after one untimed call of
    each; None where the cache holds no scratch prompt of CONTEXT tokens beside the pool. Leaves the cache to
    the next prefill and the drafter without a request."""
    vocab = target.runner.vocab_size
    n = min(PREFILL, target.capacity - pool_size - 2)
    if n < CONTEXT or vocab < 2:
        return None
    history = [1 + (7 * i) % (vocab - 1) for i in range(n + 1)]

    def alone() -> float:
        t0 = time.perf_counter()
        target.prefill(history[:-1])
        target.synchronize()
        return time.perf_counter() - t0

    def shared() -> float:
        t0 = time.perf_counter()
        feed = DrafterFeed(drafter, 0)
        feed.ask(history)
        target.prefill(history[:-1], overlapped=feed.waiting)
        target.synchronize()
        seconds = time.perf_counter() - t0
        drafter.pool()  # untimed: the first round waits for it (its front, not the prefill's)
        feed.end()
        return seconds

    alone(), shared()  # untimed
    best = {"alone": float("inf"), "shared": float("inf")}
    for _ in range(reps):  # interleaved, the fastest of each (see fastest)
        best["alone"] = min(best["alone"], alone())
        best["shared"] = min(best["shared"], shared())
    target.before_root = 0
    return best["alone"] / n, best["shared"] / n


def _measure(target: Target, cap: int, sizes: list[int], reps: int) -> MeasuredPasses:
    tokens = list(range(1, max(1, min(CONTEXT, target.capacity - 1 - cap)) + 1))  # room for the largest tree

    def prefill(shared: bool) -> None:
        target.prefill(tokens, overlapped=shared)
        target.synchronize()

    read = lambda logits: float(logits.reshape(-1)[0])  # noqa: E731  (a host read: the pass is done)
    kinds = {"prefill_shared": lambda: prefill(True), "prefill": lambda: prefill(False),  # these fill the cache
             "plain": lambda: read(target.root_pass(5)),
             "overlapped": lambda: read(target.root_pass(5, overlapped=True)),
             **{("tree", b): lambda b=b: read(target.tree_pass(chain_tree(b), None)) for b in sizes},
             **{("tree_with_root", b): lambda b=b: read(target.tree_pass(chain_tree(b), 5)) for b in sizes}}
    best = fastest(kinds, reps)
    target.before_root = 0
    return MeasuredPasses(plain=best["plain"], overlapped=best["overlapped"],
                          tree={b: best["tree", b] for b in sizes},
                          tree_with_root={b: best["tree_with_root", b] for b in sizes},
                          prefill=best["prefill"] / len(tokens), prefill_shared=best["prefill_shared"] / len(tokens))


def fastest(kinds: dict, reps: int) -> dict:
    """The fastest of `reps` timings of each of `kinds` (name -> a call that ends in a host read), after one
    untimed call of each. The reps go round all kinds in turn, so a moment in which another process took the
    cores slows one timing of several kinds rather than every timing of one: on a shared machine the fastest
    timing of a pass is what the pass takes, and slow moments are what rounds meet (and what costs follow)."""
    for fn in kinds.values():
        fn()
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(reps):
        for kind, fn in kinds.items():
            t0 = time.perf_counter()
            fn()
            best[kind] = min(best[kind], time.perf_counter() - t0)
    return best


class PassTimes(KeptFile):
    """The kept pass timings: {key as canonical JSON: (MeasuredPasses, when they were timed, the machine's load
    average then)}."""

    noun = "budget auto's kept pass timings"
    redo = "the passes are timed again"

    def __init__(self, path: Path | str | None = None) -> None:
        super().__init__(path if path is not None else default_path().with_name(FILE_NAME))

    def entries(self, document) -> dict[str, tuple[MeasuredPasses, str, float]]:
        if not (isinstance(document, dict) and document.get("format") == FORMAT
                and isinstance(document["entries"], list)):
            raise ValueError(f"expected an object with \"format\": {FORMAT} and a list of \"entries\"")
        return dict(_entry(i, entry) for i, entry in enumerate(document["entries"]))

    def document(self, entries: dict[str, tuple[MeasuredPasses, str, float]]) -> dict:
        return {"format": FORMAT, "entries": [{"key": json.loads(k), "passes": dataclasses.asdict(p), "timed": when,
                                               "load": load} for k, (p, when, load) in entries.items()]}


def _entry(i: int, entry) -> tuple[str, tuple[MeasuredPasses, str, float]]:
    """A kept entry as PassTimes holds it; ValueError, TypeError or KeyError for anything else."""
    if not (isinstance(entry, dict) and set(entry) == {"key", "passes", "timed", "load"}
            and isinstance(entry["key"], dict) and isinstance(entry["timed"], str)
            and isinstance(entry["load"], (int, float)) and math.isfinite(entry["load"]) and entry["load"] >= 0):
        raise ValueError(f"entry {i} is not {{\"key\": {{...}}, \"passes\": {{...}}, \"timed\": \"...\", "
                         f"\"load\": N}}")
    passes, cap = _passes(entry["passes"]), entry["key"]["cap"]
    if not (is_int(cap) and 0 < cap <= MAX_POOL_CANDIDATES and sorted(passes.tree) == list(candidate_sizes(cap)[1:])):
        raise ValueError(f"entry {i}'s tree passes are not those of its cap, {cap!r:.20}")
    return canonical(entry["key"]), (passes, entry["timed"], float(entry["load"]))


def _passes(fields) -> MeasuredPasses:
    """A kept entry's timings; ValueError or TypeError for anything else."""
    if not isinstance(fields, dict) or not all(isinstance(fields.get(n), dict) for n in ("tree", "tree_with_root")):
        raise ValueError("its passes are not an object with \"tree\" and \"tree_with_root\" objects")
    by_size = {n: {int(b): float(t) for b, t in fields[n].items()} for n in ("tree", "tree_with_root")}
    return MeasuredPasses(**{**fields, **by_size})


def canonical(key: dict) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def timing_key(target: Target, models: dict, pool_size: int, cap: int, reps: int = REPS) -> dict:
    """What this device's pass timings depend on: the machine (processor, the target's GPU, the cores this
    process may use, torch), the target's CPU threads, both models as records name them (dtype, device and
    linear kernels with them), the pool, the cap and the cache's size (the scratch context's room)."""
    gpu = torch.cuda.get_device_name(target.device) if target.device.type == "cuda" else None
    return {"format": FORMAT, "cpu": processor(), "gpu": gpu, "cpus": usable_cpus(),
            "torch": torch.__version__, "threads": list(target.threads or ()), "target": models.get("target"),
            "drafter": models.get("drafter"), "pool": pool_size, "cap": cap, "capacity": target.capacity,
            "reps": reps}


def kept_or_measured(kept: PassTimes, key: dict, timed: Callable[[], MeasuredPasses],
                     retime: bool = False) -> MeasuredPasses:
    """The timings `kept` holds under `key` (said in one line), else (or with `retime`) `timed()`'s, then kept."""
    entry = None if retime else kept.read().get(canonical(key))
    if entry is not None:
        passes, when, load = entry
        log.info("budget auto: pass timings as kept in %s (timed %s at a load average of %.1f on %d CPUs: a plain "
                 "pass %.1f ms, the drafter's pool %.1f ms); --retime times them again", kept.path, when, load,
                 key["cpus"], 1000 * passes.plain, 1000 * passes.pool)
        return passes
    passes = timed()
    if kept.add({canonical(key): (passes, time.strftime("%Y-%m-%d %H:%M"), machine_load())}):
        log.info("budget auto: pass timings kept in %s for later starts on this machine", kept.path)
    return passes
