"""An EAGLE-3 head as the drafter: extend its rows with the target's features, then grow the round's pool.

Head row j pairs the features of committed token j with the embedding of token j + 1, at position j
(DESIGN.md section 14): L committed tokens give L - 1 rows, the last one's output the root of the pool. So a
Start carries the prompt's features but the last token's, and a Commit of k tokens carries k. Slots [0, L - 1)
hold the rows; a pool's candidates take scratch slots after them (position L - 2 + depth), which the next
commit overwrites."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from pipeline.ahead import NOT_TRIED, Drafted
from pipeline.config import CapacityError, PoolConfig
from pipeline.pool import grow_pool
from pipeline.tree import ancestor_matrix
from protocol.errors import BadFeatures

ROWS_CHUNK = 512  # committed rows per pass
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _check_normable(hidden: torch.Tensor) -> None:
    """(n, H) committed rows' fc outputs: BadFeatures naming the first whose float32 sum of squares overflows,
    which the head's hidden_norm would norm to zeros (a pool of uniform log-probabilities). A host read, once
    a commit, before any of its rows is written."""
    bad = torch.nonzero(~torch.isfinite(hidden.float().square().sum(-1))).flatten()[:1].tolist()
    if bad:
        raise BadFeatures(f"`features` row {bad[0]} gives the head's fc a row beyond float32's range (its "
                          f"hidden_norm could not norm it): the features are not a hidden state of this target")


def features_of(msg) -> torch.Tensor:
    """A Start's or Commit's features (protocol.messages.check_features) -> (rows, width) in their dtype."""
    raw = torch.from_numpy(msg.features)  # uint8: bfloat16 has no numpy type
    return raw.view(TORCH_DTYPES[msg.feature_dtype]).reshape(-1, msg.feature_width)


class HeadDrafter:
    """The Drafter of an EAGLE-3 head (drafter_proc.drafter's, with features): start, commit, ahead."""

    wants_features = True

    def __init__(self, runner, config: PoolConfig) -> None:
        self.runner = runner  # models.eagle3.HeadRunner or models.mock.MockHeadRunner
        self.config = config
        self.rows = 0  # head rows in the cache: the committed tokens but one
        self.written: np.ndarray = np.zeros(0, np.int64)  # never drafts ahead: nothing written past the rows
        self.held = None

    def start(self, prompt: Sequence[int], features: torch.Tensor,
              between: Callable[[], bool] | None = None) -> Drafted:
        """New request: prompt (n >= 2 tokens) and its first n - 1 tokens' features (n - 1, F)."""
        self.rows = 0
        return self.commit(np.asarray(prompt, np.int64)[1:], features, between)

    def commit(self, tokens: Sequence[int], features: torch.Tensor,
               between: Callable[[], bool] | None = None) -> Drafted:
        """Committed tokens (k,) and the features (k, F) of the k tokens before each: the next pool.
        between: called between levels; when it answers true the pool ends at the levels grown."""
        t0 = time.perf_counter()
        tokens = np.asarray(tokens, np.int64)
        assert len(tokens) == features.shape[0] > 0, (len(tokens), features.shape)
        self._check(self.rows + len(tokens))
        rows = self.rows
        try:  # on any failure the rows are those before: what this commit wrote is scratch the next overwrites
            logits, hidden = self._write_rows(tokens, features)
            pool = grow_pool(torch.log_softmax(logits, -1), self._expander(self.rows, hidden), self.config, between,
                             self.runner.ids)  # grow_pool read the last ids back, so the device is idle
        except BaseException:
            self.rows = rows
            raise
        return Drafted(pool, time.perf_counter() - t0, NOT_TRIED)

    def ahead(self, path: Sequence[int], between: Callable[[], bool] | None = None) -> bool:
        """A head cannot grow a pool ahead: the rows it would take need features the target has not computed.
        The target refuses drafting ahead with a head; a drafter asked anyway grows nothing."""
        return False

    def _write_rows(self, tokens: np.ndarray, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows for `tokens` at slots and positions rows, rows + 1, ... in causal chunks -> the last row's ((Vd,)
        logits, (H,) output). BadFeatures, before any row, when a row's fc output is beyond what the head can norm."""
        hidden = self.runner.fuse(features)  # (k, H) fc(cat(low, mid, high))
        _check_normable(hidden)
        for at in range(0, len(tokens), ROWS_CHUNK):
            chunk = tokens[at: at + ROWS_CHUNK]
            slots = self.rows + np.arange(len(chunk))
            causal = np.tril(np.ones((len(chunk), len(chunk)), bool))
            logits = self.runner.forward(chunk, slots, slots, self.rows, slots, causal, last_only=True,
                                         rows={"hidden": hidden[at: at + ROWS_CHUNK]})
            self.rows += len(chunk)
        return logits[-1], self.runner.outputs[-1]

    def _check(self, rows: int) -> None:
        if rows + self.config.n_expanded > self.runner.capacity:
            raise CapacityError(f"the head's KV cache of {self.runner.capacity} slots cannot hold {rows} rows and "
                                f"a pool's {self.config.n_expanded} scratch slots (raise `max_context`)")

    def _expander(self, base: int, root_hidden: torch.Tensor):
        """The expand callback of grow_pool for a pool grown after `base` rows: each candidate's row pairs
        its token with its parent's output (the root's: the last row's)."""
        slot_of: dict[int, int] = {}
        fed_parent: list[int] = []  # per fed candidate: the fed index of its parent, -1 for the root
        outputs = [root_hidden[None]]  # row 0: the root's output, then each fed candidate's

        def expand(nodes: np.ndarray, tokens: np.ndarray, parents: np.ndarray, depth: int) -> torch.Tensor:
            start = len(fed_parent)
            for node, parent in zip(nodes.tolist(), parents.tolist()):
                fed_parent.append(slot_of[parent] - base if parent >= 0 else -1)
                slot_of[node] = base + len(fed_parent) - 1
            taken = torch.as_tensor(np.asarray(fed_parent[start:]) + 1, device=root_hidden.device)
            hidden = torch.cat(outputs)[taken]  # (E, H) the parents' outputs
            cols = base + np.arange(len(fed_parent))
            vis = ancestor_matrix(np.asarray(fed_parent))[start:]
            positions = np.full(len(nodes), base - 1 + depth)
            logits = self.runner.forward(tokens, positions, cols[start:], base, cols, vis, rows={"hidden": hidden})
            outputs.append(self.runner.outputs)
            return torch.log_softmax(logits, -1)

        return expand
