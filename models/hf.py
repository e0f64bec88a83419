"""Transformers causal LMs behind the runner interface: our static KV cache, tree masks, CUDA graphs.

Attention goes through a function registered with transformers' AttentionInterface: it writes the new K/V at
slots we choose and attends under our mask, so every architecture transformers implements with the standard
attention call runs unchanged. K and V are (layers, 1, kv_heads, S, head_dim), S = 1 + capacity rounded up to
SLOT_ALIGN (fused SDPA kernels want the bias's rows 16-byte aligned); physical slot 0 is a scratch slot that only
pad rows write and see, logical slot s lives at s + 1. Passes after the prefill are padded up to a bucket, and
on CUDA replay a captured graph at the smallest span that covers the used slots; DESIGN.md section 7 gives the
spans, the CPU's eager path and models.llama_cpu's forward."""

from __future__ import annotations

import bisect
import contextlib
import logging
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from models import llama_cpu
from models.kv_plan import SLOT_ALIGN, aligned_slots, cache_bytes  # noqa: F401 (part of this module's interface)
from models.options import CPU_BUCKETS, CUDA_BUCKETS
from models.runner import ModelRunner, RowInputs, check_rows

ATTENTION = "specpair_static_tree"
MASK = "staging and mask"  # a profile's part (models.llama_cpu.forward's tick): the inputs and mask of a pass
MAX_COLS = 128  # visible non-prefix columns per pass (tree nodes, or the drafter's fed candidates)
SPAN_STEP = 64  # eager passes attend over the used cache rounded up to this
GRAPH_SPANS = 4  # spans each bucket is captured at on CUDA: the whole cache, 1/2, 1/4 and 1/8 of it
# What a padded pass attends over: the used slots rounded up to SPAN_STEP, the smallest of graph_spans that
# covers them (the shapes graphs are captured at), or the whole cache.
ATTEND = ("used", "ladder", "whole")
# Named explicitly, so that the kernel and its plan do not change with the shape (cuDNN re-plans per shape).
# The mask is an arbitrary additive bias, which flash attention does not take. Memory-efficient attention
# takes it in any shape; math is the fallback that takes everything.
CUDA_SDPA_BACKENDS = (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)
# Rope types whose forward reads a tensor on the host (transformers' dynamic_rope_update compares the
# largest position with a Python number), which stream capture forbids.
HOST_READ_ROPE = ("dynamic", "longrope")

log = logging.getLogger(__name__)


class StaticKV:
    """The cache tensors and the per-pass state the attention function reads."""

    def __init__(self, layers: int, kv_heads: int, slots: int, head_dim: int, dtype, device) -> None:
        self.k = torch.zeros(layers, 1, kv_heads, slots, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.slots: torch.Tensor | None = None  # (n,) physical write slots of this pass
        self.span = slots  # attend over physical slots [0, span)
        self.mask: torch.Tensor | None = None  # (1, 1, group * n, span) additive mask, heads grouped


def _static_tree_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           static_kv: StaticKV | None = None, **kwargs):
    """query: (1, H, n, D); key, value: (1, Hkv, n, D). Writes K/V into the cache, attends under our mask.
    The `group` query heads that share a K/V head are folded into the query length, so grouped-query attention reads
    each cached K/V head once instead of repeating it per query head."""
    if static_kv is None:  # a plain forward of the same model (e.g. transformers' generate): stock SDPA
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)
    unsupported = [name for name in ("sliding_window", "softcap", "s_aux") if kwargs.get(name) is not None]
    if unsupported:  # silently ignoring them would give wrong rows
        raise ValueError(f"{type(module).__name__} asks for {', '.join(unsupported)} in its attention, which "
                         f"this runtime's tree attention does not implement")
    kv = static_kv
    k_all, v_all = kv.k[module.layer_idx], kv.v[module.layer_idx]  # (1, Hkv, S, D)
    k_all.index_copy_(2, kv.slots, key.to(k_all.dtype))
    v_all.index_copy_(2, kv.slots, value.to(v_all.dtype))
    _, heads, n, dim = query.shape
    kv_heads = k_all.shape[1]
    q = query.reshape(1, kv_heads, (heads // kv_heads) * n, dim)  # heads h = j * group + g share K/V head j
    out = F.scaled_dot_product_attention(q, k_all[:, :, : kv.span], v_all[:, :, : kv.span],
                                         attn_mask=kv.mask, scale=scaling)
    return out.reshape(1, heads, n, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, _static_tree_attention)
# Plain forwards (no static_kv) get the masks transformers builds for SDPA; our own 4D masks pass as given.
AttentionMaskInterface.register(ATTENTION, sdpa_mask)


class _Buffers:
    """Static inputs of one bucket: b rows, up to MAX_COLS visible columns."""

    def __init__(self, b: int, device, pinned: bool) -> None:
        self.b = b
        self.ints = torch.zeros(4 * b + MAX_COLS + 1, dtype=torch.long, device=device)
        self.vis = torch.zeros(b, MAX_COLS, dtype=torch.bool, device=device)
        self.host_ints = torch.zeros(self.ints.shape, dtype=torch.long, pin_memory=pinned)
        self.host_vis = torch.zeros(self.vis.shape, dtype=torch.bool, pin_memory=pinned)
        ints = self.ints
        self.ids, self.pos, self.slots, self.real = ints[:b], ints[b:2 * b], ints[2 * b:3 * b], ints[3 * b:4 * b]
        self.cols, self.prefix = ints[4 * b:4 * b + MAX_COLS], ints[4 * b + MAX_COLS]

    def stage(self, tokens, positions, slots, prefix: int, cols, vis) -> None:
        """Fill the host copies (pad rows: token 0, position 0, the scratch slot) and copy them in."""
        b, n, m = self.b, len(tokens), len(cols)
        h = self.host_ints.numpy()
        h[:] = 0
        h[:n], h[b:b + n], h[2 * b:2 * b + n] = tokens, positions, np.asarray(slots) + 1
        h[3 * b:3 * b + n] = 1
        h[4 * b:4 * b + m] = np.asarray(cols) + 1
        h[4 * b + MAX_COLS] = prefix
        hv = self.host_vis.numpy()
        hv[:] = False
        hv[:n, :m] = vis
        # Host copies are rewritten only after the caller read the previous pass's output (a sync),
        # so the asynchronous copies below never race with that rewrite.
        self.ints.copy_(self.host_ints, non_blocking=True)
        self.vis.copy_(self.host_vis, non_blocking=True)


class HFRunner:
    """A transformers causal LM with a static KV cache of `capacity` slots (models.runner.ModelRunner)."""

    row_inputs: tuple[str, ...] = ()  # a causal LM reads its tokens alone

    def __init__(self, model, capacity: int, *, graphs: bool = True, buckets: tuple[int, ...] | None = None,
                 slot_align: int = SLOT_ALIGN, attend: str | None = None, lean: bool | None = None):
        """attend: one of ATTEND, graphs or not; None: "ladder" on CUDA, "used" on the CPU. Captured graphs have fixed
        spans: "ladder" or "whole". lean: passes through models.llama_cpu's forward (None: on the CPU, for the models it
        computes; never where they would run on CUDA, whose graphs remove the plumbing it saves)."""
        self.model = model
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        cfg = model.config.get_text_config()
        heads, kv_heads, head_dim = attention_shape(cfg)
        self.group = heads // kv_heads
        self.capacity = capacity
        self.vocab_size = cfg.vocab_size
        self.slots = aligned_slots(capacity, slot_align)  # physical slots S
        self.kv = StaticKV(cfg.num_hidden_layers, kv_heads, self.slots, head_dim, self.dtype, self.device)
        if not model._can_set_attn_implementation():
            raise ValueError(f"{type(model).__name__} does not route attention through transformers' "
                             f"AttentionInterface, so its KV cache cannot be managed here")
        model.set_attn_implementation(ATTENTION)
        on_cuda = self.device.type == "cuda"
        if lean is None:
            lean = not on_cuda and llama_cpu.unsupported(model) is None
        elif lean and (reason := "it runs on the CPU only" if on_cuda else llama_cpu.unsupported(model)):
            raise ValueError(f"models.llama_cpu's forward cannot run {type(model).__name__} here: {reason}")
        self.lean = lean
        self.buckets = tuple(sorted(buckets or (CUDA_BUCKETS if on_cuda else CPU_BUCKETS)))
        self.buffers = {b: _Buffers(b, self.device, on_cuda) for b in self.buckets}
        self.arange = torch.arange(self.slots, device=self.device)
        self.sdpa_backends = CUDA_SDPA_BACKENDS if on_cuda else None  # None: torch's own choice
        attend = attend or ("ladder" if on_cuda else "used")
        self.spans = {"used": None, "ladder": graph_spans(self.slots), "whole": (self.slots,)}[attend]
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}  # (bucket, span) -> graph
        self.kept: KeptFeatures | None = None  # the inputs of the decoder layers a head fuses (keep_features)
        self.tick: Callable[[str], None] | None = None  # a profile's clock (models.llama_cpu.forward's tick)
        self.outputs: dict[int, torch.Tensor] = {}  # bucket -> the logits its graphs write
        self.eager_reason = graphs_blocked_by(model) if graphs and on_cuda else None
        if self.eager_reason:
            log.warning("CUDA graphs off for %s: %s; its passes run eagerly", type(model).__name__,
                        self.eager_reason)
        elif graphs and on_cuda:
            if self.spans is None:
                raise ValueError("captured graphs have fixed spans: attend 'ladder' or 'whole', not 'used'")
            capture(self)

    # -- passes ---------------------------------------------------------------------------------------

    @torch.inference_mode()
    def forward(self, tokens, positions, slots, prefix: int, cols, vis, last_only: bool = False,
                rows: RowInputs | None = None) -> torch.Tensor:
        """tokens, positions, slots: (n,); cols: (m,) logical slots; vis: (n, m) bool.
        Row i attends to slots [0, prefix) and to cols[k] where vis[i, k]. Returns (n, V) float32 logits ((1, V) with
        last_only), valid until the next pass."""
        n, m = len(tokens), len(cols)
        if rows is not None:
            check_rows(self, rows, n)
        if n > self.buckets[-1] or m > MAX_COLS:
            return self._dense(tokens, positions, slots, prefix, cols, vis, last_only)
        b = self.buckets[np.searchsorted(self.buckets, n)]
        self.buffers[b].stage(tokens, positions, slots, prefix, cols, vis)
        span = self._span(prefix, slots, cols)
        if self.spans:  # the graphs' shapes, graphs or not, so that --no-graphs gives the same rows
            span = covering_span(span, self.spans)
        graph = self.graphs.get((b, span))
        if graph is not None:
            graph.replay()
            out = self.outputs[b]
        else:
            out = self._step(b, span)
        return out[n - 1:n] if last_only else out[:n]

    def _step(self, b: int, span: int) -> torch.Tensor:
        """One padded pass of bucket b over physical slots [0, span) -> (b, V) float32 logits."""
        buf = self.buffers[b]
        real = buf.real.bool()
        cols = torch.where(buf.cols < span, buf.cols, 0)  # eager spans may end before unused columns
        hits = torch.zeros(b, span, dtype=torch.int32, device=self.device)
        hits.scatter_add_(1, cols[None].expand(b, -1), buf.vis.to(torch.int32))
        ar = self.arange[:span]
        visible = (hits > 0) | (((ar >= 1) & (ar <= buf.prefix))[None] & real[:, None])
        visible[:, 0] = ~real  # pad rows see only the scratch slot they write; real rows never see it
        return self._run(buf.ids, buf.pos, buf.slots, visible, span)

    def _dense(self, tokens, positions, slots, prefix, cols, vis, last_only) -> torch.Tensor:
        """An unpadded pass with a host-built mask (prefill chunks and passes beyond the buckets)."""
        span = self._span(prefix, slots, cols)
        visible = np.zeros((len(tokens), span), bool)
        visible[:, 1:1 + prefix] = True
        rows, k = np.nonzero(np.asarray(vis))
        visible[rows, np.asarray(cols)[k] + 1] = True
        as_long = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long, device=self.device)
        out = self._run(as_long(tokens), as_long(positions), as_long(np.asarray(slots) + 1),
                        torch.as_tensor(visible, device=self.device), span, last_only)
        return out

    def _span(self, prefix: int, slots, cols) -> int:
        """Physical slots a pass attends over: the used ones, rounded up to SPAN_STEP (aligned rows)."""
        used = 1 + max(prefix, int(np.max(slots)) + 1, int(np.max(cols)) + 1 if len(cols) else 0)
        return min(covering_span(used), self.slots)

    def _run(self, ids, pos, slots, visible, span: int, last_only: bool = False) -> torch.Tensor:
        """ids, pos, slots: (n,); visible: (n, span) bool -> (n or 1, V) float32 logits."""
        mask = torch.zeros(visible.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~visible, torch.finfo(self.dtype).min)
        self.kv.mask = mask.repeat(self.group, 1)[None, None]  # rows ordered (g, i) like the folded queries
        self.kv.slots, self.kv.span = slots, span
        if self.lean:
            if self.tick:
                self.tick(MASK)
            return llama_cpu.forward(self.model, ids, pos, self.kv, last_only, self.kept.keep if self.kept else None,
                                     self.tick).float()
        backends = sdpa_kernel(list(self.sdpa_backends)) if self.sdpa_backends else contextlib.nullcontext()
        with backends, self.kept or contextlib.nullcontext():
            out = self.model(input_ids=ids[None], position_ids=pos[None], attention_mask=mask[None, None],
                             use_cache=False, static_kv=self.kv, logits_to_keep=1 if last_only else 0)
        return out.logits[0].float()

    # -- the features an EAGLE-3 head takes ----------------------------------------------------------

    def keep_features(self, layers: tuple[int, ...]) -> None:
        """From now on every pass keeps the inputs of these decoder layers at the slots it writes (pad rows
        at the scratch slot), and `move` moves them with the K/V. Captured graphs are captured again with
        the layer hooks in them."""
        self.kept = KeptFeatures(self.model, layers, self.kv, self.slots)
        if self.graphs:
            self.graphs.clear()
            self.outputs.clear()
            capture(self)

    def features_at(self, slots) -> torch.Tensor:
        """(n,) logical slots -> (n, layers * hidden) kept features in the model's dtype, low layers first."""
        s = torch.as_tensor(np.asarray(slots) + 1, dtype=torch.long, device=self.device)
        return self.kept.features[s].reshape(len(s), -1)

    def move(self, src, dst) -> None:
        """Copy the K/V of logical slots src to dst; the gather completes before the write."""
        s = torch.as_tensor(np.asarray(src) + 1, dtype=torch.long, device=self.device)
        d = torch.as_tensor(np.asarray(dst) + 1, dtype=torch.long, device=self.device)
        self.kv.k[:, :, :, d] = self.kv.k[:, :, :, s]
        self.kv.v[:, :, :, d] = self.kv.v[:, :, :, s]
        if self.kept is not None:
            self.kept.features[d] = self.kept.features[s]

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the class as a loader holds it (models.runner.RunnerKind) --------------------------------------

    @classmethod
    def build(cls, model, capacity: int, *, graphs: bool, rehearse: bool = False) -> ModelRunner:
        """rehearse: CUDA's pass sizes and span ladder on any device, graphs or not (on the CPU, eagerly)."""
        if rehearse:  # transformers' forward, as on CUDA
            return cls(model, capacity, graphs=graphs, buckets=CUDA_BUCKETS, attend="ladder", lean=False)
        return cls(model, capacity, graphs=graphs)

    @staticmethod
    def cache_bytes(model, capacity: int) -> int:
        """K and V of every layer at `capacity` slots, as the constructor allocates them."""
        cfg = model.config.get_text_config()
        _, kv_heads, head_dim = attention_shape(cfg)
        return cache_bytes(cfg.num_hidden_layers, kv_heads, head_dim, next(model.parameters()).element_size(),
                           capacity)

    @staticmethod
    def vocab_size_of(model) -> int:
        return model.config.get_text_config().vocab_size


class KeptFeatures:
    """The inputs of the decoder layers an EAGLE-3 head fuses, kept at the physical slots each pass writes:
    (S, layers, hidden) in the model's dtype. transformers' forward writes them through layer hooks, while a
    pass of the runner is under way (the `with` block); models.llama_cpu's forward calls `keep` itself."""

    def __init__(self, model, layers: tuple[int, ...], kv: StaticKV, slots: int) -> None:
        decoder = decoder_layers(model)
        if any(not 0 <= i < len(decoder) for i in layers):
            raise ValueError(f"layers {list(layers)} are not all among the model's {len(decoder)} decoder layers")
        hidden = model.config.get_text_config().hidden_size
        param = next(model.parameters())
        self.features = torch.zeros(slots, len(layers), hidden, dtype=param.dtype, device=param.device)
        self.kv = kv
        self.at: dict[int, list[int]] = {}  # decoder layer -> its indices in `features` (a layer may repeat)
        for j, i in enumerate(layers):
            self.at.setdefault(i, []).append(j)
        self.keeping = False  # a pass of the runner is under way: the layer hooks write `features`
        for i in self.at:
            decoder[i].register_forward_pre_hook(lambda module, args, kwargs, i=i: self._hooked(i, args, kwargs),
                                                 with_kwargs=True)

    def __enter__(self) -> KeptFeatures:
        self.keeping = True
        return self

    def __exit__(self, *exc) -> None:
        self.keeping = False

    def _hooked(self, i: int, args, kwargs) -> None:
        """Decoder layer i's hook in transformers' forward: its input rows (1, n, H), during a pass."""
        if self.keeping:
            self.keep(i, (args[0] if args else kwargs["hidden_states"])[0])

    def keep(self, i: int, hidden: torch.Tensor) -> None:
        """Write decoder layer i's input rows (n, H) at the pass's physical slots, wherever it is kept."""
        for j in self.at.get(i, ()):
            self.features[self.kv.slots, j] = hidden


@torch.inference_mode()
def capture(runner: HFRunner) -> None:
    """Capture a graph per bucket and span of `runner`, largest first, in one memory pool, after warm-up passes.
    A bucket's graphs write one output: its whole-cache graph's logits, which the smaller spans' graphs copy theirs into
    (a copy of b rows, against a set of logits per span). Capture inputs are all pad rows, so warm-up and capture write
    only the scratch slot."""
    start = time.perf_counter()
    pool = torch.cuda.graph_pool_handle()
    device = runner.device
    for b in reversed(runner.buckets):
        buf = runner.buffers[b]
        buf.stage(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 0,
                  np.zeros(0, np.int64), np.zeros((0, 0), bool))
        for span in reversed(runner.spans):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    runner._step(b, span)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                if b in runner.outputs:
                    runner.outputs[b].copy_(runner._step(b, span))
                else:
                    runner.outputs[b] = runner._step(b, span)
            runner.graphs[b, span] = graph
    torch.cuda.synchronize(device)
    log.info("captured %d CUDA graphs (%d buckets at spans %s of %d slots) in %.1f s", len(runner.graphs),
             len(runner.buckets), ", ".join(map(str, runner.spans)), runner.slots, time.perf_counter() - start)


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder layers of a transformers causal LM (model.model.layers for every architecture here)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(f"{type(model).__name__} keeps no decoder layers at model.layers")
    return layers


def attention_shape(cfg) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) of a transformers text config (head_dim given or hidden / heads)."""
    heads = cfg.num_attention_heads
    return heads, cfg.num_key_value_heads, getattr(cfg, "head_dim", None) or cfg.hidden_size // heads


def graph_spans(slots: int, levels: int = GRAPH_SPANS) -> tuple[int, ...]:
    """The spans a runner of `slots` physical slots captures each bucket at, ascending: the whole cache and
    its halvings (`levels` in all), each rounded up to SLOT_ALIGN; fewer where small caches round alike."""
    return tuple(sorted({min(slots, -(-slots // (2 ** i * SLOT_ALIGN)) * SLOT_ALIGN) for i in range(levels)}))


def covering_span(used: int, spans: tuple[int, ...] | None = None) -> int:
    """Physical slots a pass that uses `used` of them attends over: `used` rounded up to SPAN_STEP and, with a
    ladder of `spans` (ascending, the last the whole cache), the smallest of them that covers that."""
    span = -(-used // SPAN_STEP) * SPAN_STEP
    return span if spans is None else spans[bisect.bisect_left(spans, span)]


def graphs_blocked_by(model) -> str | None:
    """Why `model`'s passes cannot be captured as CUDA graphs; None when they can.
    Reads the rope types of the model's rotary modules and of its config (which may name one rope type per layer type).
    """
    types = set()
    cfg = model.config.get_text_config()
    for params in (getattr(cfg, "rope_parameters", None), getattr(cfg, "rope_scaling", None)):
        types |= _rope_types(params)
    for module in model.modules():
        types |= _rope_types(getattr(module, "rope_type", None))
    blocked = sorted(t for t in types if any(kind in t for kind in HOST_READ_ROPE))
    if not blocked:
        return None
    return (f"its rope type {', '.join(map(repr, blocked))} reads the positions on the host in every "
            f"forward, which graph capture forbids")


def _rope_types(value) -> set[str]:
    """Rope type names in a rope_type attribute or a rope parameters dict (flat or per layer type)."""
    if isinstance(value, str):
        return {value}
    if not isinstance(value, dict):
        return set()
    if "rope_type" in value or "type" in value:
        return {str(value.get("rope_type") or value.get("type"))}
    return set().union(*(_rope_types(v) for v in value.values())) if value else set()
