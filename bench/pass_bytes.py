"""What one pass reads from memory, from a model's shapes: its weights, the K/V it attends over and its mask.

A captured CUDA pass (models.hf) attends over the smallest captured span that covers the used slots (the
whole cache or one of its halvings, models.hf.graph_spans), so its K/V bytes are those of that span; an
eager CPU pass reads only the used slots rounded up.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.hf import aligned_slots, covering_span, graph_spans
from models.shapes import SHAPES


@dataclass(frozen=True, slots=True)
class PassBytes:
    """Bytes one pass reads: every weight the pass multiplies by, K and V of `slots` slots in every layer,
    and the additive mask once per layer ((group * rows, slots) per layer; a kernel that reads it per KV
    head without the cache serving it reads kv_heads times as much)."""

    weights: int
    kv: int
    mask: int
    slots: int

    @property
    def kv_over_weights(self) -> float:
        return self.kv / self.weights


def weight_count(shape: str) -> int:
    """Weights a pass multiplies by: every layer's projections and the output head (the input embedding is
    only gathered, one row per token); norms included."""
    vocab, hidden, inter, layers, heads, kv_heads, head_dim, _ = SHAPES[shape]
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o and k, v projections
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    return layers * per_layer + hidden + vocab * hidden


def pass_bytes(shape: str, slots: int, rows: int = 1, itemsize: int = 2) -> PassBytes:
    """One pass of `rows` query rows attending over `slots` cache slots of the named shape (models.shapes),
    with weights, K/V and mask of `itemsize` bytes (2: bf16)."""
    vocab, hidden, inter, layers, heads, kv_heads, head_dim, _ = SHAPES[shape]
    kv = 2 * layers * kv_heads * slots * head_dim * itemsize
    mask = layers * (heads // kv_heads) * rows * slots * itemsize
    return PassBytes(weight_count(shape) * itemsize, kv, mask, slots)


def captured_pass_bytes(shape: str, capacity: int, rows: int = 1, itemsize: int = 2,
                        context: int | None = None) -> PassBytes:
    """A captured pass of `rows` rows after `context` tokens in a runner of `capacity` logical slots: it attends
    over the smallest captured span that covers the scratch slot, the context and its own rows; with no
    context given, over the whole cache (its largest span)."""
    slots = aligned_slots(capacity)
    used = slots if context is None else min(slots, 1 + context + rows)
    return pass_bytes(shape, covering_span(used, graph_spans(slots)), rows, itemsize)


def attention_flop_share(shape: str, slots: int) -> float:
    """Attention's multiply-adds per query row over `slots` slots (scores and weighted values), as a share of
    the row's weight multiply-adds: what a compute-bound pass (a large tree) gains over an empty context."""
    _, _, _, layers, heads, _, head_dim, _ = SHAPES[shape]
    return 2 * layers * heads * head_dim * slots / weight_count(shape)
