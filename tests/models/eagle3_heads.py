"""Random EAGLE-3 heads written in the reference's layout (config.json + model.safetensors), and the
reference's arithmetic written plainly: a full recompute without any cache, following
SafeAILab/EAGLE eagle/model/cnets.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

TARGET_LAYERS = 8  # the reference fuses the inputs of layers 2, 4 and 5
VOCAB, DRAFT_VOCAB, TARGET_HIDDEN, HIDDEN = 96, 40, 64, 64


def small_target(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=TARGET_HIDDEN, intermediate_size=128,
                         num_hidden_layers=TARGET_LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512)
    return LlamaForCausalLM(config).eval()


def head_config(**changes) -> dict:
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": HIDDEN, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 96, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "vocab_size": VOCAB, "draft_vocab_size": DRAFT_VOCAB, "max_position_embeddings": 2048, "num_hidden_layers": 1, "hidden_act": "silu"}
    cfg.update(changes)
    return cfg


def head_weights(cfg: dict, seed: int = 1, embed: bool = False) -> dict[str, torch.Tensor]:
    """Random weights under the reference's key names; norms away from 1 so that each one matters."""
    g = torch.Generator().manual_seed(seed)
    h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    t = cfg.get("target_hidden_size", h)
    d = cfg.get("head_dim", h // heads)
    inter, vd, v = cfg["intermediate_size"], cfg["draft_vocab_size"], cfg["vocab_size"]
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.2
    w = {"fc.weight": r(h, 3 * t), "midlayer.hidden_norm.weight": 1 + r(h),
         "midlayer.input_layernorm.weight": 1 + r(h), "midlayer.post_attention_layernorm.weight": 1 + r(h),
         "midlayer.self_attn.q_proj.weight": r(heads * d, 2 * h), "midlayer.self_attn.k_proj.weight": r(kv * d, 2 * h),
         "midlayer.self_attn.v_proj.weight": r(kv * d, 2 * h), "midlayer.self_attn.o_proj.weight": r(h, heads * d),
         "midlayer.mlp.gate_proj.weight": r(inter, h), "midlayer.mlp.up_proj.weight": r(inter, h),
         "midlayer.mlp.down_proj.weight": r(h, inter), "norm.weight": 1 + r(h), "lm_head.weight": r(vd, h) * 5}
    chosen = torch.sort(torch.randperm(v, generator=g)[:vd]).values
    w["d2t"] = chosen - torch.arange(vd)
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[chosen] = True
    w["t2d"] = t2d
    if embed:
        w["embed_tokens.weight"] = r(v, h)
    return w


def write_head(directory: Path, cfg: dict | None = None, weights: dict | None = None, **kw) -> Path:
    cfg = cfg or head_config()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in (weights or head_weights(cfg, **kw)).items()},
              str(directory / "model.safetensors"))
    return directory


# -- the reference arithmetic, plainly ---------------------------------------------------------------

def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def inverse_frequencies(dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))


def llama3_frequencies(inv: torch.Tensor, factor, low, high, context) -> torch.Tensor:
    """Llama 3's rope scaling written out: wavelengths longer than context / low divided by `factor`, shorter
    than context / high kept, those between blended by where context / wavelength lies in [low, high]."""
    out = []
    for f in inv.tolist():
        wavelength = 2 * math.pi / f
        if wavelength < context / high:
            out.append(f)
        elif wavelength > context / low:
            out.append(f / factor)
        else:
            smooth = (context / wavelength - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out)


def rope(x, pos, inv):
    """x: (heads, n, D); inv: (D / 2,) inverse frequencies; the reference's cos/sin tables by position."""
    dim = x.shape[-1]
    freqs = torch.einsum("i,j->ij", pos.float(), inv)
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos(), emb.sin()
    rot = torch.cat((-x[..., dim // 2:], x[..., :dim // 2]), -1)
    return x * cos + rot * sin


def reference_rows(cfg: dict, w: dict, embed: torch.Tensor, x_hidden: torch.Tensor, tokens: torch.Tensor,
                   pos: torch.Tensor, inv: torch.Tensor | None = None,
                   norm_before_residual: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """One causal sequence of head rows, each attending to every row before it and itself.

    x_hidden: (n, H) fused features or head outputs; tokens, pos: (n,); inv: the rope's inverse frequencies
    (theta's unscaled ones where None); norm_before_residual: the attention adds to the normed hidden.
    -> (layer outputs (n, H), logits over the TARGET vocabulary (n, V), -inf off the draft vocabulary)."""
    eps, heads, kv = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    h = cfg["hidden_size"]
    d = cfg.get("head_dim", h // heads)
    inv = inverse_frequencies(d, cfg["rope_theta"]) if inv is None else inv
    normed = rms(x_hidden, w["midlayer.hidden_norm.weight"], eps)
    residual = normed if norm_before_residual else x_hidden
    x = torch.cat((rms(embed[tokens], w["midlayer.input_layernorm.weight"], eps), normed), -1)
    n = len(tokens)
    q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(n, heads, d).transpose(0, 1)
    k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(n, kv, d).transpose(0, 1)
    v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(n, kv, d).transpose(0, 1)
    q, k = rope(q, pos, inv), rope(k, pos, inv)
    k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(d)
    scores = scores + torch.triu(torch.full((n, n), float("-inf")), 1)
    out = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(n, heads * d)
    y = residual + out @ w["midlayer.self_attn.o_proj.weight"].T
    z = rms(y, w["midlayer.post_attention_layernorm.weight"], eps)
    z = (torch.nn.functional.silu(z @ w["midlayer.mlp.gate_proj.weight"].T) * (z @ w["midlayer.mlp.up_proj.weight"].T))
    y = y + z @ w["midlayer.mlp.down_proj.weight"].T
    draft = rms(y, w["norm.weight"], eps) @ w["lm_head.weight"].T
    logits = torch.full((n, cfg["vocab_size"]), float("-inf"))
    logits[:, torch.arange(cfg["draft_vocab_size"]) + w["d2t"]] = draft
    return y, logits


def target_features(target, tokens: list[int], layers=(2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)) -> torch.Tensor:
    """(n, 3T): the inputs of the target's layers at each token, by transformers' own hidden states
    (hidden_states[i] is layer i's input)."""
    with torch.no_grad():
        out = target(input_ids=torch.tensor([tokens]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], -1)


def reference_path(cfg, w, embed, feats: torch.Tensor, context: list[int], path: list[int], **arithmetic):
    """The rows of a committed context followed by one tree path, recomputed from scratch.

    Row j < len(context) - 1 pairs the feature of token j with the embedding of token j + 1 (position j);
    the path's token i pairs the previous row's output with its embedding (position len(context) - 1 + i).
    -> (n_rows, V) logits: the last committed row's predicts the path's first token."""
    c = len(context)
    rows_hidden = list(feats[: c - 1] @ w["fc.weight"].T)  # hidden = fc(cat(f_low, f_mid, f_high))
    tokens = context[1:]
    for i in range(len(path) + 1):
        outs, logits = reference_rows(cfg, w, embed, torch.stack(rows_hidden), torch.tensor(tokens),
                                      torch.arange(len(tokens)), **arithmetic)
        if i < len(path):
            rows_hidden.append(outs[-1])
            tokens = tokens + [path[i]]
    return logits
