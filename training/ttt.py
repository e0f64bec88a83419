"""EAGLE-3's training-time test on one answer: the head drafts `steps` tokens ahead from every position at
once, each step taking its own previous outputs, and each step's rows are scored against the target's
distribution over the draft vocabulary.

Step k, row i (the reference's layout, SafeAILab/EAGLE eagle/traineagle3): the embedding of token i + k + 1
beside a hidden (step 0: fc of token i's features; later steps: the step before's output at row i), at
position i + k, predicting token i + k + 2. Row i of step k attends to the step-0 rows 0 .. i and to its own
rows of steps 1 .. k: the tree mask a drafted path sees at inference. The same steps score agreement."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.eagle3 import Eagle3Head
from training.distill import Answer


@dataclass(slots=True)
class StepScores:
    """Per step: the weighted loss's terms and the rows where the head's top token is the target's."""

    loss: torch.Tensor  # scalar: sum over steps of weight_k * mean cross-entropy over the step's scored rows
    rows: list[int]  # per step: rows scored
    hits: list[int]  # per step: rows whose top draft token is the target's top token


def unrolled_rows(head: Eagle3Head, tokens: torch.Tensor, features: torch.Tensor, steps: int):
    """tokens: (n,) ids; features: (n - 1, 3T) -> for k = 0 .. steps - 1, step k's (n - 2, Vd) float32 draft
    logits (a generator: the caller scores each step before the next is drafted)."""
    n = len(tokens)
    rows = n - 2  # row i predicts token i + 2 at step 0
    if rows < 1:
        raise ValueError(f"an answer of {n} tokens has no row to score")
    cfg, dev = head.cfg, head.embed.device
    scale = cfg.head_dim ** -0.5
    group = cfg.heads // cfg.kv_heads
    i = torch.arange(rows, device=dev)
    causal = torch.ones(rows, rows, dtype=torch.bool, device=dev).tril()
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []

    def attend(q, k, v):  # q (1, heads, R, D); k, v (1, kv, R, D)
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        keys.append(k), values.append(v)
        if len(keys) == 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        first = ((q @ keys[0].transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf"))
        own = torch.stack([(q * km).sum(-1) for km in keys[1:]], -1) * scale  # (1, heads, R, k)
        weights = torch.softmax(torch.cat([first, own], -1), -1)
        out = weights[..., :rows] @ values[0]
        for m, vm in enumerate(values[1:]):
            out = out + weights[..., rows + m, None] * vm
        return out

    hidden = head.fuse(features[:rows])
    for k in range(steps):
        at = (i + k + 1).clamp(max=n - 1)  # the token row i takes at step k (past the end: the last, unscored)
        hidden = head.layer(tokens[at], hidden, i + k, attend)
        yield head.logits(hidden)


def scored_rows(n: int, start: int, k: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Of an answer of n tokens from `start`, step k's rows: -> ((n - 2,) the target row each is scored on,
    clamped into range, (n - 2,) bool: whether it is scored, inside the answer and before its last token)."""
    at = torch.arange(n - 2, device=device) + k + 1  # the target row step k's row i is scored on: after token i + k + 1
    return at.clamp(max=n - 2), (at < n - 1) & (at + 1 >= start)


def unrolled_loss(head: Eagle3Head, target_rows: torch.Tensor, tokens: torch.Tensor, start: int,
                  features: torch.Tensor, target_top: torch.Tensor, t2d: torch.Tensor, steps: int,
                  decay: float) -> StepScores:
    """tokens: (n,) an answer's ids, the answer from `start`; features: (n - 1, 3T); target_rows: (n - 1, Vd)
    the target's logits over the draft vocabulary after each token but the last; target_top: (n - 1,) its most
    likely next token (target ids). Step k's loss is the cross-entropy of its rows against the target's
    distribution over the draft vocabulary, weighted decay ** k. Rows past the answer's end, before its start,
    or whose target top token is outside the draft vocabulary are not scored (as in the reference)."""
    n = len(tokens)
    total = torch.zeros((), device=tokens.device)
    scored, hits = [], []
    for k, logits in enumerate(unrolled_rows(head, tokens, features, steps)):
        row, inside = scored_rows(n, start, k, tokens.device)
        keep = inside & t2d[target_top[row].long()]
        if not bool(keep.any()):
            break
        logp = torch.log_softmax(logits[keep], -1)
        p = torch.softmax(target_rows[row[keep]].float(), -1)
        total = total + decay ** k * -(p * logp).sum(-1).mean()
        scored.append(int(keep.sum()))
        hits.append(int((logp.argmax(-1) == p.argmax(-1)).sum()))
    return StepScores(total, scored, hits)


TOP = 3  # the wider of the two agreements: a tree keeps a few first tokens


def answer_counts(head, a: Answer, steps: int) -> torch.Tensor:
    """(3, steps) for one answer: its scored rows, top-1 hits and top-3 hits at each drafting step."""
    counts = torch.zeros(3, steps, dtype=torch.long)
    dev = head.device
    with torch.inference_mode():
        tokens, argmax = a.tokens.to(dev), a.argmax.to(dev).long()
        for k, logits in enumerate(unrolled_rows(head, tokens, a.features.to(dev, torch.float32), steps)):
            row, keep = scored_rows(len(tokens), a.start, k, dev)
            want = argmax[row][keep]
            drafted = head.ids[logits[keep].topk(min(TOP, logits.shape[-1]), -1).indices]  # (r, TOP) target ids
            counts[:, k] = torch.tensor([len(want), int((drafted[:, 0] == want).sum()),
                                         int((drafted == want[:, None]).any(-1).sum())])
    return counts


def shares(counts: list[torch.Tensor]) -> dict[str, list]:
    """{"rows", "top1", "top3"} per drafting step over answers' counts (answer_counts)."""
    rows, top1, top3 = (sum(counts, torch.zeros_like(counts[0])) if counts else torch.zeros(3, 0)).tolist()
    return {"rows": rows, "top1": [h / max(r, 1) for h, r in zip(top1, rows)],
            "top3": [h / max(r, 1) for h, r in zip(top3, rows)]}


def agreement(head, answers: list[Answer], steps: int) -> dict[str, list]:
    """Per drafting step over `answers`' rows from each answer's start: {"rows", "top1", "top3"} (shares)."""
    return shares([answer_counts(head, a, steps) for a in answers])
