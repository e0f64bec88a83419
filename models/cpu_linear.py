"""Linear layers on the CPU through the fastest of torch's kernels for each weight shape and row count.

`tune` times the candidates on the model's own weights at load and keeps, per shape and row class, the fastest
where it beats the stock kernel clearly; the choice is kept per machine, thread count and torch version
(models.kernel_cache). DESIGN.md section 7 says why and what it costs in memory. Every row of a pass comes from
one kernel; rounding differs from `F.linear` in the last bits, as it already does between BLAS paths.

Kernels: `stock` F.linear(x, W); `transposed` x @ Wt with Wt = W.T stored contiguous; `packed` oneDNN's
linear on a copy of W reordered for it. Only the representations some row class uses are kept besides W,
which stays (tied embeddings read it)."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from models.kernel_cache import Key, KernelCache, processor
from models.memory import free_bytes

# Row classes: a pass of n rows uses the kernel tuned for the first class bound >= n, timed at that bound.
# Passes of more rows (prefill chunks, the largest trees) run the stock kernel: there the kernels measured
# alike, and the output layer of a prefill computes one row.
ROW_CLASSES = (1, 8, 64)
MIN_GAIN = 1.1  # another kernel replaces the stock one only when this much faster: noise must not flip choices
TIMED_BYTES = 32 << 20  # weights timed per shape, at most: about a large L3, so most come from memory
MIN_BYTES = 1 << 20  # shapes whose weights total less are left stock: they sit in cache, timings are noise
REPS = 3
PACK_HINT = 16  # rows oneDNN is told to expect when it reorders a weight
MEMORY_SHARE = 0.25  # the most of the memory available that the copies of one shape may take
_CLASS_OF = [int(np.searchsorted(ROW_CLASSES, n)) for n in range(ROW_CLASSES[-1] + 1)]  # rows -> class index

log = logging.getLogger(__name__)


def _stock(x, layer):
    return F.linear(x, layer.weight, layer.bias)


def _transposed(x, layer):
    y = x @ layer.transposed
    return y if layer.bias is None else y + layer.bias


def _packed(x, layer):
    return torch.ops.mkldnn._linear_pointwise(x, layer.packed, layer.bias, "none", [], "")


KERNELS: dict[str, Callable] = {"stock": _stock, "transposed": _transposed, "packed": _packed}


class TunedLinear(nn.Module):
    """An nn.Linear whose forward runs, for each row class, the kernel `choice` names (ROW_CLASSES order).
    The copies a kernel reads are made here from the weight as it is now; a weight changed since (in place, replaced,
    moved or cast) makes every class run F.linear, so a copy can never give stale rows."""

    def __init__(self, linear: nn.Linear | SimpleNamespace, choice: tuple[str, ...],
                 keep: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # the same Parameters: ties and state_dict hold
        self.choice = choice
        self.stock = False  # `stock_kernels` sets it: every class through F.linear
        keep = choice if keep is None else keep  # the copies to make (probes keep every kernel's)
        w = linear.weight.detach()
        self.transposed = w.t().contiguous() if "transposed" in keep else None
        self.packed = _pack(w) if "packed" in keep else None
        self._kernels = tuple(KERNELS[name] for name in choice)
        self._made_from = self._weight_state()

    def __deepcopy__(self, memo: dict) -> TunedLinear:
        """A copy tuned alike, made from copies of the Parameters (through `memo`, so ties hold); the prepacked
        copy is an opaque tensor that deepcopy cannot copy, so it is made again."""
        source = SimpleNamespace(in_features=self.in_features, out_features=self.out_features,
                                 weight=copy.deepcopy(self.weight, memo), bias=copy.deepcopy(self.bias, memo))
        new = memo[id(self)] = TunedLinear(source, self.choice)
        new.stock = self.stock
        return new

    def _weight_state(self) -> tuple[int, int]:
        return self.weight.data_ptr(), self.weight._version  # a cast or a move makes another tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if self.stock or rows > ROW_CLASSES[-1] or x.dtype != torch.float32 \
                or self._weight_state() != self._made_from:
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, self.in_features)
        return self._kernels[_CLASS_OF[rows]](flat, self).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kernels={','.join(self.choice)}"


def _pack(w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(w, PACK_HINT)


def available() -> list[str]:
    """The kernels this torch build runs correctly (`packed` needs oneDNN and its private linear ops)."""
    names = ["stock", "transposed"]
    try:
        g = torch.Generator().manual_seed(0)  # the global generator is left as it was
        w, x = torch.randn(24, 40, generator=g), torch.randn(3, 40, generator=g)
        y = torch.ops.mkldnn._linear_pointwise(x, _pack(w), None, "none", [], "")
        if torch.allclose(y, F.linear(x, w), rtol=1e-4, atol=1e-4):
            names.append("packed")
    except (AttributeError, RuntimeError):
        pass
    return names


def tune(model: nn.Module, kernels: list[str] | None = None, timer: Callable | None = None, *,
         cache: KernelCache | None = None, retune: bool = False) -> dict:
    """Replace every float32 CPU nn.Linear of `model` by a TunedLinear with the fastest kernel of each row class for its
    weight shape -> {"OUTxIN": [kernel per row class]} for the shapes tuned (others stay stock; " with bias" follows the
    shape of layers with a bias). A shape is left stock, untimed, where the copies of every kernel could take more than
    MEMORY_SHARE of the memory available. cache: the machine's kept choices (models.kernel_cache): a shape timed before
    under the same key (processor, threads, torch, dtype, shape, row classes, kernels) takes its kept choice; those
    timed here are added to it. retune: time every shape again (and keep the new choices). timer(fn) -> seconds of one
    call (tests give their own); the default is the wall clock."""
    kernels = kernels or available()
    t0 = time.perf_counter()
    groups = _tunable(model, kernels)
    machine = processor()
    keys = {shape: _key(machine, shape, kernels) for shape in groups}
    kept = cache.read() if cache is not None and not retune else {}
    todo = [shape for shape in groups if keys[shape] not in kept]
    if todo:
        log.info("timing the CPU linear kernels of %d weight shape%s at %d thread%s (%s)", len(todo),
                 "s" * (len(todo) > 1), torch.get_num_threads(), "s" * (torch.get_num_threads() > 1),
                 "once per machine: kept in %s" % cache.path if cache is not None else "not kept")
    choices = {shape: kept.get(keys[shape]) or _choose(groups[shape], kernels, timer or _wall) for shape in groups}
    if todo and cache is not None:
        cache.add({keys[shape]: choices[shape] for shape in todo})
    chosen = {}
    for shape, choice in choices.items():
        if any(name != "stock" for name in choice):
            chosen[_name(shape)] = list(choice)
            _replace(groups[shape], choice)
    if chosen:
        where = f"timed in {time.perf_counter() - t0:.1f} s" if todo else f"as kept in {cache.path}"
        log.info("linear kernels by row class %s, %s, %.0f MiB of weight copies: %s", ROW_CLASSES, where,
                 copies_bytes(model) / 2**20, chosen)
    return chosen


Members = list[tuple[nn.Module, str, nn.Linear]]  # (parent, attribute, layer) of every use of a weight shape


def _tunable(model: nn.Module, kernels: list[str]) -> dict[tuple[int, int, bool], Members]:
    """(out, in, bias) -> the layers of that shape worth timing: float32 on the CPU, not too small, and whose
    copies would not crowd the memory (said in a warning)."""
    groups: dict[tuple[int, int, bool], Members] = {}
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32:
                groups.setdefault((*child.weight.shape, child.bias is not None), []).append((parent, name, child))
    out = {}
    for (out_f, in_f, bias), members in groups.items():
        weights = sum(layer.weight.numel() * 4 for layer in dict.fromkeys(child for _, _, child in members))
        if weights < MIN_BYTES:
            continue
        if (most := weights * (len(kernels) - 1)) > MEMORY_SHARE * _available_bytes():  # every kernel's copies
            log.warning("linear layers %dx%d left on the stock kernel: their tuned copies (up to %.0f MiB) could "
                        "take more than %d%% of the memory available", out_f, in_f, most / 2**20,
                        100 * MEMORY_SHARE)
            continue
        out[out_f, in_f, bias] = members
    return out


def _name(shape: tuple[int, int, bool]) -> str:
    out_f, in_f, bias = shape
    return f"{out_f}x{in_f}" + (" with bias" if bias else "")


def _key(machine: str, shape: tuple[int, int, bool], kernels: list[str]) -> Key:
    """What the choice for `shape` depends on, on processor `machine` at this thread count."""
    return Key(machine, torch.get_num_threads(), torch.__version__, "float32", _name(shape), ROW_CLASSES,
               tuple(kernels))


def _replace(members: Members, choice: tuple[str, ...]) -> None:
    """Put one TunedLinear in place of each layer (a module used twice stays one)."""
    tuned: dict[int, TunedLinear] = {}
    for parent, name, child in members:
        if id(child) not in tuned:
            tuned[id(child)] = TunedLinear(child, choice)
        setattr(parent, name, tuned[id(child)])


def _choose(members: Members, kernels: list[str], timer: Callable) -> tuple[str, ...]:
    """Per row class, the fastest kernel over (some of) the layers, timed in turn REPS times (medians)."""
    layers = list(dict.fromkeys(child for _, _, child in members))
    per = layers[0].weight.numel() * 4
    timed = layers[: max(1, TIMED_BYTES // per)]
    probes = [TunedLinear(layer, ("stock",) * len(ROW_CLASSES), keep=tuple(kernels)) for layer in timed]
    generator = torch.Generator().manual_seed(0)  # the global generator is left as it was
    choice = []
    for rows in ROW_CLASSES:
        x = torch.randn(rows, layers[0].in_features, generator=generator)
        calls = {name: _timed_call(name, x, probes) for name in kernels}
        times = {name: [] for name in kernels}
        with torch.inference_mode():
            for fn in calls.values():  # warm-up
                fn()
            for _ in range(REPS):
                for name, fn in calls.items():
                    times[name].append(timer(fn))
        median = {name: float(np.median(t)) for name, t in times.items()}
        best = min(median, key=median.get)
        choice.append(best if median["stock"] >= MIN_GAIN * median[best] else "stock")
    return tuple(choice)


def _timed_call(name: str, x: torch.Tensor, probes: list[TunedLinear]) -> Callable:
    """One timed call: kernel `name` on `x` through every probe's weight in turn."""
    fn = KERNELS[name]
    return lambda: [fn(x, p) for p in probes]


def _available_bytes() -> int:
    return free_bytes(torch.device("cpu"))


def _wall(fn: Callable) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def tuned_layers(model: nn.Module) -> list[TunedLinear]:
    return [m for m in model.modules() if isinstance(m, TunedLinear)]


def copies_bytes(model: nn.Module) -> int:
    """Bytes the tuned layers hold besides their weights (the transposed and prepacked copies)."""
    return sum(t.numel() * t.element_size() for m in tuned_layers(model) for t in (m.transposed, m.packed)
               if t is not None)


@contextmanager
def stock_kernels(model: nn.Module) -> Iterator[None]:
    """Within: every TunedLinear of `model` runs F.linear (e.g. to time transformers' own generate)."""
    layers = tuned_layers(model)
    for layer in layers:
        layer.stock = True
    try:
        yield
    finally:
        for layer in layers:
            layer.stock = False
