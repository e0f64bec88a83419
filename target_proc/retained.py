"""Rows retained between rounds of a recorded decode (the paper's Appendix C), reduced to what the retained-row
study needs once the next round's root row is known (evaluation.rounds.RetainedRows): never stored whole.

For the next round's root c it keeps (DESIGN.md section 13): matched (the emitted address's row), token-only (up
to TOKEN_ONLY other scored rows ending in c, and the root's when the root is c), cache (the token-keyed cache's
row for c), same-token and preceding (the row that generated c, its probability of c zeroed). Rows are the
target law's (softmax at the run's temperature, after its filters; at T = 0 the softmax at T = 1), in float32
over the whole vocabulary."""

from __future__ import annotations

import numpy as np
import torch

from evaluation.rounds import ROW_KINDS, RetainedRows, no_rows
from pipeline.config import Filters
from pipeline.sampling import filtered
from pipeline.verify import target_probs

TOKEN_ONLY = 24  # token-only rows kept per round, besides the root's


def soft(logits: torch.Tensor, temperature: float, filters: Filters) -> torch.Tensor:
    """(..., V) float32 rows of the law the retained-row figures compare: the filtered, tempered softmax at
    T > 0, the softmax at T = 1 for greedy decoding (whose law, a point mass, has no distances to speak of)."""
    if temperature == 0:
        return torch.softmax(logits.float(), dim=-1)
    return target_probs(filtered(logits, temperature, filters), temperature)


def entropy(probs: torch.Tensor) -> float:
    """Entropy in nats of one (V,) probability row."""
    p = probs.double()
    return float(-(p * torch.log(p.clamp_min(1e-300))).sum())


class Retained:
    """The token-keyed cache of one decode and the rows kept for the next round."""

    def __init__(self, temperature: float, filters: Filters) -> None:
        self.temperature, self.filters = temperature, filters
        self.cache: dict[int, tuple[torch.Tensor, int]] = {}  # token -> ((V,) logits, round stored)
        self.pending: list[tuple[int, torch.Tensor, bool, int]] = []  # (kind, (V,) soft row, on path, age)
        self.prefix_root = -1  # verified prefixes of the last round ending in the next root's token
        self.round = 0  # rounds seen (the context's rows are stored as round 0)

    def context(self, tokens: list[int], rows: torch.Tensor) -> None:
        """Store rows (n, V) at n consecutive context positions whose tokens are `tokens`, in order (a later
        occurrence replaces an earlier one)."""
        for i, t in enumerate(tokens):
            self.cache[int(t)] = (rows[i].clone(), 0)

    def law(self, logits: torch.Tensor) -> torch.Tensor:
        """(V,) float32 soft row of (V,) logits (see soft)."""
        return soft(logits, self.temperature, self.filters).float()

    def reduce(self, root_row: torch.Tensor, first_tokens: np.ndarray) -> tuple[RetainedRows, int]:
        """The kept rows against this round's (V,) soft root row and its pool's first-level tokens (k,)."""
        if not self.pending:
            return no_rows(len(first_tokens)), self.prefix_root
        rows = torch.stack([row for _, row, _, _ in self.pending])  # (n, V)
        tv = 0.5 * (rows - root_row[None]).abs().sum(-1)
        agree = rows.argmax(-1) == root_row.argmax()
        ids = torch.as_tensor(first_tokens, dtype=torch.long, device=rows.device)
        logp = torch.log(rows[:, ids]) if len(first_tokens) else rows[:, :0]
        out = RetainedRows(kind=np.array([k for k, _, _, _ in self.pending], np.int64),
                           tv=tv.float().cpu().numpy(), agree=agree.cpu().numpy(),
                           on_path=np.array([p for _, _, p, _ in self.pending], bool),
                           age=np.array([a for _, _, _, a in self.pending], np.int64),
                           logp=logp.float().cpu().numpy())  # host reads: measurement only
        return out, self.prefix_root

    def keep(self, *, root: int, c: int, own_root: torch.Tensor, tree_tokens: np.ndarray, tree_rows: torch.Tensor | None,
             tree_rank: np.ndarray, last_accepted: int, scored: list[tuple[torch.Tensor, bool]],
             matched: torch.Tensor | None) -> None:
        """After a round: update the cache and keep the rows for the next root, c.
        own_root: (V,) logits of the root from the decode's own pass; tree_tokens: (n,) the verified tree's tokens,
        tree_rows (n, V) their logits from its tree pass (None without one), tree_rank (n,) their tree indices best
        first; last_accepted: tree index of the last accepted node (-1: none); scored: (logits, on the accepted path) of
        the token-only rows, in pool order; matched: the emitted address's logits, or None."""
        self.round += 1
        for i in tree_rank[::-1].tolist():  # the highest-ranked of a token is stored last
            self.cache[int(tree_tokens[i])] = (tree_rows[i].clone(), self.round)
        self.cache[root] = (own_root.clone(), self.round)
        law = self.law
        pending = []
        if matched is not None:
            pending.append((ROW_KINDS.index("matched"), law(matched), False, -1))
        token_only = [(law(row), on_path) for row, on_path in scored[:TOKEN_ONLY]]
        if root == c:
            token_only.append((law(own_root), True))
        pending += [(ROW_KINDS.index("token-only"), row, on_path, -1) for row, on_path in token_only]
        if c in self.cache:
            row, stored = self.cache[c]
            pending.append((ROW_KINDS.index("cache"), law(row), False, self.round + 1 - stored))
        same = own_root if root == c else _best_ending_in(c, tree_tokens, tree_rows, tree_rank)
        if same is not None:
            pending.append((ROW_KINDS.index("same-token"), law(same), False, -1))
        preceding = law(own_root if last_accepted < 0 else tree_rows[last_accepted])
        preceding[c] = 0.0
        total = preceding.sum()
        pending.append((ROW_KINDS.index("preceding"), preceding / total if total > 0 else preceding, False, -1))
        self.pending = pending
        self.prefix_root = int(np.count_nonzero(tree_tokens == c))


def _best_ending_in(c: int, tokens: np.ndarray, rows: torch.Tensor | None, rank: np.ndarray) -> torch.Tensor | None:
    """The logits of the highest-ranked tree node whose token is c, or None."""
    hits = [i for i in rank.tolist() if int(tokens[i]) == c]
    return rows[hits[0]] if hits else None
