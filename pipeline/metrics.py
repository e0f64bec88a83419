"""The field's per-decode metrics from per-round counts: τ, acceptance by depth, tokens per pass, tree size.

τ (mean accepted length) is what papers and Spec-Bench report: tokens a round emits, the bonus token
(the target's own draw after the last accepted node) included, averaged over rounds. Acceptance at depth d
is the share of rounds that accepted a node at depth d among those whose walk reached depth d - 1 and
found candidate children there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class RoundCounts:
    """The sums behind RoundStats, so that rounds can be counted a decode at a time and merged, in memory that
    does not grow with the rounds: a long run's summary keeps these instead of its records."""

    rounds: int = 0
    emitted: int = 0  # accept lengths summed
    trees: int = 0  # rounds that ran a tree pass
    tree_nodes: int = 0  # their tree sizes summed
    reached: list[int] = field(default_factory=list)  # [d - 1]: rounds that tried depth d
    passed: list[int] = field(default_factory=list)  # [d - 1]: rounds that accepted a node at depth d

    def add(self, accept_lengths: Sequence[int], accepted: Sequence[int], tried: Sequence[int],
            tree_sizes: Sequence[int]) -> RoundCounts:
        """Count rounds given as per-round columns (accept lengths and tree sizes of equal lengths, accepted
        and tried of equal lengths) -> self."""
        accepted, tried = np.asarray(accepted, np.int64), np.asarray(tried, np.int64)
        sizes = np.asarray(tree_sizes, np.int64)
        assert accepted.shape == tried.shape and np.all(accepted <= tried), "a round accepts at most what it tries"
        self.rounds += len(accept_lengths)
        self.emitted += int(np.sum(accept_lengths, dtype=np.int64))
        self.trees += int((sizes > 0).sum())
        self.tree_nodes += int(sizes.sum())
        depths = np.arange(1, (int(tried.max()) if tried.size else 0) + 1)
        self._add_depths((tried[None, :] >= depths[:, None]).sum(axis=1).tolist(),  # (D,) rounds that tried d
                         (accepted[None, :] >= depths[:, None]).sum(axis=1).tolist())  # (D,) accepted a node at d
        return self

    def merge(self, other: RoundCounts) -> RoundCounts:
        """Add another set of rounds' counts -> self."""
        self.rounds += other.rounds
        self.emitted += other.emitted
        self.trees += other.trees
        self.tree_nodes += other.tree_nodes
        self._add_depths(other.reached, other.passed)
        return self

    def _add_depths(self, reached: list[int], passed: list[int]) -> None:
        grow = len(reached) - len(self.reached)
        if grow > 0:
            self.reached += [0] * grow
            self.passed += [0] * grow
        for d, (r, p) in enumerate(zip(reached, passed)):
            self.reached[d] += r
            self.passed[d] += p

    def stats(self) -> RoundStats:
        return RoundStats(self.rounds, self.emitted / self.rounds if self.rounds else 0.0,
                          self.tree_nodes / self.trees if self.trees else 0.0,
                          tuple(p / r for p, r in zip(self.passed, self.reached)))


def round_stats(accept_lengths: Sequence[int], accepted: Sequence[int], tried: Sequence[int],
                tree_sizes: Sequence[int]) -> RoundStats:
    """Metrics of rounds given as per-round columns (equal lengths)."""
    return RoundCounts().add(accept_lengths, accepted, tried, tree_sizes).stats()


def tokens_per_pass(tokens: int, passes: int) -> float:
    """Output tokens per target pass after the prefill (a root-pass rule makes two passes a round)."""
    return tokens / passes if passes else 0.0
