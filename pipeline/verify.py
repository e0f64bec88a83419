"""Exhaustive target sampling (DESIGN.md section 4): draws from target rows and the tree traversal.

At every reached node the verifier draws one token from that node's target row (argmax at T = 0, a sample
from the full softmax otherwise); a draw that labels a child is accepted and the walk moves there, and
the first draw that labels no child is the round's continuation. Each node's draw is independent of the
others, so drawing at every row at once and reading only the reached ones has the same law as drawing
lazily, and takes one device call instead of one per accepted token."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pipeline.pool import ROOT
from pipeline.tree import Tree

FLOAT32_TINY = torch.finfo(torch.float32).tiny


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """(..., V) logits / T for T > 0, in a form whose softmax cannot overflow at any temperature. For T >= 1, |logits /
    T| <= |logits|: the plain quotient is safe (softmax subtracts the max itself). Below, (logits - max) / T: every
    entry <= 0 and the max exactly 0, so nothing overflows, and a tiny T sends the other entries to -inf and the law to
    a point mass on the argmax (shared evenly by exact ties), as T -> 0 should; float64 for a T below float32's smallest
    normal, which float32 would round towards 0, so that every T down to the smallest subnormal double works."""
    z = logits.float()
    if temperature >= 1:
        return z / temperature
    z = z - z.amax(-1, keepdim=True)
    if temperature < FLOAT32_TINY:
        z = z.double()
    return z.div_(temperature)


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """(..., V) float32 target law: softmax(logits / T), or a point mass on the argmax at T = 0."""
    logits = logits.float()
    if temperature == 0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.softmax(tempered(logits, temperature), dim=-1).float()


def draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of (n, V) logits: argmax at T = 0, else a sample of the full softmax. -> (n,) long
    Sampling inverts each row's float64 CDF at one uniform draw: n random numbers instead of the n * V that
    torch.multinomial spends, and zero-probability tokens are never drawn."""
    if temperature == 0:
        return logits.argmax(-1)
    cdf = torch.softmax(tempered(logits, temperature), dim=-1).double().cumsum_(-1)  # (n, V)
    u = torch.rand((logits.shape[0], 1), generator=generator, device=logits.device, dtype=torch.float64)
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1).clamp_(max=logits.shape[-1] - 1)


class RowDraws:
    """The target's draw at each row of (n, V) logits, indexable like an array of token ids.
    lazy: draw a row only when the traversal reaches it (on the CPU, where a draw costs O(V) work and a round reaches a
    few of its rows); otherwise draw every row in one call and read them back with one host-device sync (on a GPU, where
    a sync per reached row would cost more than the draws)."""

    def __init__(self, logits: torch.Tensor, temperature: float, generator: torch.Generator | None,
                 lazy: bool, offset: int = 0) -> None:
        self.logits, self.temperature, self.generator, self.offset = logits, temperature, generator, offset
        self.cache: dict[int, int] = {}
        self.all = None if lazy else draw(logits, temperature, generator).cpu().numpy()  # host-device sync

    def shifted(self, k: int) -> RowDraws:
        """The same draws indexed from row k (a pass whose row 0 is the root's)."""
        view = RowDraws.__new__(RowDraws)
        view.logits, view.temperature, view.generator = self.logits, self.temperature, self.generator
        view.offset, view.cache, view.all = self.offset + k, self.cache, self.all
        return view

    def __getitem__(self, i: int) -> int:
        i += self.offset
        if self.all is not None:
            return int(self.all[i])
        if i not in self.cache:
            self.cache[i] = int(draw(self.logits[i:i + 1], self.temperature, self.generator)[0])
        return self.cache[i]


@dataclass(frozen=True, slots=True)
class Stopping:
    """When the walk stops accepting (the paper's stopping rules, Table 1; DESIGN.md section 12).
    cap: accept at most this many tree tokens; the next draw is the continuation even when it labels a child (None: no
    cap). leaf: a draw that labels a leaf of the tree (a node without children in it) is emitted as the continuation
    instead of being accepted (sampled-leaf stopping), so the row the pass scored at that leaf is the next round's root
    row. Exhaustive traversal has neither. Every rule decides from the draws so far and the tree alone, so each emitted
    token is still a draw from the target's row at its own prefix."""

    cap: int | None = None
    leaf: bool = False

    def stops(self, tree: Tree, node: int, accepted: int) -> bool:
        """Whether a draw labelling tree node `node`, after `accepted` accepted tokens, ends the walk."""
        return (self.cap is not None and accepted >= self.cap) or (self.leaf and tree.is_leaf(node))


EXHAUSTIVE = Stopping()
STOPPINGS = {"exhaustive": EXHAUSTIVE, "cap-1": Stopping(cap=1), "cap-2": Stopping(cap=2),
             "sampled-leaf": Stopping(leaf=True)}


def traverse(tree: Tree, first: int, draws, stopping: Stopping = EXHAUSTIVE) -> tuple[list[int], int]:
    """Walk the tree from the root with the target's draws. first: the token drawn at the root; draws[i]: the token
    drawn at tree node i (an array or RowDraws). Returns the accepted tree indices (a root path) and the continuation
    token: the first draw that labels no child of the node reached, or that `stopping` ends the walk at."""
    accepted: list[int] = []
    at, token = ROOT, first
    while True:
        nxt = tree.child(at, token)
        if nxt == ROOT or stopping.stops(tree, nxt, len(accepted)):
            return accepted, token
        accepted.append(nxt)
        at, token = nxt, int(draws[nxt])


def verify_tree(tree: Tree, logits: torch.Tensor, first: int | None, temperature: float,
                generator: torch.Generator | None, lazy: bool, stopping: Stopping = EXHAUSTIVE) -> tuple[list[int], int]:
    """Exhaustive target sampling over one tree pass, or another stopping rule -> (accepted tree indices, continuation).
    logits: (len(tree), V) rows of the tree's nodes when `first` (the root's draw) is given, else (1 + len(tree), V)
    with the root's row first. Reading a draw is a host read (a sync)."""
    draws = RowDraws(logits, temperature, generator, lazy)
    if first is None:
        return traverse(tree, draws[0], draws.shifted(1), stopping)
    return traverse(tree, first, draws, stopping)


def edge_probs(logits: torch.Tensor, token: np.ndarray, row: np.ndarray, temperature: float) -> np.ndarray:
    """(N,) float64 target probability of each pool edge at `temperature`, from one pass over the pool.
    logits: (R, V) target rows; token: (N,) the candidates' tokens; row: (N,) the row of each candidate's parent (the
    root's, or its parent candidate's). At T = 0 the greedy point mass: 1 where the token is the argmax of its parent's
    row, else 0. Reads N values back to the host (a sync)."""
    rows = torch.as_tensor(np.asarray(row, np.int64), device=logits.device)
    ids = torch.as_tensor(np.asarray(token, np.int64), device=logits.device)
    if temperature == 0:
        edge = (logits.argmax(-1)[rows] == ids).double()
    else:
        z = tempered(logits, temperature)
        edge = (z[rows, ids] - torch.logsumexp(z, -1)[rows]).double().exp()
    return edge.cpu().numpy()
