"""A Llama forward for the CPU's eager passes: the same operations as transformers' LlamaForCausalLM, in the
same order, without its per-layer plumbing (DESIGN.md section 7).

It calls the model's own modules for what they compute (embeddings, rotary tables, the linear layers with the
kernels models.cpu_linear chose) and writes K/V and attends as models.hf's static tree attention does: its rows
are transformers', bit for bit on the tested configurations. The runner keeps transformers' forward on CUDA,
and wherever `unsupported` names a reason."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def unsupported(model) -> str | None:
    """Why `model` must run through transformers' forward instead (None: this one computes its rows)."""
    from transformers import LlamaForCausalLM

    if type(model) is not LlamaForCausalLM:
        return f"{type(model).__name__} is not a plain LlamaForCausalLM"
    cfg = model.config
    if cfg.hidden_act != "silu":
        return f"its MLP's activation is {cfg.hidden_act!r}, not silu"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "it splits its linear layers (pretraining_tp)"
    return None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """(..., H) -> (..., H): transformers' LlamaRMSNorm (in float32, then back to x's dtype, times the weight)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rms(x: torch.Tensor, norm) -> torch.Tensor:
    return rms_norm(x, norm.weight, norm.variance_epsilon)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as transformers applies it: x * cos + rotate_half(x) * sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def forward(model, ids: torch.Tensor, pos: torch.Tensor, kv, last_only: bool,
            keep: Callable[[int, torch.Tensor], None] | None = None,
            tick: Callable[[str], None] | None = None) -> torch.Tensor:
    """ids, pos: (n,) -> (n or 1, V) logits in the model's dtype. Writes each layer's K/V at kv.slots and attends over
    physical slots [0, kv.span) under kv.mask (models.hf.StaticKV); keep(i, h), where given, gets the input (n, hidden)
    of decoder layer i before it runs; tick(part), where given, is called as each part of the work ends (PARTS: a
    profile's clock, bench.forward --parts). Called under inference mode (the runner's passes are)."""
    t = tick or _untimed
    m = model.model
    h = m.embed_tokens(ids)
    cos, sin = m.rotary_emb(h[None], pos[None])
    cos, sin = cos[0, :, None], sin[0, :, None]  # (n, 1, D): one row per token, broadcast over heads
    t(NORMS)
    for i, layer in enumerate(m.layers):
        if keep is not None:
            keep(i, h)
        h = h + _attention(layer.self_attn, _rms(h, layer.input_layernorm), cos, sin, kv, i, t)
        mlp = layer.mlp
        x = _rms(h, layer.post_attention_layernorm)
        t(NORMS)
        gate, up = mlp.gate_proj(x), mlp.up_proj(x)
        t(LINEARS)
        x = F.silu(gate) * up
        t(NORMS)
        x = mlp.down_proj(x)
        t(LINEARS)
        h = h + x
    if last_only:
        h = h[-1:]
    h = _rms(h, m.norm)
    t(NORMS)
    logits = model.lm_head(h)
    t(OUTPUT)
    return logits


def _attention(attn, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv, i: int,
               t: Callable[[str], None]) -> torch.Tensor:
    """Decoder layer i's attention on its normed input x (n, hidden) -> its output (n, hidden), before the
    residual; writes the layer's K/V at kv.slots."""
    n = x.shape[0]
    t(NORMS)
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    t(LINEARS)
    q = rotate(q.view(n, -1, attn.head_dim), cos, sin)
    k = rotate(k.view(n, -1, attn.head_dim), cos, sin)
    v = v.view(n, -1, attn.head_dim)
    t(NORMS)
    k_all, v_all = kv.k[i], kv.v[i]  # (1, Hkv, S, D)
    k_all.index_copy_(2, kv.slots, k.transpose(0, 1)[None].to(k_all.dtype))
    v_all.index_copy_(2, kv.slots, v.transpose(0, 1)[None].to(v_all.dtype))
    heads, kv_heads = q.shape[1], k.shape[1]
    q = q.transpose(0, 1).reshape(1, kv_heads, (heads // kv_heads) * n, attn.head_dim)  # as models.hf folds
    out = F.scaled_dot_product_attention(q, k_all[:, :, :kv.span], v_all[:, :, :kv.span], attn_mask=kv.mask,
                                         scale=attn.scaling)
    t(ATTENTION)
    o = attn.o_proj(out.reshape(heads, n, attn.head_dim).transpose(0, 1).reshape(n, -1))
    t(LINEARS)
    return o


NORMS, LINEARS, ATTENTION, OUTPUT = ("embedding, norms, rope, activations", "linear layers",
                                     "attention (K/V writes and SDPA)", "output layer")
PARTS = (LINEARS, ATTENTION, OUTPUT, NORMS)  # the parts of the work `forward`'s tick names


def _untimed(part: str) -> None:
    pass
