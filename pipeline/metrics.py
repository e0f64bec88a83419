"""The field's per-decode metrics from per-round counts: τ, acceptance by depth, tokens per pass, tree size.

τ (mean accepted length) is what papers and Spec-Bench report: tokens a round emits, the bonus token
(the target's own draw after the last accepted node) included, averaged over rounds. Acceptance at depth d
is the share of rounds that accepted a node at depth d among those whose walk reached depth d - 1 and
found candidate children there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RoundStats:
    """Metrics over a set of rounds (one decode's, or a decoder's over many decodes)."""

    rounds: int
    tau: float  # mean accept length per round, bonus token included
    mean_tree_size: float  # over rounds that ran a tree pass
    acceptance: tuple[float, ...]  # by depth, from 1 to the deepest depth tried

    def as_json(self) -> dict:
        return {"rounds": self.rounds, "tau": self.tau, "mean_tree_size": self.mean_tree_size,
                "acceptance_by_depth": list(self.acceptance)}


def acceptance_by_depth(accepted: Sequence[int], tried: Sequence[int]) -> tuple[float, ...]:
    """accepted, tried: (n_rounds,) tree nodes accepted and depths tried per round -> rate per depth 1..D."""
    accepted, tried = np.asarray(accepted, np.int64), np.asarray(tried, np.int64)
    assert accepted.shape == tried.shape and np.all(accepted <= tried), "a round accepts at most what it tries"
    deepest = int(tried.max()) if tried.size else 0
    depths = np.arange(1, deepest + 1)
    reached = (tried[None, :] >= depths[:, None]).sum(axis=1)  # (D,) rounds that tried depth d
    passed = (accepted[None, :] >= depths[:, None]).sum(axis=1)  # (D,) rounds that accepted a node at d
    return tuple(float(p / r) for p, r in zip(passed, reached))


def round_stats(accept_lengths: Sequence[int], accepted: Sequence[int], tried: Sequence[int],
                tree_sizes: Sequence[int]) -> RoundStats:
    """Metrics of rounds given as per-round columns (equal lengths)."""
    lengths = np.asarray(accept_lengths, np.float64)
    sizes = np.asarray(tree_sizes, np.float64)
    verified = sizes[sizes > 0]
    return RoundStats(len(lengths), float(lengths.mean()) if lengths.size else 0.0,
                      float(verified.mean()) if verified.size else 0.0, acceptance_by_depth(accepted, tried))


def tokens_per_pass(tokens: int, passes: int) -> float:
    """Output tokens per target pass after the prefill (a root-pass rule makes two passes a round)."""
    return tokens / passes if passes else 0.0
