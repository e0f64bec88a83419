"""Answers many at a time: a Llama target decodes a batch of slots over a static KV cache, and keeps what the
head learns from as it goes (docs/training.md).

Each slot holds one sequence at its own positions, so no padding enters any row; a finished sequence's slot
takes the next prompt waiting, and once none waits the last occupied slot moves into it, so the passes always
run over slots 0 .. busy - 1 (views, no gathers). The operations are models.llama_cpu's, batched over slots; a
sampled answer draws from its own generator, seeded by its prompt's index."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models.llama_cpu import _rms, rotate, unsupported
from training.distill import STORE_DTYPE, Answer, generate_batch

SLOTS = 32  # sequences decoded at once: on a CPU the passes' tokens a second rise up to about this many


def supported(model) -> bool:
    """Whether `model` answers here (plain Llama models); others answer through transformers' generate."""
    return unsupported(model) is None


def forward(model, ids: torch.Tensor, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
            layers: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """ids, pos: (B, n) -> ((B, n, len(layers) * T) the fused layers' inputs, (B, n, T) the final normed hidden
    state). Slot b's K/V (k, v: (L, B, Hkv, S, D)) are written at its positions pos[b]; row t attends over its
    slot's positions 0 .. pos[b, t]."""
    m = model.model
    h = m.embed_tokens(ids)
    B, n, _ = h.shape
    cos, sin = m.rotary_emb(h, pos)
    cos, sin = cos[:, :, None], sin[:, :, None]  # (B, n, 1, D): broadcast over heads
    span = int(pos.max()) + 1  # host read: the passes attend over the used positions only
    heads, kv_heads, dim = model.config.num_attention_heads, k.shape[2], k.shape[-1]
    group = heads // kv_heads
    mask = (torch.arange(span, device=ids.device) <= pos[..., None])[:, None].repeat(1, 1, group, 1)
    rows = torch.arange(B, device=ids.device)[:, None].expand(B, n)  # mask: (B, 1, group * n, span)
    kept = {}
    for i, layer in enumerate(m.layers):
        if i in layers:
            kept[i] = h
        attn = layer.self_attn
        x = _rms(h, layer.input_layernorm)
        q = rotate(attn.q_proj(x).view(B, n, heads, dim), cos, sin)
        k[i][rows, :, pos] = rotate(attn.k_proj(x).view(B, n, kv_heads, dim), cos, sin).to(k.dtype)
        v[i][rows, :, pos] = attn.v_proj(x).view(B, n, kv_heads, dim).to(v.dtype)
        q = q.transpose(1, 2).reshape(B, kv_heads, group * n, dim)  # heads of one K/V head fold into rows
        out = F.scaled_dot_product_attention(q, k[i][:, :, :span], v[i][:, :, :span], attn_mask=mask,
                                             scale=attn.scaling)
        h = h + attn.o_proj(out.reshape(B, heads, n, dim).transpose(1, 2).reshape(B, n, heads * dim))
        mlp = layer.mlp
        x = _rms(h, layer.post_attention_layernorm)
        h = h + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
    features = torch.cat([kept[i] for i in layers], -1) if layers else h.new_zeros(B, n, 0)
    return features, _rms(h, m.norm)


class Slots:
    """The static cache and each slot's rows so far: prompt indices, tokens, features, hidden states, argmax."""

    def __init__(self, model, count: int, width: int, layers: tuple[int, ...]) -> None:
        cfg = model.config
        shape = (cfg.num_hidden_layers, count, cfg.num_key_value_heads,
                 width, getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        zeros = lambda *size, dtype=model.dtype: torch.zeros(size, dtype=dtype, device=model.device)
        self.k, self.v = zeros(*shape), zeros(*shape)
        self.features = zeros(count, width, len(layers) * cfg.hidden_size)
        self.last = zeros(count, width, cfg.hidden_size)
        self.argmax = zeros(count, width, dtype=torch.int32)
        self.tokens = zeros(count, width + 1, dtype=torch.long)
        self.length = [0] * count  # rows written (tokens fed) per slot
        self.prompt = [-1] * count  # the index of the prompt a slot answers
        self.busy = 0

    def keep(self, slot: int, at: int, features, last, argmax) -> None:
        """Rows at .. at + n - 1 of `slot`: features (n, F), last (n, T), argmax (n,)."""
        n = len(last)
        self.features[slot, at: at + n] = features
        self.last[slot, at: at + n] = last
        self.argmax[slot, at: at + n] = argmax

    def move(self, src: int, dst: int) -> None:
        """Slot `src`'s sequence into slot `dst` (whose sequence is done)."""
        for t in (self.k, self.v):
            t[:, dst] = t[:, src]
        for t in (self.features, self.last, self.argmax, self.tokens):
            t[dst] = t[src]
        self.length[dst], self.prompt[dst] = self.length[src], self.prompt[src]

    def answer(self, slot: int, start: int) -> Answer:
        """Slot `slot`'s finished sequence (its prompt from token 0, its answer from `start`), on the CPU."""
        n = self.length[slot]
        store = lambda t: t[slot, :n].to("cpu", STORE_DTYPE, copy=True)  # copies: the slot is reused
        return Answer(self.tokens[slot, : n + 1].to("cpu", copy=True), start, store(self.features),
                      store(self.last), self.argmax[slot, :n].to("cpu", copy=True))


class Draw:
    """The next token of each row: the argmax for greedy prompts, else a draw at T = 1 from the prompt's own
    generator (seeded by `seed` and its index), by one uniform number a row through the CDF."""

    def __init__(self, sample: list[bool], seed: int) -> None:
        self.sample = sample
        self.gens = [torch.Generator().manual_seed(seed * 1_000_003 + j) if s else None for j, s in enumerate(sample)]

    def __call__(self, logits: torch.Tensor, prompts: list[int]) -> torch.Tensor:
        """logits: (B, V) of the rows of `prompts` -> (B,) token ids."""
        out = logits.argmax(-1)
        drawn = [b for b, j in enumerate(prompts) if self.sample[j]]
        if drawn:
            cdf = torch.softmax(logits[drawn].float(), -1).cumsum(-1)  # (b, V)
            u = torch.cat([torch.rand(1, generator=self.gens[prompts[b]], dtype=torch.float64) for b in drawn])
            at = torch.searchsorted(cdf, (u.to(cdf.device) * cdf[:, -1]).to(cdf.dtype)[:, None], right=True)[:, 0]
            out[drawn] = at.clamp_max(logits.shape[-1] - 1)
        return out


@torch.inference_mode()
def answer_all(model, prompts: list[list[int]], *, sample: bool | list[bool], max_new: int,
               end_ids: tuple[int, ...], layers: tuple[int, ...], seed: int, slots: int = SLOTS) -> list[Answer]:
    """The target's answers to `prompts` (token ids), in their order: each up to `max_new` tokens, ending at
    its first id of `end_ids`; `sample` (one flag, or one a prompt) draws at T = 1 where set, else greedily."""
    flags = [sample] * len(prompts) if isinstance(sample, bool) else list(sample)
    assert len(flags) == len(prompts) and min(map(len, prompts)) > 0 and max_new > 0
    s = Slots(model, min(slots, len(prompts)), max(map(len, prompts)) + max_new, layers)
    draw, ends = Draw(flags, seed), set(end_ids)
    waiting, done = iter(range(len(prompts))), {}

    def finished(slot: int) -> bool:
        j, n = s.prompt[slot], s.length[slot]
        return int(s.tokens[slot, n]) in ends or n + 1 - len(prompts[j]) >= max_new

    def fill(slot: int) -> bool:
        """Prefill the next waiting prompt into `slot` (answering any that end at once) -> whether one runs."""
        for j in waiting:
            p = torch.tensor(prompts[j], device=s.k.device)
            features, last = forward(model, p[None], torch.arange(len(p), device=p.device)[None],
                                     s.k[:, slot: slot + 1], s.v[:, slot: slot + 1], layers)
            logits = model.lm_head(last[0])  # (n, V): the argmax of every prompt row, the first answer token
            s.keep(slot, 0, features[0], last[0], logits.argmax(-1))
            s.tokens[slot, : len(p)] = p
            s.length[slot], s.prompt[slot] = len(p), j
            s.tokens[slot, len(p)] = draw(logits[-1:], [j])[0]
            if not finished(slot):
                return True
            done[j] = s.answer(slot, len(p))
        return False

    while s.busy < len(s.length) and fill(s.busy):
        s.busy += 1
    while s.busy:
        step(model, s, draw, layers)
        for slot in reversed([b for b in range(s.busy) if finished(b)]):  # highest first: moves stay valid
            done[s.prompt[slot]] = s.answer(slot, len(prompts[s.prompt[slot]]))
            if not fill(slot):
                s.busy -= 1
                if slot != s.busy:
                    s.move(s.busy, slot)
    return [done[j] for j in range(len(prompts))]


def step(model, s: Slots, draw: Draw, layers: tuple[int, ...]) -> None:
    """One pass over slots 0 .. busy - 1: feed each its newest token, keep its row, draw its next token."""
    B = s.busy
    rows = torch.arange(B, device=s.k.device)
    pos = torch.tensor(s.length[:B], device=rows.device)
    features, last = forward(model, s.tokens[rows, pos][:, None], pos[:, None], s.k[:, :B], s.v[:, :B], layers)
    logits = model.lm_head(last[:, 0])  # (B, V)
    s.features[rows, pos], s.last[rows, pos], s.argmax[rows, pos] = features[:, 0], last[:, 0], logits.argmax(-1).int()
    s.tokens[rows, pos + 1] = draw(logits, s.prompt[:B]).to(s.tokens.device)
    s.length[:B] = [n + 1 for n in s.length[:B]]


def answer_batch(model, prompts: list[list[int]], *, sample: bool, max_new: int, end_ids: tuple[int, ...],
                 pad_id: int, layers: tuple[int, ...], seed: int) -> list[Answer]:
    """The target's answers to `prompts` (chat-templated ids), on the model's device: a Llama target's in slots
    (answer_all), another's in one left-padded generate call. The answers are kept on the CPU."""
    if supported(model):
        return answer_all(model, prompts, sample=sample, max_new=max_new, end_ids=end_ids, layers=layers, seed=seed)
    return generate_batch(model, prompts, sample=sample, max_new=max_new, end_ids=end_ids, pad_id=pad_id,
                          layers=layers, seed=seed)
