"""Builders shared by the pipeline tests: in-process mock target/drafter pairs, pools grown from exact
mock rows with the target's edge probabilities, a prefix-keyed deterministic
target and a fixed-pool drafter.

Test modules receive these through fixtures (each returns the builder itself), so nothing imports this
file by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from drafter_proc.drafter import Drafter
from drafter_proc.head import HeadDrafter
from models.mock import EOS, MockHead, MockHeadRunner, MockModel, MockRunner
from pipeline.ahead import Drafted
from pipeline.config import PoolConfig
from pipeline.pool import ROOT, Pool, grow_pool
from pipeline.tree import Tree
from target_proc.target import Target
from tests.local_drafter import LocalDrafter

CAPACITY = 4096  # KV slots of a mock runner: prompt, output and a 711-row tree pass fit


@dataclass
class MockPair:
    target_model: MockModel
    drafter_model: MockModel
    target: Target
    drafter: LocalDrafter


class RememberedRows(MockModel):
    """A MockModel that computes each prefix's row once: the law tests decode the same few prefixes
    thousands of times, and a row costs two seeded generators. The runners' mask and slot checks still
    run on every pass; only the row's arithmetic is remembered (a copy is returned)."""

    def __init__(self, vocab_size: int, seed: int, noise: float = 0.0) -> None:
        super().__init__(vocab_size, seed, noise)
        self._rows: dict[bytes, np.ndarray] = {}

    def logits(self, digest: bytes) -> np.ndarray:
        if (row := self._rows.get(digest)) is None:
            row = self._rows[digest] = super().logits(digest)
        return row.copy()


def build_pair(vocab_size: int, seed: int, noise: float, pool_config: PoolConfig,
               capacity: int = CAPACITY) -> MockPair:
    """A mock target and a LocalDrafter over a mock drafter that perturbs the same rows by `noise`."""
    target_model = RememberedRows(vocab_size, seed)
    drafter_model = RememberedRows(vocab_size, seed, noise)
    target = Target(MockRunner(target_model, capacity))
    drafter = LocalDrafter(Drafter(MockRunner(drafter_model, capacity), pool_config))
    return MockPair(target_model, drafter_model, target, drafter)


def build_head_pair(vocab_size: int, seed: int, noise: float, pool_config: PoolConfig,
                    capacity: int = CAPACITY) -> MockPair:
    """A mock target that keeps its features and a LocalDrafter over the mock head (models.mock.MockHead),
    which reads them: the mock drafter's rows when the features are right."""
    target_model = RememberedRows(vocab_size, seed)
    drafter_model = RememberedRows(vocab_size, seed, noise)
    target = Target(MockRunner(target_model, capacity))
    target.keep_features((0,))
    drafter = LocalDrafter(HeadDrafter(MockHeadRunner(MockHead(drafter_model), capacity), pool_config))
    return MockPair(target_model, drafter_model, target, drafter)


def softmax64(logits: np.ndarray) -> np.ndarray:
    """(..., V) float64 softmax of float32 logits."""
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


@dataclass
class GrownPool:
    pool: Pool
    edge_probs: np.ndarray  # (N,) target probability of each candidate's edge at T = 1
    root_probs: np.ndarray  # (V,) target row at the root at T = 1


def grow_mock_pool(target_model: MockModel, drafter_model: MockModel, context: Sequence[int],
                   config: PoolConfig) -> GrownPool:
    """Grow a pool with `grow_pool` from the drafter model's exact rows (no KV cache involved) and read
    the target's exact probability of every candidate edge at its parent's address."""
    assert target_model.seed == drafter_model.seed, "addresses are digests under one seed"
    root = drafter_model.digest(context)
    node_digest: dict[int, bytes] = {}

    def expand(nodes, tokens, parents, depth):
        rows = []
        for node, token, parent in zip(nodes.tolist(), tokens.tolist(), parents.tolist()):
            node_digest[node] = drafter_model.extend(root if parent == ROOT else node_digest[parent], token)
            rows.append(drafter_model.logits(node_digest[node]))
        return torch.log_softmax(torch.from_numpy(np.stack(rows)), -1)

    root_row = torch.log_softmax(torch.from_numpy(drafter_model.logits(root)), -1)
    pool = grow_pool(root_row, expand, config)
    digests: list[bytes] = []  # per candidate, the digest of context + its path
    rows: dict[int, np.ndarray] = {ROOT: softmax64(target_model.logits(root))}  # target rows by parent
    edge = np.empty(len(pool), np.float64)
    for i in range(len(pool)):
        parent = int(pool.parent[i])
        digests.append(target_model.extend(root if parent == ROOT else digests[parent], int(pool.token[i])))
        if parent not in rows:
            rows[parent] = softmax64(target_model.logits(digests[parent]))
        edge[i] = rows[parent][pool.token[i]]
    return GrownPool(pool, edge, rows[ROOT])


class PrefixTarget:
    """A deterministic TargetRunner whose rows are keyed by the full address they are scored at: the row at
    an address is a point mass on `next_token[address]`, or on `default` for addresses not listed. With
    `strict`, it also checks that every commit keeps a root path of the last tree."""

    device = torch.device("cpu")

    def __init__(self, next_token: dict[tuple[int, ...], int], vocab_size: int, default: int = EOS,
                 strict: bool = True) -> None:
        self.next_token = next_token
        self.strict = strict
        self.vocab_size = vocab_size
        self.default = default
        self.context: list[int] = []  # committed tokens before the root
        self.root: int | None = None
        self.tree: Tree | None = None
        self.passes = 0

    def _row(self, address: Sequence[int]) -> torch.Tensor:
        row = torch.full((self.vocab_size,), float("-inf"))
        row[self.next_token.get(tuple(address), self.default)] = 0.0
        return row

    def prefill(self, tokens: Sequence[int], overlapped=False) -> None:
        self.context = [int(t) for t in tokens]
        self.root, self.tree = None, None

    def root_pass(self, root: int, overlapped: bool = False) -> torch.Tensor:
        self.passes += 1
        self.root = int(root)
        return self._row(self.context + [self.root])

    def tree_pass(self, tree: Tree, root: int | None, overlapped: bool = False) -> torch.Tensor:
        self.passes += 1
        if root is not None:
            self.root = int(root)
        assert self.root is not None, "a tree pass without the root needs a root pass first"
        base = self.context + [self.root]
        rows = [self._row(base)] if root is not None else []
        rows += [self._row(base + tree.token[tree.path(i)].tolist()) for i in range(len(tree))]
        self.tree = tree
        return torch.stack(rows)

    def commit(self, accepted: Sequence[int], keep: int | None = None) -> None:
        accepted = [int(i) for i in accepted]
        if accepted and self.strict:
            assert self.tree is not None and self.tree.path(accepted[-1]) == accepted, "not a root path"
        if keep is not None and self.strict:  # the kept node hangs off the accepted path: the next root
            assert int(self.tree.parent[keep]) == (accepted[-1] if accepted else -1), "not the continuation's node"
        tokens = [int(self.tree.token[i]) for i in accepted]
        self.context += [self.root] + tokens
        self.root = None if keep is None else int(self.tree.token[keep])
        self.tree = None

    def synchronize(self) -> None:
        pass


class FixedPoolDrafter:
    """A DrafterClient that offers the same pool every round and records what it is told."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self.context: list[int] = []
        self.started = 0
        self.ended = 0

    def start(self, prompt: Sequence[int]) -> None:
        self.context = list(prompt)
        self.started += 1

    def commit(self, tokens: Sequence[int]) -> None:
        self.context.extend(int(t) for t in tokens)

    def pool(self) -> Drafted:
        return Drafted(self._pool, 0.0)

    def has_pool(self) -> bool:
        return True

    def end(self) -> None:
        self.ended += 1


@pytest.fixture(scope="session")
def mock_pair():
    return build_pair


@pytest.fixture(scope="session")
def mock_head_pair():
    return build_head_pair


@pytest.fixture(scope="session")
def mock_pool():
    return grow_mock_pool


@pytest.fixture(scope="session")
def softmax():
    return softmax64


@pytest.fixture(scope="session")
def fixed_pool_drafter():
    return FixedPoolDrafter


@pytest.fixture(scope="session")
def prefix_target():
    return PrefixTarget
