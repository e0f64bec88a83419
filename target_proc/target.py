"""The target's KV bookkeeping over a runner: prefill, root pass, tree pass and compacting commit.

Cache layout: slots [0, P) hold the committed context before the root, slot P the root, and a tree pass
writes its node i at slot P + 1 + i with position P + depth(i). A commit moves the accepted path's K/V to
the slots right after the root, so the layout holds again with P grown by 1 + accepted."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from models.passes import prefill
from models.runner import ModelRunner
from pipeline.config import CapacityError
from pipeline.tree import Tree, ancestor_matrix


CONTEXT_CHUNK = 64  # context positions per measurement pass of score_context
SHARED_CHUNK = 128  # prefill tokens per pass while the drafter may still be working: how soon the target
#                    notices it is done and takes every core


class Target:
    """threads: CPU threads for passes that overlap the drafter's work, and for the others (on CUDA: unused)."""

    def __init__(self, runner: ModelRunner, threads: tuple[int, int] | None = None) -> None:
        self.runner = runner
        self.device = runner.device
        self.threads = threads if runner.device.type == "cpu" else None
        self.before_root = 0  # P: committed tokens in the cache before the root (Drafter.through_root counts it)

    @property
    def capacity(self) -> int:
        return self.runner.capacity

    def prefill(self, tokens: Sequence[int], overlapped: bool | Callable[[], bool] = False) -> None:
        """overlapped: whether the drafter works meanwhile, or a check of whether it still does; with a
        check (on the CPU), the prefill goes in short chunks while it does and takes every core after."""
        self._check(len(tokens) + 1)
        self.before_root = done = 0
        if callable(overlapped) and self.threads is not None:  # threads matter on the CPU only
            while done < len(tokens) and overlapped():
                self._use_threads(True)
                chunk = tokens[done: done + SHARED_CHUNK]
                prefill(self.runner, chunk, done)
                done += len(chunk)
        if done < len(tokens):
            self._use_threads(overlapped is True)
            prefill(self.runner, tokens[done:], done)
        self.before_root = len(tokens)

    def root_pass(self, root: int, overlapped: bool = False) -> torch.Tensor:
        self._use_threads(overlapped)
        p = self.before_root
        self._check(p + 1)
        one = np.array([p])
        return self.runner.forward(np.array([root]), one, one, p, one, np.ones((1, 1), bool))[0]

    def tree_pass(self, tree: Tree, root: int | None, overlapped: bool = False) -> torch.Tensor:
        self._use_threads(overlapped)  # the drafter waits while the target verifies, unless it drafts ahead
        p = self.before_root
        self._check(p + 1 + len(tree))
        if root is None:  # the root's K/V is in slot p already
            tokens, parent, first, depth = tree.token, tree.parent, p + 1, tree.depth
        else:  # the root is row 0 of this pass, every first-level node hangs off it
            tokens = np.concatenate([[root], tree.token])
            parent = np.concatenate([[-1], np.where(tree.parent < 0, 0, tree.parent + 1)])
            first, depth = p, np.concatenate([[0], tree.depth])
        slots = first + np.arange(len(tokens))
        return self.runner.forward(tokens, p + depth, slots, first, slots, ancestor_matrix(parent))

    def score_pool(self, tree: Tree, root: int, context: int) -> torch.Tensor:
        """Measurement only: the root's and every node's rows at the round's context -> (1 + n, V) logits.
        context: the committed tokens before the round's root (P at that round). The pass writes a copy of the root and
        the nodes past everything committed now, in slots the next round overwrites, and attends to the first `context`
        slots and its own ancestors: the cache's committed part, the root's own slot included, is left untouched, so the
        decode goes on exactly as without this pass."""
        self._use_threads(False)
        start = self.before_root + 1  # the next round's root will be written at slot before_root
        self._check(start + 1 + len(tree))
        tokens = np.concatenate([[root], tree.token])
        parent = np.concatenate([[-1], np.where(tree.parent < 0, 0, tree.parent + 1)])
        depth = np.concatenate([[0], tree.depth])
        slots = start + np.arange(len(tokens))
        return self.runner.forward(tokens, context + depth, slots, context, slots, ancestor_matrix(parent))

    def score_context(self, tokens: Sequence[int]) -> Iterator[tuple[int, torch.Tensor]]:
        """Measurement only: the rows at the committed context's first len(tokens) positions, which hold `tokens` ->
        (start, (n, V) logits at positions start..start + n - 1), in chunks of CONTEXT_CHUNK.
        Each chunk writes a copy of its tokens past everything committed (in slots the next round overwrites) and
        attends to the committed slots before it and to its own causal part, so its rows are those at the committed
        positions and the cache's committed part is left untouched. Each chunk's logits are valid until the next pass.
        """
        self._use_threads(False)
        start = self.before_root + 1
        for at in range(0, len(tokens), CONTEXT_CHUNK):
            chunk = np.asarray(tokens[at: at + CONTEXT_CHUNK], np.int64)
            self._check(start + len(chunk))
            slots = start + np.arange(len(chunk))
            causal = np.tril(np.ones((len(chunk), len(chunk)), bool))
            yield at, self.runner.forward(chunk, at + np.arange(len(chunk)), slots, at, slots, causal)

    def commit(self, accepted: Sequence[int], keep: int | None = None) -> None:
        """Keep the root and the accepted path; with `keep`, also the K/V of that tree node, the round's
        continuation scored in its own pass, as the next root's (at slot before_root once committed)."""
        p = self.before_root
        nodes = np.asarray([*accepted, *(() if keep is None else (keep,))], np.int64)
        src = p + 1 + nodes
        dst = p + 1 + np.arange(len(nodes))  # gathered before written: a source may be another's destination
        moved = src != dst
        if moved.any():
            self.runner.move(src[moved], dst[moved])
        self.before_root = p + 1 + len(accepted)

    def synchronize(self) -> None:
        self.runner.synchronize()

    def keep_features(self, layers: tuple[int, ...]) -> None:
        """From now on keep the inputs of these layers for every token the cache holds (an EAGLE-3 drafter's
        features); a commit keeps those of the tokens it keeps."""
        self.runner.keep_features(layers)

    def features(self, start: int, stop: int) -> torch.Tensor:
        """(stop - start, F) the kept features of committed positions [start, stop), in the model's dtype."""
        assert 0 <= start <= stop <= self.before_root + 1, (start, stop, self.before_root)
        return self.runner.features_at(np.arange(start, stop))

    def _use_threads(self, overlapped: bool) -> None:
        """On the CPU, leave the drafter its core while it works and take every core while it waits."""
        if self.threads is not None:
            n = self.threads[0] if overlapped else self.threads[1]
            if torch.get_num_threads() != n:
                torch.set_num_threads(n)

    def _check(self, needed: int) -> None:
        if needed > self.capacity:
            raise CapacityError(f"the decode needs {needed} KV slots but the target's cache holds "
                                f"{self.capacity} (raise `max_context`)")
