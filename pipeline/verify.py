"""Exhaustive target sampling (DESIGN.md section 4): draws from target rows and the tree traversal.

At every reached node the verifier draws one token from that node's target row (argmax at T = 0, a sample
from the full softmax otherwise); a draw that labels a child is accepted and the walk moves there, and
the first draw that labels no child is the round's continuation. Each node's draw is independent of the
others, so drawing at every row at once and reading only the reached ones has the same law as drawing
lazily, and takes one device call instead of one per accepted token.
"""

from __future__ import annotations

import numpy as np
import torch

from pipeline.pool import ROOT
from pipeline.tree import Tree


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """(..., V) float32 target law: softmax(logits / T), or a point mass on the argmax at T = 0."""
    logits = logits.float()
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.softmax(logits / temperature, dim=-1)


def draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of (n, V) logits: argmax at T = 0, else a sample of the full softmax. -> (n,) long"""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def traverse(tree: Tree, first: int, draws: np.ndarray) -> tuple[list[int], int]:
    """Walk the tree from the root with the target's draws.

    first: the token drawn at the root; draws: (n,) the token drawn at each tree node.
    Returns the accepted tree indices (a root path) and the continuation token.
    """
    accepted: list[int] = []
    at, token = ROOT, first
    while True:
        nxt = tree.child(at, token)
        if nxt == ROOT:
            return accepted, token
        accepted.append(nxt)
        at, token = nxt, int(draws[nxt])
