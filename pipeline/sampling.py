"""The target law's sampling filters (top-k, top-p, min-p), applied to target rows before any draw.

Exhaustive target sampling stays exact under any transform of the target's rows, provided every draw of a
decode (the root pass's and the verifier's) takes the same transformed row, so the filters are applied once,
to the logits the target returns (`Filtered` wraps a TargetRunner). In transformers' order, on the tempered law
softmax(logits / T): top_k (ties at the k-th kept), then top_p, then min_p; a filtered entry's logit becomes
-inf. At T = 0 nothing changes: the argmax is always kept."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from pipeline.config import Filters
from pipeline.tree import Tree
from pipeline.verify import tempered


def filtered(logits: torch.Tensor, temperature: float, filters: Filters) -> torch.Tensor:
    """(..., V) logits with the entries the filters drop set to -inf (a new tensor); at T = 0 unchanged."""
    if temperature == 0 or not filters.active:
        return logits
    z = tempered(logits, temperature)  # (..., V), float32 (float64 for a tiny T)
    drop = torch.zeros(z.shape, dtype=torch.bool, device=z.device)
    if 0 < filters.top_k < z.shape[-1]:
        kth = torch.topk(z, filters.top_k, dim=-1).values[..., -1:]
        drop |= z < kth
    if filters.top_p < 1 or filters.min_p > 0:
        probs = torch.softmax(z.masked_fill(drop, -math.inf), dim=-1)
        if filters.top_p < 1:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the tokens ranked above each one
            drop |= torch.zeros_like(drop).scatter_(-1, order, before >= filters.top_p)
            probs = torch.softmax(z.masked_fill(drop, -math.inf), dim=-1)
        if filters.min_p > 0:
            drop |= probs < filters.min_p * probs.amax(-1, keepdim=True)
    return logits.float().masked_fill(drop, -math.inf)


class Filtered:
    """A TargetRunner whose passes return filtered rows; every other call goes to the runner itself."""

    def __init__(self, target, temperature: float, filters: Filters) -> None:
        self._target, self._temperature, self._filters = target, temperature, filters

    def __getattr__(self, name: str):
        return getattr(self._target, name)

    def prefill(self, tokens: Sequence[int], overlapped: bool | Callable[[], bool] = False) -> None:
        self._target.prefill(tokens, overlapped)

    def root_pass(self, root: int, overlapped: bool = False) -> torch.Tensor:
        return filtered(self._target.root_pass(root, overlapped), self._temperature, self._filters)

    def tree_pass(self, tree: Tree, root: int | None, overlapped: bool = False) -> torch.Tensor:
        return filtered(self._target.tree_pass(tree, root, overlapped), self._temperature, self._filters)
