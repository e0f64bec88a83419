"""An EAGLE-3 head's arithmetic over its own static KV cache: fuse the target's features, one decoder layer
over (token embedding, hidden) pairs, logits over the draft vocabulary mapped to target ids.

The layer follows the reference (SafeAILab/EAGLE, eagle/model/cnets.py), as DESIGN.md section 14 writes it out.
Cache layout as models.hf's: K and V are (1, kv_heads, S, head_dim), physical slot 0 a scratch slot, logical
slot s at physical s + 1. On CUDA each bucket of row counts is one captured graph over the whole cache
(HeadRunner.capture); on the CPU passes run eagerly over the used slots, or, rehearsing the graphs, padded to
their buckets over the whole cache as a replay runs them."""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from models.eagle3_config import HeadConfig, HeadError, OPTIONAL_KEYS, shapes_of
from models.kv_plan import aligned_slots, cache_bytes
from models.llama_cpu import rms_norm, rotate
from models.runner import ModelRunner, RowInputs, check_rows

QKV = ("midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight")
GATE_UP = ("midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight")
# The int8 products: layers of one input stacked into one (a pass of a few rows pays per product called)
INT8_GROUPS = (("fc.weight",), QKV, ("midlayer.self_attn.o_proj.weight",), GATE_UP,
               ("midlayer.mlp.down_proj.weight",), ("lm_head.weight",))
HEAD_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 80, 128)  # rows a captured head pass is padded to (a level's feed)
SPAN_STEP = 64  # eager passes attend over the used slots rounded up to this

log = logging.getLogger(__name__)


def rotary(cfg: HeadConfig, device) -> tuple[torch.Tensor, float]:
    """The head's inverse frequencies (head_dim / 2,) float32 and attention scaling, by transformers' rope
    initialisers (default, linear, llama3) from the head's rope theta and scaling."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = dict(cfg.rope_scaling or {})  # HeadConfig checked its type and numbers
    kind = params.pop("rope_type", "default")
    llama = LlamaConfig(hidden_size=cfg.hidden, num_attention_heads=cfg.heads, head_dim=cfg.head_dim,
                        max_position_embeddings=cfg.max_positions,
                        rope_parameters={"rope_type": kind, "rope_theta": cfg.rope_theta, **params})
    if kind == "default":
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
        return inv.to(device), 1.0
    inv, scale = ROPE_INIT_FUNCTIONS[kind](llama, device)
    return inv.float().to(device), float(scale)


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: (n,) -> (cos, sin), each (n, D) float32, scaled (the halves convention of Llama)."""
    freqs = positions.float()[:, None] * inv_freq[None]  # (n, D / 2)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos() * scale, emb.sin() * scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (n, heads, D); cos, sin: (n, D) of the rows' positions -> x rotated."""
    return rotate(x, cos[:, None].to(x.dtype), sin[:, None].to(x.dtype))


def int8_linear(w: torch.Tensor) -> torch.nn.Module:
    """(out, in) weight -> a dynamic int8 linear layer of it: int8 weights per output row, the input quantized
    per call."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
    linear.weight = torch.nn.Parameter(w.float(), requires_grad=False)
    with warnings.catch_warnings():  # torch announces the API's move to torchao on every call
        warnings.simplefilter("ignore")
        return quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear: per_channel_dynamic_qconfig},
                                dtype=torch.qint8)[0]


@dataclass(slots=True)
class Eagle3Head:
    """A head's weights on one device, in one dtype; `ids` (Vd,) maps draft ids to target ids."""

    cfg: HeadConfig
    w: dict  # models.eagle3_config.HEAD_KEYS -> tensors
    embed: torch.Tensor  # (V, H) the token embedding (the head's own, or its target's)
    ids: torch.Tensor  # (Vd,) int64 target id of each draft id
    inv_freq: torch.Tensor
    rope_scale: float
    int8: dict = field(default_factory=dict)  # group of INT8_GROUPS -> a dynamic int8 linear of its stacked weights
    angles: tuple = ()  # (cos, sin) of positions [0, len): rope_angles' rows, kept for eager CPU passes

    @classmethod
    def build(cls, cfg: HeadConfig, weights: dict, embed: torch.Tensor | None, device, dtype) -> Eagle3Head:
        """From checked weights (models.eagle3_config.read_head); `embed` the target's embedding, used where
        the head holds none."""
        embed = weights.get("embed_tokens.weight", embed)
        if embed is None:
            raise HeadError("the head holds no embed_tokens.weight and no target embedding was given")
        if tuple(embed.shape) != shapes_of(cfg)["embed_tokens.weight"]:
            raise HeadError(f"the token embedding has shape {tuple(embed.shape)}; the head takes "
                            f"{shapes_of(cfg)['embed_tokens.weight']} (vocabulary x hidden)")
        w = {k: v.to(device=device, dtype=dtype) for k, v in weights.items() if k not in OPTIONAL_KEYS}
        offsets = weights.get("d2t", torch.zeros(cfg.draft_vocab, dtype=torch.long)).long()
        ids = (offsets + torch.arange(cfg.draft_vocab)).to(device)
        inv, scale = rotary(cfg, device)
        return cls(cfg, w, embed.to(device=device, dtype=dtype), ids, inv, scale)

    def feature_layers(self, target_layers: int) -> tuple[int, int, int]:
        """The target layers whose inputs the head fuses (models.eagle3_config.HeadConfig.feature_layers)."""
        return self.cfg.feature_layers(target_layers)

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def quantize(self) -> None:
        """Run every linear layer as a dynamic int8 product (int8 weights per output channel, activations
        quantized per pass), on the CPU: a pass of a few rows is bound by reading the weights, and int8 reads
        a quarter of float32's bytes (the default head's pools grow about 6x faster: results/benchmarks.md). Drafts change; what a
        decoder emits does not (verification is the target's)."""
        if self.device.type != "cpu":
            raise HeadError("dynamic int8 quantization of a head runs on the CPU only")
        for group in INT8_GROUPS:  # stacked by output rows: each row's scale and the input's are a lone layer's
            self.int8[group] = int8_linear(torch.cat([self.w[key] for key in group]))

    def linear(self, key: str, x: torch.Tensor) -> torch.Tensor:
        return self.linears((key,), x)

    def linears(self, group: tuple[str, ...], x: torch.Tensor) -> torch.Tensor:
        """Layers of one input -> their outputs side by side (..., sum of their rows)."""
        q = self.int8.get(group)
        if q is not None:
            return q(x.float()).to(x.dtype)
        outs = [F.linear(x, self.w[key]) for key in group]
        return outs[0] if len(outs) == 1 else torch.cat(outs, -1)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of `positions` (n,): rows of the table a CPU runner keeps (keep_angles), else computed."""
        if len(self.angles) and len(positions) and int(positions.max()) < len(self.angles[0]):
            return self.angles[0][positions], self.angles[1][positions]
        return rope_angles(positions, self.inv_freq, self.rope_scale)

    def keep_angles(self, size: int) -> None:
        """Keep rope_angles' rows of positions [0, size): an eager pass of a few rows pays per operation called."""
        if not self.angles or size > len(self.angles[0]):
            self.angles = rope_angles(torch.arange(size, device=self.device), self.inv_freq, self.rope_scale)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """(n, 3T) target features, low to high -> (n, H) hidden (fc)."""
        return self.linear("fc.weight", features.to(self.dtype))

    def layer(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
              attend) -> torch.Tensor:
        """tokens, positions: (n,); hidden: (n, H) -> (n, H) the layer's output.
        attend(q (1, heads, n, D), k, v (1, kv, n, D)) -> (1, heads, n, D): writes k, v where the pass says and attends
        under its mask (HeadRunner), or over the rows alone (a test's plain recompute)."""
        w, cfg = self.w, self.cfg
        n = tokens.shape[0]
        emb = rms_norm(self.embed[tokens], w["midlayer.input_layernorm.weight"], cfg.rms_eps)
        normed = rms_norm(hidden, w["midlayer.hidden_norm.weight"], cfg.rms_eps)
        x = torch.cat([emb, normed], -1)  # (n, 2H)
        qkv = self.linears(QKV, x).view(n, cfg.heads + 2 * cfg.kv_heads, cfg.head_dim)
        qk = apply_rope(qkv[:, :cfg.heads + cfg.kv_heads], *self.rope(positions)).transpose(0, 1)[None]
        q, k, v = qk[:, :cfg.heads], qk[:, cfg.heads:], qkv[:, cfg.heads + cfg.kv_heads:].transpose(0, 1)[None]
        out = attend(q, k, v).transpose(1, 2).reshape(n, cfg.heads * cfg.head_dim)
        residual = normed if cfg.norm_before_residual else hidden  # vLLM speculators' heads: the normed one
        h = residual + self.linear("midlayer.self_attn.o_proj.weight", out)
        y = rms_norm(h, w["midlayer.post_attention_layernorm.weight"], cfg.rms_eps)
        gate, up = self.linears(GATE_UP, y).chunk(2, -1)
        return h + self.linear("midlayer.mlp.down_proj.weight", F.silu(gate) * up)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(n, H) layer outputs -> (n, Vd) float32 logits over the draft vocabulary."""
        return self.linear("lm_head.weight", rms_norm(hidden, self.w["norm.weight"], self.cfg.rms_eps)).float()


def random_head(cfg: HeadConfig, embed: torch.Tensor, device, dtype, seed: int = 0) -> Eagle3Head:
    """A head of `cfg`'s shapes with random weights (norms at 1, linears at the reference's init scale) and
    a d2t onto a random sorted subset of the vocabulary: the machinery at a public head's scale."""
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for key, shape in shapes_of(cfg).items():
        if key in OPTIONAL_KEYS:
            continue
        if len(shape) == 1:
            weights[key] = torch.ones(shape)
        else:
            weights[key] = torch.randn(shape, generator=gen) * 0.02
    chosen = torch.sort(torch.randperm(cfg.vocab, generator=gen)[: cfg.draft_vocab]).values
    weights["d2t"] = chosen - torch.arange(cfg.draft_vocab)
    return Eagle3Head.build(cfg, weights, embed, device, dtype)


class HeadRunner:
    """An Eagle3Head with a static KV cache of `capacity` logical slots (models.runner.ModelRunner): each row
    takes a `hidden` beside its token, and leaves its layer output in `outputs`. Its rows are over the draft
    vocabulary: column c is target id ids[c]."""

    row_inputs: tuple[str, ...] = ("hidden",)

    def __init__(self, head: Eagle3Head, capacity: int, *, graphs: bool = True, rehearse: bool = False) -> None:
        """graphs: capture a graph per bucket on CUDA; with `rehearse`, on the CPU too, where capture() keeps
        each bucket's padded inputs and passes replay them eagerly (the GPU check's rehearsal)."""
        cfg = head.cfg
        self.head, self.capacity = head, capacity
        self.device, self.dtype = head.device, head.dtype
        self.vocab_size = cfg.vocab  # the target's vocabulary, whose ids the pool holds
        self.ids = head.ids  # (Vd,) the target id of each draft id
        self.feature_width = 3 * cfg.target_hidden  # a committed row's target features
        self.slots = aligned_slots(capacity)
        self.k = torch.zeros(1, cfg.kv_heads, self.slots, cfg.head_dim, dtype=self.dtype, device=self.device)
        self.v = torch.zeros_like(self.k)
        self.outputs: torch.Tensor | None = None  # (n, H) the last pass's layer outputs, valid until the next
        self.graphs: dict[int, tuple] = {}  # bucket -> (graph, static inputs, static outputs)
        if self.device.type == "cpu":
            head.keep_angles(self.slots)
        if graphs and (self.device.type == "cuda" or rehearse):
            self.capture()

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """(n, 3T) target features, low to high -> (n, H) the hidden a committed row takes (fc)."""
        with torch.inference_mode():
            return self.head.fuse(features.to(self.device))

    @torch.inference_mode()
    def forward(self, tokens, positions, slots, prefix: int, cols, vis, last_only: bool = False,
                rows: RowInputs | None = None) -> torch.Tensor:
        """tokens, positions, slots: (n,); cols: (m,) logical slots; vis: (n, m) bool; rows["hidden"]: (n, H).
        Row i attends to slots [0, prefix) and to cols[k] where vis[i, k]. -> (n, Vd) float32 draft logits
        ((1, Vd) with last_only); the rows' layer outputs in `outputs`."""
        check_rows(self, rows, len(tokens))
        n = len(tokens)
        visible = np.zeros((n, self.slots), bool)
        visible[:, 1:1 + prefix] = True
        picked, k = np.nonzero(np.asarray(vis))
        visible[picked, np.asarray(cols)[k] + 1] = True
        as_long = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long, device=self.device)
        hidden = torch.as_tensor(rows["hidden"]).to(device=self.device, dtype=self.dtype)
        b = next((b for b in HEAD_BUCKETS if b >= n), None)
        if b is not None and b in self.graphs:
            logits, self.outputs = self._replay(b, as_long(tokens), hidden, as_long(positions),
                                                as_long(np.asarray(slots) + 1),
                                                torch.as_tensor(visible, device=self.device), n)
        else:
            span = min(self.slots, -(-(1 + int(max(prefix, np.max(slots) + 1))) // SPAN_STEP) * SPAN_STEP)
            logits, self.outputs = self._step(as_long(tokens), hidden, as_long(positions),
                                              as_long(np.asarray(slots) + 1),
                                              torch.as_tensor(visible[:, :span], device=self.device), last_only)
        return logits[-1:] if last_only else logits

    def _step(self, tokens, hidden, positions, physical, visible,
              last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass over physical slots [0, visible.shape[1]) -> (logits, the last row's alone with last_only;
        layer outputs)."""
        span, cfg = visible.shape[1], self.head.cfg

        def attend(q, k, v):
            self.k[0][:, physical] = k[0]  # (kv, n, D)
            self.v[0][:, physical] = v[0]
            if self.device.type != "cpu":
                return F.scaled_dot_product_attention(q, self.k[:, :, :span], self.v[:, :, :span],
                                                      attn_mask=visible[None, None], scale=cfg.head_dim ** -0.5,
                                                      enable_gqa=True)
            # on the CPU each KV head's query heads in one product: 3 rows over 832 slots took 0.18 ms, SDPA's 0.33
            n, group = q.shape[2], cfg.heads // cfg.kv_heads
            scores = torch.bmm(q[0].reshape(cfg.kv_heads, group * n, cfg.head_dim),
                               self.k[0, :, :span].transpose(1, 2)).mul_(cfg.head_dim ** -0.5)
            scores.view(cfg.kv_heads, group, n, span).masked_fill_(~visible, float("-inf"))
            return torch.bmm(torch.softmax(scores, -1), self.v[0, :, :span]).view(1, cfg.heads, n, cfg.head_dim)

        out = self.head.layer(tokens, hidden, positions, attend)
        return self.head.logits(out[-1:] if last_only else out), out

    def move(self, src, dst) -> None:
        """Copy the K/V of logical slots src to dst; the gather completes before the write."""
        s = torch.as_tensor(np.asarray(src) + 1, dtype=torch.long, device=self.device)
        d = torch.as_tensor(np.asarray(dst) + 1, dtype=torch.long, device=self.device)
        self.k[:, :, d] = self.k[:, :, s]
        self.v[:, :, d] = self.v[:, :, s]

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # -- the class as a loader holds it (models.runner.RunnerKind) --------------------------------------

    @classmethod
    def build(cls, model: Eagle3Head, capacity: int, *, graphs: bool, rehearse: bool = False) -> ModelRunner:
        return cls(model, capacity, graphs=graphs, rehearse=rehearse)

    @staticmethod
    def cache_bytes(model: Eagle3Head, capacity: int) -> int:
        """K and V of the head's one layer at `capacity` slots."""
        return cache_bytes(1, model.cfg.kv_heads, model.cfg.head_dim, model.embed.element_size(), capacity)

    @staticmethod
    def vocab_size_of(model: Eagle3Head) -> int:
        return model.cfg.vocab

    # -- CUDA graphs ----------------------------------------------------------------------------------

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture one graph per bucket of HEAD_BUCKETS over the whole cache, after warm-up passes. Inputs
        are all pad rows (the scratch slot), so warm-up and capture write nothing a pass reads."""
        start = time.perf_counter()
        pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        for b in reversed(HEAD_BUCKETS):
            inputs = self._pad_inputs(b)
            if pool is None:  # the CPU rehearsal: the same padded pass, run eagerly
                self.graphs[b] = (None, inputs, self._step(*inputs))
                continue
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self._step(*inputs)
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                outputs = self._step(*inputs)
            self.graphs[b] = (graph, inputs, outputs)
        log.info("captured %d head graphs in %.1f s", len(self.graphs), time.perf_counter() - start)

    def _pad_inputs(self, b: int) -> tuple:
        """Static inputs of bucket b: pad rows only (token 0, position 0, the scratch slot, seeing it)."""
        cfg = self.head.cfg
        visible = torch.zeros(b, self.slots, dtype=torch.bool, device=self.device)
        visible[:, 0] = True
        zeros = torch.zeros(b, dtype=torch.long, device=self.device)
        return (zeros.clone(), torch.zeros(b, cfg.hidden, dtype=self.dtype, device=self.device), zeros.clone(),
                zeros.clone(), visible)

    def _replay(self, b, tokens, hidden, positions, physical, visible, n) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy a pass's n rows into bucket b's static inputs (the rest pad rows) and replay its graph (on the
        CPU: run the same padded pass)."""
        graph, (s_tok, s_hid, s_pos, s_phys, s_vis), outputs = self.graphs[b]
        s_tok.zero_(), s_pos.zero_(), s_phys.zero_(), s_hid.zero_()
        s_vis.zero_()
        s_vis[:, 0] = True
        s_tok[:n], s_hid[:n], s_pos[:n], s_phys[:n] = tokens, hidden, positions, physical
        s_vis[:n] = visible
        s_vis[:n, 0] = False  # real rows never see the scratch slot
        if graph is None:
            logits, out = self._step(s_tok, s_hid, s_pos, s_phys, s_vis)
        else:
            graph.replay()
            logits, out = outputs
        return logits[:n], out[:n]
