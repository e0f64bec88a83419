"""Passes that both processes make the same way over a runner: the chunked prefill of committed tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from models.runner import ModelRunner, RowInputs

PREFILL_CHUNK = 512  # committed tokens per pass; bounds a pass's (tokens, context) mask


def prefill(runner: ModelRunner, tokens: Sequence[int], start: int, rows: RowInputs | None = None) -> torch.Tensor:
    """Write the K/V of `tokens` at slots and positions start, start + 1, ... in causal chunks, each chunk
    seeing the slots before it -> (V,) logits of the last token. `tokens` must not be empty; `rows`, the
    runner's per-row inputs of `tokens` (models.runner), are cut into the same chunks."""
    tokens = np.asarray(tokens, np.int64)
    assert len(tokens) > 0, "nothing to prefill"
    for offset in range(0, len(tokens), PREFILL_CHUNK):
        chunk = tokens[offset: offset + PREFILL_CHUNK]
        slots = start + offset + np.arange(len(chunk))
        causal = np.tril(np.ones((len(chunk), len(chunk)), bool))
        chunk_rows = None if rows is None else {k: v[offset: offset + PREFILL_CHUNK] for k, v in rows.items()}
        row = runner.forward(chunk, slots, slots, start + offset, slots, causal, last_only=True, rows=chunk_rows)
    return row[-1]
