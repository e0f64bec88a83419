"""The verified token tree: an ancestor-closed node set, its positions and its attention pattern."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.pool import ROOT, Pool


@dataclass(frozen=True, slots=True, eq=False)
class Tree:
    """Non-root tree nodes, parents before children.
    token: (n,) int64 token ids parent: (n,) int64 tree index of the parent, ROOT for the root's children node: (n,)
    int64 pool index of each node, ROOT for a drawn token the pool lacks"""

    token: np.ndarray
    parent: np.ndarray
    node: np.ndarray
    depth: np.ndarray = field(init=False)
    _children: dict[tuple[int, int], int] = field(init=False)

    def __post_init__(self) -> None:
        assert np.all(self.parent < np.arange(len(self.token))), "parents must precede children"
        depth = np.ones(len(self.token), np.int64)
        for i, p in enumerate(self.parent.tolist()):  # n <= budget; a short loop
            if p >= 0:
                depth[i] = depth[p] + 1
        object.__setattr__(self, "depth", depth)
        children = {(p, t): i for i, (p, t) in enumerate(zip(self.parent.tolist(), self.token.tolist()))}
        object.__setattr__(self, "_children", children)

    @classmethod
    def from_pool(cls, pool: Pool, nodes: np.ndarray) -> Tree:
        """The tree of an ancestor-closed set of pool indices."""
        nodes = np.sort(np.asarray(nodes, np.int64))
        parent = pool.parent[nodes]
        index = np.searchsorted(nodes, parent)
        inside = parent >= 0
        assert np.all(nodes[index[inside]] == parent[inside]), "tree must be ancestor-closed"
        return cls(pool.token[nodes], np.where(inside, index, ROOT), nodes)

    @classmethod
    def single(cls, token: int, node: int = ROOT) -> Tree:
        """The tree holding one first-level token (a drawn token verified alone)."""
        return cls(np.array([token], np.int64), np.array([ROOT], np.int64), np.array([node], np.int64))

    def __len__(self) -> int:
        return self.token.shape[0]

    def child(self, parent: int, token: int) -> int:
        """Tree index of the child of `parent` (ROOT for the root) labelled `token`, or ROOT if none."""
        return self._children.get((parent, token), ROOT)

    def is_leaf(self, index: int) -> bool:
        """Whether tree node `index` has no children in the tree."""
        return not bool(np.any(self.parent == index))

    def path(self, index: int) -> list[int]:
        """Tree indices from the first level down to `index`."""
        out = []
        while index >= 0:
            out.append(index)
            index = int(self.parent[index])
        return out[::-1]


def ancestor_matrix(parent: np.ndarray) -> np.ndarray:
    """(n, n) bool: entry [i, j] is True when node j is node i or one of its ancestors.
    parent: (n,) int, ROOT for nodes hanging off the shared prefix; parent[i] < i."""
    n = parent.shape[0]
    anc = np.eye(n, dtype=bool)
    for i, p in enumerate(parent.tolist()):  # row i inherits its parent's row; n <= a few hundred
        if p >= 0:
            anc[i] |= anc[p]
    return anc
