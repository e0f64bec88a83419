"""Which decodes a sweep runs, in what order: the seeded prompt order, shards, warm-ups and rotation.

Pure functions of the options and the prompt list (DESIGN.md section 6). Every prompt runs each combination of
(decoder, T, B, seed) once (`ar` once per (T, seed)), in an order rotated by the prompt's position in the seeded
order, so that resampling prompts also resamples when in a prompt each decode ran."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evaluation.prompts import Prompt
from evaluation.summary import EVERY_BUDGET

_ORDER_STREAM = 2  # a stream of the seed of its own (evaluation.prompts' subset takes stream 1)


@dataclass(frozen=True, slots=True)
class Combo:
    """One setting of a decode; `budget` is the grid's B (the cap a decoder runs with may differ), or
    EVERY_BUDGET for `ar`, whose decodes no budget changes."""

    decoder: str
    temperature: float
    budget: int | str
    seed: int


@dataclass(frozen=True, slots=True)
class Task:
    """One decode of a sweep: a prompt, its position in the seeded order, a combination, warm-up or not."""

    prompt: Prompt
    position: int
    combo: Combo
    warmup: bool


def combinations(decoders: Sequence[str], temperatures: Sequence[float], budgets: Sequence[int | str],
                 seeds_at: dict[float, list[int]]) -> list[Combo]:
    """Every (decoder, T, B, seed), seeds outside budgets outside decoders: the decodes compared with one another run
    close together in time, so slow drift of the machine's speed affects them alike. `ar` runs once per (T, seed), just
    before that seed's other decoders, with budget EVERY_BUDGET: nothing in it depends on the budget, and every budget's
    decoders are compared with that one decode (evaluation.summary pairs them)."""
    combos = []
    for t in temperatures:
        for s in seeds_at[t]:
            if "ar" in decoders:
                combos.append(Combo("ar", t, EVERY_BUDGET, s))
            combos += [Combo(d, t, b, s) for b in budgets for d in decoders if d != "ar"]
    return combos


def rotated(combos: Sequence[Combo], position: int) -> list[Combo]:
    """The combinations for the prompt at `position` of the seeded order. Each (T, seed)'s decodes stay
    together, those compared with one another: the groups start at group position mod G, and each group
    at its own combination position mod its size."""
    groups: dict[tuple[float, int], list[Combo]] = {}
    for c in combos:
        groups.setdefault((c.temperature, c.seed), []).append(c)
    ordered = list(groups.values())
    ordered = ordered[position % len(ordered):] + ordered[: position % len(ordered)]
    return [c for g in ordered for c in g[position % len(g):] + g[: position % len(g)]]


def prompt_order(prompts: Sequence[Prompt], seed: int) -> list[Prompt]:
    """The seeded prompt order: a permutation that depends only on the seed and the prompt list."""
    perm = np.random.default_rng((seed, _ORDER_STREAM)).permutation(len(prompts))
    return [prompts[i] for i in perm]


def shard_positions(n_prompts: int, shard: int, n_shards: int) -> list[int]:
    """Positions of the seeded order that shard I of N (1-based) runs: every N-th, from I - 1."""
    return list(range(shard - 1, n_prompts, n_shards))


def plan(ordered: Sequence[Prompt], combos: Sequence[Combo], shard: int, n_shards: int,
         warmup: int) -> list[Task]:
    """The shard's decodes in running order: warm-ups on its first `warmup` prompts, then every prompt's rotated
    combinations. Rotation uses the position in the whole seeded order, so it does not depend on the sharding."""
    positions = shard_positions(len(ordered), shard, n_shards)
    tasks = [Task(ordered[i], i, c, True) for i in positions[:warmup] for c in rotated(combos, i)]
    tasks += [Task(ordered[i], i, c, False) for i in positions for c in rotated(combos, i)]
    return tasks
