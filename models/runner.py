"""The model-runner interface: what the target, the drafter and every pass helper call on a model with its cache.

A runner is a model with a static KV cache of `capacity` logical slots. Its `forward` writes the K/V of `tokens`
at `slots` (positions `positions`) and returns their rows; row i attends to the slots [0, prefix) and to cols[k]
where vis[i, k]. A runner may take per-row inputs beside the tokens (`rows`, named by its `row_inputs`; a head
reads the target's features). `RunnerKind` is what a runner class says of its model before any cache exists
(DESIGN.md section 7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
import torch

RowInputs = Mapping[str, np.ndarray]  # input name -> (n, ...) per-row values, row i for tokens[i]


class ModelRunner(Protocol):
    """A model with its static KV cache of `capacity` slots, on `device`, giving rows over `vocab_size` tokens."""

    capacity: int
    vocab_size: int
    device: torch.device
    row_inputs: tuple[str, ...]  # the per-row inputs `forward` needs beside the tokens; () for a plain LM

    def forward(self, tokens: np.ndarray, positions: np.ndarray, slots: np.ndarray, prefix: int, cols: np.ndarray,
                vis: np.ndarray, last_only: bool = False, rows: RowInputs | None = None) -> torch.Tensor:
        """tokens, positions, slots: (n,); cols: (m,) logical slots; vis: (n, m) bool; rows: name -> (n, ...).
        -> (n, V) float logits ((1, V) with last_only), valid until the next pass."""
        ...

    def move(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Copy the K/V of slots `src` to slots `dst` (all read before any is written)."""
        ...

    def synchronize(self) -> None:
        """Wait for the device to finish the passes queued (a host-device sync)."""
        ...


class RunnerKind(Protocol):
    """A runner class as a loader holds it: the runner of a model, and what its model's cache costs."""

    def build(self, model, capacity: int, *, graphs: bool, rehearse: bool = False) -> ModelRunner:
        """`model` with a static cache of `capacity` slots (CUDA graphs captured where `graphs` and possible). rehearse:
        on the CPU, every pass in the shape it takes on CUDA, run eagerly (a runner without graphs ignores it)."""
        ...

    def cache_bytes(self, model, capacity: int) -> int:
        """Bytes a cache of `capacity` slots for `model` takes."""
        ...

    def vocab_size_of(self, model) -> int:
        """How many tokens `model`'s rows cover."""
        ...


def check_rows(runner: ModelRunner, rows: RowInputs | None, n: int) -> None:
    """ValueError unless `rows` holds exactly the runner's `row_inputs`, each with `n` rows."""
    given = tuple(sorted(rows or ()))
    if given != tuple(sorted(runner.row_inputs)):
        raise ValueError(f"`rows` names {list(given)}, but {type(runner).__name__} takes "
                         f"{list(runner.row_inputs)} per row")
    for name in given:
        if len(rows[name]) != n:
            raise ValueError(f"`rows` {name!r} has {len(rows[name])} rows for {n} tokens")
