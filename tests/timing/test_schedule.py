"""Properties of timing.schedule: each prompt runs each combination once, rotated by its seeded position;
shards split prompts without changing any prompt's schedule."""

from __future__ import annotations

from collections import Counter
from itertools import groupby

import pytest

from evaluation.prompts import Prompt
from timing.schedule import Combo, combinations, plan, prompt_order, rotated, shard_positions


def prompts(n: int, categories: int = 1) -> list[Prompt]:
    return [Prompt(f"p/{i}", f"cat{i % categories}", f"text {i}") for i in range(n)]


GRID = combinations(["draft", "pearl", "root-draw", "root"], [0.0, 1.0], [8, 59], {0.0: [0], 1.0: [0]})


def test_grid_holds_every_combination_once():
    assert len(GRID) == 16 and len(set(GRID)) == 16
    assert {c.decoder for c in GRID} == {"draft", "pearl", "root-draw", "root"}


def test_every_prompt_runs_every_combination_exactly_once():
    tasks = plan(prompt_order(prompts(10), 3), GRID, 1, 1, warmup=0)
    per_prompt = Counter((t.prompt.id, t.combo) for t in tasks)
    assert len(per_prompt) == 10 * 16 and set(per_prompt.values()) == {1}


def test_schedule_rotates_by_position_in_seeded_order():
    ordered = prompt_order(prompts(20), 5)
    tasks = [t for t in plan(ordered, GRID, 1, 1, warmup=0)]
    for i, p in enumerate(ordered):
        mine = [t for t in tasks if t.prompt.id == p.id]
        assert all(t.position == i for t in mine)
        assert [t.combo for t in mine] == rotated(GRID, i)
    # The prompts run in the seeded order, one after another.
    assert [t.prompt.id for t in tasks[::16]] == [p.id for p in ordered]


def test_rotation_is_cyclic_and_keeps_each_seeds_decodes_together():
    assert rotated(GRID, 0) == GRID
    assert rotated(GRID, 17) == rotated(GRID, 1)
    t0, t1 = GRID[:8], GRID[8:]  # T = 0 and T = 1, seed 0 each
    assert rotated(GRID, 3) == t1[3:] + t1[:3] + t0[3:] + t0[:3]
    grid = combinations(["ar", "draft", "root-draw"], [0.0, 1.0], [8], {0.0: [0], 1.0: [0, 1, 2]})
    for position in range(12):
        order = rotated(grid, position)
        assert sorted(order, key=grid.index) == grid
        runs = [g for g, _ in groupby((c.temperature, c.seed) for c in order)]
        assert len(runs) == len(set(runs)) == 4  # each (T, seed) in one run
    assert {rotated(grid, p)[0] for p in range(12)} == set(grid)  # every combination leads some prompt


def test_prompt_order_is_deterministic_under_the_seed():
    ps = prompts(30)
    assert prompt_order(ps, 0) == prompt_order(ps, 0)
    assert prompt_order(ps, 0) != prompt_order(ps, 1)
    assert sorted(p.id for p in prompt_order(ps, 0)) == sorted(p.id for p in ps)


def test_warmups_come_first_on_the_first_prompts_with_every_combination():
    ordered = prompt_order(prompts(6), 0)
    tasks = plan(ordered, GRID, 1, 1, warmup=2)
    warm = [t for t in tasks if t.warmup]
    assert tasks[:len(warm)] == warm and len(warm) == 2 * 16
    assert {t.prompt.id for t in warm} == {ordered[0].id, ordered[1].id}
    assert Counter((t.prompt.id, t.combo) for t in warm).most_common(1)[0][1] == 1
    assert len(tasks) - len(warm) == 6 * 16  # warm-up prompts are timed again afterwards


@pytest.mark.parametrize("n_shards", [2, 3, 7])
def test_shards_partition_prompts_without_changing_their_schedule(n_shards):
    ordered = prompt_order(prompts(11), 4)
    whole = [t for t in plan(ordered, GRID, 1, 1, warmup=0)]
    parts = [t for s in range(1, n_shards + 1) for t in plan(ordered, GRID, s, n_shards, warmup=0)]
    assert sorted(parts, key=lambda t: (t.position, t.combo.decoder, t.combo.temperature, t.combo.budget)) == \
        sorted(whole, key=lambda t: (t.position, t.combo.decoder, t.combo.temperature, t.combo.budget))
    for s in range(1, n_shards + 1):  # each shard keeps each of its prompts' rotated order
        mine = plan(ordered, GRID, s, n_shards, warmup=0)
        for i in shard_positions(11, s, n_shards):
            assert [t.combo for t in mine if t.position == i] == rotated(GRID, i)


def test_each_shard_warms_up_on_its_own_prompts():
    ordered = prompt_order(prompts(8), 0)
    warm = [{t.prompt.id for t in plan(ordered, GRID, s, 2, warmup=2) if t.warmup} for s in (1, 2)]
    assert len(warm[0]) == len(warm[1]) == 2 and not warm[0] & warm[1]


def test_seeds_are_combinations_at_their_temperature():
    combos = combinations(["draft"], [0.0, 1.0], [8], {0.0: [0], 1.0: [0, 1]})
    assert combos == [Combo("draft", 0.0, 8, 0), Combo("draft", 1.0, 8, 0), Combo("draft", 1.0, 8, 1)]


def test_ar_runs_once_per_temperature_and_seed_whatever_the_budgets():
    grid = combinations(["ar", "draft", "root-draw"], [0.0, 1.0], [8, 59, "auto"], {0.0: [0], 1.0: [0, 1]})
    ar = [c for c in grid if c.decoder == "ar"]
    assert [(c.temperature, c.budget, c.seed) for c in ar] == [(0.0, "all", 0), (1.0, "all", 0), (1.0, "all", 1)]
    assert len(grid) == 3 + 2 * 3 * 3  # the others at every budget
    assert len(set(grid)) == len(grid)


def test_each_seeds_ar_runs_beside_that_seeds_other_decoders():
    """A prompt's ar decode at a seed runs just before the decodes compared with it, not in a block before
    every seed's: what the machine's drift adds between two decodes stays what one seed's decodes take."""
    grid = combinations(["ar", "draft", "root-draw"], [1.0], [8, "auto"], {1.0: [0, 1]})
    assert grid == [Combo("ar", 1.0, "all", 0), Combo("draft", 1.0, 8, 0), Combo("root-draw", 1.0, 8, 0),
                    Combo("draft", 1.0, "auto", 0), Combo("root-draw", 1.0, "auto", 0),
                    Combo("ar", 1.0, "all", 1), Combo("draft", 1.0, 8, 1), Combo("root-draw", 1.0, 8, 1),
                    Combo("draft", 1.0, "auto", 1), Combo("root-draw", 1.0, "auto", 1)]
