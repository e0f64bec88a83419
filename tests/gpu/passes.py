"""One model's passes measured in this process: graph replay against eager rows, and per-pass latencies.

Both runners of a pair use the CUDA buckets and the span ladder (models.hf.graph_spans), so on a GPU they
differ only in graph replay; on the CPU (the rehearsal) neither captures, and the same code runs eagerly.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from models.hf import CUDA_BUCKETS, CUDA_SDPA_BACKENDS, HFRunner, covering_span
from pipeline.tree import Tree
from target_proc.target import Target
from tests.gpu.section import Budget
from tests.models.test_tree_pass import random_tree

ROOT_TOKEN = 7
# Largest |graph - eager| relative to the largest |logit| that still counts as equal: a couple of
# roundings in bf16 or fp16, float32 noise otherwise.
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}


def runner_pair(model, capacity: int, context: int, seed: int = 0) -> dict[str, Target]:
    """{"graph": ..., "eager": ...} targets over one model, both prefilled with the same `context` tokens."""
    prompt = np.random.default_rng(seed).integers(1, 96, context).tolist()
    pair = {}
    for name, graphs in (("graph", True), ("eager", False)):
        pair[name] = Target(HFRunner(model, capacity, graphs=graphs, buckets=CUDA_BUCKETS, attend="ladder"))
        pair[name].prefill(prompt)
    return pair


def chain_tree(n: int) -> Tree:
    """n nodes in 8 chains (the cost of a pass is its row count; the mask's pattern costs nothing)."""
    parent = np.array([-1 if i < 8 else i - 8 for i in range(n)])
    return Tree(np.arange(1, n + 1) % 90 + 1, parent, np.arange(n))


def pass_of(rows: int, tree: Tree | None = None) -> Callable[[Target], torch.Tensor]:
    """A pass of `rows` rows: the root pass for 1, else the root and a tree of rows - 1 nodes."""
    if rows == 1:
        return lambda t: t.root_pass(ROOT_TOKEN)
    tree = tree if tree is not None else chain_tree(rows - 1)
    return lambda t: t.tree_pass(tree, ROOT_TOKEN)


def relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the larger of max |b| and 1. Reads the device: a sync."""
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp(min=1.0))


def span_contexts(spans: tuple[int, ...], capacity: int, rows: int = CUDA_BUCKETS[-1] + 1) -> list[int]:
    """A context for each span of the ladder at which every pass, a root pass to `rows` rows, replays that
    span: past the span below (a root pass uses 2 slots beyond the context: the scratch slot and its own),
    and leaving room for `rows` rows within the span and the cache's `capacity` logical slots."""
    contexts, below = [], 0
    for span in spans:
        context = max(1, below - 1)
        if covering_span(context + 1 + rows) > span or context + rows > capacity:
            raise ValueError(f"a cache of {capacity} slots has no context at which passes of 1 to {rows} rows "
                             f"all attend over its span of {span}")
        contexts.append(context)
        below = span
    return contexts


def watch_replays(target: Target) -> set:
    """The (bucket, span) keys of the graphs `target` replays from now on (the set grows as they replay)."""
    replayed = set()

    class Watched:
        def __init__(self, key, graph):
            self.key, self.graph = key, graph

        def replay(self):
            replayed.add(self.key)
            self.graph.replay()

    runner = target.runner
    runner.graphs = {key: Watched(key, g) for key, g in runner.graphs.items()}
    return replayed


def parity(pair: dict[str, Target], budget: Budget, seed: int = 0) -> tuple[dict[str, float], set]:
    """Relative gap between graph and eager rows for the root pass and a pass of every bucket size, at a
    context in each span of the ladder (span_contexts), and the captured graphs that never replayed.

    Each size runs as a tree pass after the root pass and, up to the largest bucket, as a pass with the
    root as its first row; random trees, so that every pass has its own mask.
    """
    rng = np.random.default_rng(seed)
    replayed = watch_replays(pair["graph"])
    gaps = {}
    for context in span_contexts(pair["graph"].runner.spans, pair["graph"].capacity):
        prompt = rng.integers(1, 96, context).tolist()
        for target in pair.values():
            target.prefill(prompt)
        at = f" at {context} tokens"
        gaps["root pass" + at] = relative_gap(pass_of(1)(pair["graph"]).clone(), pass_of(1)(pair["eager"]))
        for n in sorted(set(CUDA_BUCKETS) | {3, 10, 50}):
            budget.check(f"the passes of {n} rows{at}")
            tree = random_tree(rng, n)
            gaps[f"tree {n}{at}"] = relative_gap(pair["graph"].tree_pass(tree, None).clone(),
                                                 pair["eager"].tree_pass(tree, None))
            if n > 1:
                call = pass_of(n, random_tree(rng, n - 1))
                gaps[f"root+tree {n}{at}"] = relative_gap(call(pair["graph"]).clone(), call(pair["eager"]))
    return gaps, set(pair["graph"].runner.graphs) - replayed


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # a host-device sync, outside the timed region


def timed(fn: Callable[[], object], device: torch.device, reps: int) -> float:
    """Median ms of fn() over `reps` calls after two warm-up calls: CUDA events on a GPU (host launch
    gaps included), perf_counter on the CPU. Each call ends in a sync before the next one starts."""
    for _ in range(2):
        fn()
        synchronize(device)
    times = []
    for _ in range(reps):
        if device.type == "cuda":
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


def first_kernels(device: torch.device, dtype: torch.dtype) -> float:
    """Seconds a first matrix product and attention take: on a GPU, loading cuBLAS and the attention
    kernels (read from disk the first time after a boot), which would else fall on the first section
    that computes."""
    t0 = time.perf_counter()
    x = torch.ones(64, 64, device=device, dtype=dtype)
    q = torch.ones(1, 8, 16, 64, device=device, dtype=dtype)
    allowed = CUDA_SDPA_BACKENDS if device.type == "cuda" else None
    with sdpa_kernel(list(allowed)) if allowed else contextlib.nullcontext():
        (x @ x).sum() + torch.nn.functional.scaled_dot_product_attention(q, q, q).sum()
    synchronize(device)
    return time.perf_counter() - t0


def start_profiler(device: torch.device) -> bool:
    """Profile one small op, so that the profiler (CUPTI on a GPU) is initialised before any graph is
    captured in this process: its first start after a capture has crashed or hung in past releases.
    False when the profiler cannot trace this device."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(64, 64, device=device)
    synchronize(device)
    try:
        with profile(activities=[ProfilerActivity.CUDA if device.type == "cuda" else ProfilerActivity.CPU]):
            (x @ x).sum()
            synchronize(device)
    except RuntimeError as e:
        print(f"  the profiler failed to start, no kernel times: {e}")
        return False
    return True


def device_ms(events, on_cuda: bool) -> float:
    """Summed self time of `events` (profiler key averages), each microsecond counted once, in ms.

    On a GPU only the kernels' own entries (device type CUDA) count: the aten op that launched a kernel
    carries the same time again as its self device time. On the CPU, the operators' self CPU time.
    """
    from torch.autograd import DeviceType

    if on_cuda:
        return sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e3
    return sum(e.self_cpu_time_total for e in events) / 1e3


def kernel_ms(fn: Callable[[], object], device: torch.device) -> float | None:
    """Summed time of the kernels (on the CPU: of the operators) of one call, by torch.profiler; None
    when the profiler cannot trace this device (no CUPTI) or saw nothing. Start the profiler once
    (start_profiler) before graphs are captured in this process."""
    from torch.profiler import ProfilerActivity, profile

    on_cuda = device.type == "cuda"
    fn()
    synchronize(device)
    try:
        with profile(activities=[ProfilerActivity.CUDA if on_cuda else ProfilerActivity.CPU]) as prof:
            fn()
            synchronize(device)
    except RuntimeError as e:  # the other columns stand without this one
        print(f"  the profiler failed, no kernel times: {e}")
        return None
    return device_ms(prof.key_averages(), on_cuda) or None


@contextlib.contextmanager
def whole_cache(target: Target):
    """Within it, `target`'s passes attend over its whole cache (the largest captured span), whatever the
    context: what a pass cost before the span ladder."""
    runner = target.runner
    spans = runner.spans
    runner.spans = spans[-1:]
    try:
        yield
    finally:
        runner.spans = spans


def pass_times(pair: dict[str, Target], rows: tuple[int, ...], reps: int, budget: Budget,
               measured: Callable[[int, dict], None]) -> None:
    """Per row count, to `measured` as soon as it is timed: median eager and graph-replay ms (over the span
    covering the context, and over the whole cache)."""
    device = pair["eager"].device
    for n in rows:
        budget.check(f"timing passes of {n} rows")
        call = pass_of(n)
        times = {"eager_ms": timed(lambda: call(pair["eager"]), device, reps),
                 "graph_ms": timed(lambda: call(pair["graph"]), device, reps)}
        with whole_cache(pair["graph"]):
            times["whole_ms"] = timed(lambda: call(pair["graph"]), device, reps)
        measured(n, times)


def kernel_times(pair: dict[str, Target], rows: tuple[int, ...], budget: Budget,
                 measured: Callable[[int, float | None], None]) -> None:
    """Per row count, to `measured` as soon as it is profiled: the eager pass's kernel ms (kernel_ms)."""
    for n in rows:
        budget.check(f"profiling passes of {n} rows")
        call = pass_of(n)
        measured(n, kernel_ms(lambda: call(pair["eager"]), pair["eager"].device))


def sdpa_backend(device, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, rows: int,
                 slots: int, cache: int | None = None) -> str:
    """The SDPA backend torch picks for a padded pass of `rows` rows over `slots` cache slots, by name; K/V
    the first `slots` of a cache of `cache` slots (a strided view, as a span of the ladder is), else whole.

    Asks torch's dispatcher, under the backends HFRunner allows on that device, with tensors of the
    pass's shapes (a private torch function: "unknown" where it is missing).
    """
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "unknown"
    folded = heads // kv_heads * rows  # query rows per K/V head, as _static_tree_attention folds them
    q = torch.zeros(1, kv_heads, folded, head_dim, dtype=dtype, device=device)
    k = torch.zeros(1, kv_heads, cache or slots, head_dim, dtype=dtype, device=device)[:, :, :slots]
    mask = torch.zeros(1, 1, folded, slots, dtype=dtype, device=device)
    allowed = CUDA_SDPA_BACKENDS if torch.device(device).type == "cuda" else None
    with sdpa_kernel(list(allowed)) if allowed else contextlib.nullcontext():
        choice = int(choose(q, k, k, mask))
    names = {int(member.value): name for name, member in SDPBackend.__members__.items()}
    return names.get(choice, str(choice)).lower()
