"""The decoders as one table: each rule's name, its flow (the round the loop runs for it), how it selects its
tree and what that tree is worth at shared contexts.

A new selection rule is one function (in pipeline/select.py), its value at every budget (in
pipeline/value.py) and one row here. The round loop, the command line's decoder lists, the reports'
comparisons, the values program, the benchmarks and the GPU check read this table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from pipeline.pool import Pool
from pipeline.select import select_draft, select_pearl, select_pearl_top1, select_root, select_root_draw
from pipeline.tree import Tree
from pipeline.value import Curve, Scored, value_draft, value_pearl, value_pearl_top1, value_root, value_root_draw

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, slots=True)
class RootDraw:
    """The target's draw X1 at the root, taken from the root pass before selection."""

    token: int
    row: torch.Tensor  # (V,) the root's logits, on the target's device
    temperature: float


Select = Callable[[Pool, int, "RootDraw | None"], Tree]


class Flow(Enum):
    """The round pipeline.decode runs for a rule (each a method of its round there, named alike)."""

    PLAIN = "plain"  # one pass on the root, its draw the round's only token (no drafter)
    TREE = "tree"  # wait for the pool, select, score the root and the tree in one pass
    PIPELINED = "pipelined"  # a root pass while the drafter grows the pool, draw X1, select beneath it, verify
    COVERING = "covering"  # verify with sampled-leaf stopping: a leaf drawn is the continuation, and the row its
    #                        pass scored there is the next round's root row


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    flow: Flow
    select: Select | None  # (pool, budget, root draw or None) -> tree; None: no drafter (the plain flow)
    baselines: tuple[str, ...]  # the rules a report compares this one with (besides `ar`)
    about: str  # one line for --help and the README
    value: Callable[[Scored], Curve] | None = None  # the rule's expected accepted tokens at every budget of a
    #                                                 recorded round (the drawn X1 counts as accepted)
    draw_in_tree: bool = False  # its tree always holds the target's draw X1: every tree round accepts a node at
    #                             depth 1 by construction

    def __post_init__(self) -> None:
        if (self.flow is Flow.PLAIN) != (self.select is None):
            raise ValueError(f"rule {self.name!r}: the plain flow, and it alone, selects no tree (`select` None)")

    @property
    def root_pass(self) -> bool:
        """Whether a one-token target pass on the root runs while the drafter grows the pool (and selection
        sees its draw X1)."""
        return self.flow is Flow.PIPELINED

    @property
    def covers(self) -> bool:
        """Whether it walks its tree with sampled-leaf stopping (the covering flow)."""
        return self.flow is Flow.COVERING


def _root(pool: Pool, budget: int, root: RootDraw) -> Tree:
    """`root`: the target's law at the pool's first-level tokens replaces their draft factor."""
    import torch  # here, not at the top: the table (names, flows, baselines) imports without torch

    from pipeline.verify import target_probs

    first = np.flatnonzero(pool.parent < 0)
    probs = np.zeros(len(pool), np.float32)
    ids = torch.from_numpy(pool.token[first]).to(root.row.device)
    probs[first] = target_probs(root.row, root.temperature)[ids].cpu().numpy()  # host read of k values: a sync
    return select_root(pool, budget, probs)


def _cover(pool: Pool, budget: int, root: RootDraw | None) -> Tree:
    """`cover`: draft's tree; beneath the draw X1 from a held exact root row, root-draw's tree."""
    return select_draft(pool, budget) if root is None else select_root_draw(pool, budget, root.token)


RULES: dict[str, Rule] = {r.name: r for r in (
    Rule("ar", Flow.PLAIN, None, (), "plain autoregressive decoding of the target through the same runtime"),
    Rule("draft", Flow.TREE, lambda pool, budget, _: select_draft(pool, budget), (),
         "wait for the pool, keep the B candidates of highest cumulative draft log-prob, verify root and tree "
         "in one pass", value_draft),
    Rule("pearl", Flow.PIPELINED, lambda pool, budget, x: select_pearl(pool, budget, x.token), ("draft",),
         "root pass while drafting; draw X1; keep the part of draft's tree beneath X1 (or X1 alone)", value_pearl,
         draw_in_tree=True),
    Rule("pearl-top1", Flow.PIPELINED, lambda pool, budget, x: select_pearl_top1(pool, budget, x.token), ("draft",),
         "as pearl, but the drafter commits to its most probable first token; a different draw is verified "
         "alone", value_pearl_top1, draw_in_tree=True),
    Rule("root-draw", Flow.PIPELINED, lambda pool, budget, x: select_root_draw(pool, budget, x.token),
         ("draft", "pearl"),
         "root pass while drafting; X1 plus its B-1 highest-ranked pool descendants", value_root_draw,
         draw_in_tree=True),
    Rule("root", Flow.PIPELINED, _root, ("draft",),
         "root pass while drafting; rank the pool with the root row's probabilities in place of the first "
         "draft factor", value_root),
    Rule("cover", Flow.COVERING, _cover, ("draft",),
         "verify draft's tree, stopping at a sampled leaf: the leaf is the continuation, and the row its pass scored "
         "is the next root's, which draws X1 and selects beneath it as root-draw (one target pass a round)"),
)}
DECODERS = tuple(RULES)
SPECULATIVE = tuple(name for name, rule in RULES.items() if rule.select is not None)


def comparisons(decoders) -> list[tuple[str, str]]:
    """The (A, B) speed comparisons a report makes among `decoders`: each rule over its baselines, then
    every decoder over plain decoding (`ar`)."""
    have = set(decoders)
    pairs = [(r.name, b) for r in RULES.values() if r.name in have for b in r.baselines if b in have]
    pairs += [(name, "ar") for name in RULES if name in have and name != "ar" and "ar" in have]
    return pairs
