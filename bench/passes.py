"""The passes the benchmarks time, each a call that runs one pass and reads its result back: the target's
root pass and tree passes over bushy trees at a given context, and a drafter step (committing three tokens
and growing a full CPU pool), through each of the runner's paths.

Paths (PATHS) are the runner's ways of running a pass, all eager on the CPU: the CPU's own (exact sizes,
over the used slots), and a GPU's, padded to the CUDA buckets, over the span ladder's span or over the
whole cache.

The sizes (PATHS, COMMITTED, least_capacity) import no model code, so that benchmarks check their options
with them before torch loads; the passes import it when they are built.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models.options import CPU_BUCKETS, CUDA_BUCKETS, EMBEDDED_POOL
from pipeline.tree import Tree

PATHS = {  # path -> (buckets, what a pass attends over: models.hf.ATTEND): every runner path, run eagerly
    "eager": (CPU_BUCKETS, "used"),  # the CPU's: every size its own bucket, the used slots rounded up
    "ladder": (CUDA_BUCKETS, "ladder"),  # a GPU's: padded to the CUDA buckets, the ladder's span
    "whole": (CUDA_BUCKETS, "whole"),  # a GPU's before the ladder: padded, the whole cache
}
COMMITTED = [5, 6, 7]  # tokens a drafter step commits before growing its pool


def bushy_tree(n: int) -> Tree:
    """A tree of `n` nodes: four children of the root, then three children of each node in turn."""
    parent = np.array([-1 if i < 4 else (i - 4) // 3 for i in range(n)])
    return Tree(100 + np.arange(n), parent, np.arange(n))


def runner(model, capacity: int, path: str, lean: bool | None = None):
    """An eager models.hf.HFRunner of `path` (PATHS); lean: through models.llama_cpu's forward (None: where the
    runner takes it; a GPU's paths never do, as there)."""
    from models.hf import HFRunner

    buckets, attend = PATHS[path]
    return HFRunner(model, capacity, graphs=False, buckets=buckets, attend=attend,
                    lean=lean if path == "eager" else False)


def target_passes(model, context: int, capacity: int, path: str, trees: list[int], lean: bool | None = None,
                  tick: Callable[[str], None] | None = None) -> dict[str, Callable[[], object]]:
    """name -> a call that runs one pass and reads its result back (the pass is done when it returns), and
    returns its rows (valid until that runner's next pass). lean: as `runner` takes it; tick: the runner's
    profile clock (models.hf.HFRunner.tick)."""
    from target_proc.target import Target

    rng = np.random.default_rng(context)
    ids = rng.integers(100, 40000, context).tolist()
    target = Target(runner(model, capacity, path, lean))
    target.runner.tick = tick
    target.prefill(ids[:-1])
    target.root_pass(ids[-1])  # the root's K/V in slot P: tree passes below hang off it

    def read(rows):
        float(rows.reshape(-1)[0])  # a host read: the pass is done
        return rows

    passes = {"root pass": lambda: read(target.root_pass(ids[-1]))}
    for b in trees:
        tree = bushy_tree(b)
        passes[f"tree pass B={b}"] = lambda tree=tree: read(target.tree_pass(tree, None))
    return passes


def drafter_step(model, context: int, capacity: int, path: str) -> dict[str, Callable[[], None]]:
    """"drafter step" -> a call that commits COMMITTED after `context` tokens and grows a full CPU pool."""
    from drafter_proc.drafter import Drafter

    rng = np.random.default_rng(context + 1)
    drafter = Drafter(runner(model, capacity, path), EMBEDDED_POOL)
    drafter.start(rng.integers(100, 40000, context).tolist())
    length = drafter.through_root

    def step() -> None:
        drafter.commit(COMMITTED)  # grow_pool reads the pool back: the passes are done
        drafter.through_root = length

    return {"drafter step": step}


def least_capacity(contexts: list[int], trees: list[int]) -> int:
    """Logical slots the largest context needs with its largest pass."""
    return max(contexts) + max(list(trees) + [EMBEDDED_POOL.n_expanded]) + len(COMMITTED) + 8
