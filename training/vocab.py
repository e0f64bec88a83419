"""The draft vocabulary: the target ids the answers use most, sorted, as the reference lays them out.

d2t[d] is the offset from draft id d to its target id (target = d + d2t[d]); t2d[t] says whether target id
t is in the draft vocabulary. Ties in the counts go to the lower id, so the choice is the same on every run."""

from __future__ import annotations

import torch


def draft_vocab(counts: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """counts: (V,) answer-token counts -> ((size,) int64 d2t, (V,) bool t2d, the share of answer tokens
    the draft vocabulary covers)."""
    if not 0 < size <= len(counts):
        raise ValueError(f"`draft_vocab` must be between 1 and the target's vocabulary of {len(counts)}, not {size}")
    order = torch.argsort(-counts.double() + torch.arange(len(counts)) / (2 * len(counts)))  # ties: lower id
    chosen = torch.sort(order[:size]).values
    t2d = torch.zeros(len(counts), dtype=torch.bool)
    t2d[chosen] = True
    covered = float(counts[chosen].sum() / counts.sum().clamp(min=1))
    return chosen - torch.arange(size), t2d, covered


def answer_counts(answers, vocab: int) -> torch.Tensor:
    """(V,) int64 counts of the answer tokens (from each answer's start) of `answers`."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for a in answers:
        counts += torch.bincount(a.tokens[a.start:], minlength=vocab)
    return counts
