"""The rounds split by task (Table 10) and by first token and entropy quintile (Table 15), on made-up round
values: every point estimate is the plain sum over rounds it names, and every interval comes from the
resamples of the rule values of the same rounds."""

from __future__ import annotations

import numpy as np
import pytest

from study.selection import quintiles
from study.splits import QUINTILES, TASK_PAIRS, each_task, first_token_split, task_weighted
from study.values import Averages, RoundValues

BUDGETS = [(8, 0), (59, 1)]


def made_up(seed: int = 0, prompts: int = 12, rounds: int = 300) -> RoundValues:
    """Round values of `prompts` prompts in three tasks, the root gain larger where the root row is flatter."""
    rng = np.random.default_rng(seed)
    prompt = np.sort(rng.integers(0, prompts, rounds))
    prompt[:prompts] = np.arange(prompts)  # every prompt has a round
    prompt = np.sort(prompt)
    entropy = rng.uniform(0, 4, rounds)
    draft = rng.uniform(1, 4, (rounds, 2))
    values = {"draft": draft, "root": draft + entropy[:, None] * rng.uniform(0, 0.2, (rounds, 2)),
              "oracle": draft + rng.uniform(0.5, 1.5, (rounds, 2)), "depth-2": draft + rng.uniform(0, 0.5, (rounds, 2)),
              "root-draw": draft + rng.uniform(0, 1, (rounds, 2)), "pearl": draft + rng.uniform(0, 0.3, (rounds, 2))}
    return RoundValues(temperature=0.0, budgets=np.array([8, 59]), prompt=prompt, prompts=[f"p{i}" for i in range(prompts)],
                       categories=["qa", "rag", "writing"] * (prompts // 3), values=values, mean_curves={},
                       off_pool=np.zeros(rounds), entropy=entropy, first_agree=rng.random(rounds) < 0.7)


def test_the_first_token_split_and_quintiles_are_the_sums_they_name():
    rv = made_up()
    avg = Averages(rv, n_resamples=300, seed=4)
    splits = first_token_split(rv, avg, BUDGETS)
    which = quintiles(rv.entropy)
    for (b, k), f in zip(BUDGETS, splits):
        gain = rv.values["root"][:, k] - rv.values["draft"][:, k]
        agree = rv.first_agree
        advantage = rv.values["oracle"][:, k] - rv.values["draft"][:, k]
        depth2 = rv.values["depth-2"][:, k] - rv.values["draft"][:, k]
        assert f.budget == b and f.agreeing.value == pytest.approx(agree.mean())
        assert f.root_gain_share.value == pytest.approx(gain[agree].sum() / gain.sum())
        assert f.depth_two_share.value == pytest.approx(depth2[agree].sum() / advantage[agree].sum())
        assert f.upper_over_lower.value == pytest.approx(gain[which >= 3].sum() / gain[which <= 1].sum())
        means = [gain[which == q].mean() for q in range(QUINTILES)]
        assert [e.value for e in f.quintile_gain] == pytest.approx(means)
        assert [e.value for e in f.rise] == pytest.approx(np.diff(means))
        assert f.rises == bool(np.all(np.diff(means) > 0)) and sum(f.quintile_rounds) == rv.rounds
        for e in (f.agreeing, f.root_gain_share, f.depth_two_share, f.upper_over_lower, *f.quintile_gain, *f.rise):
            assert e.low <= e.value <= e.high


def test_a_falling_quintile_is_said_with_its_step():
    rv = made_up(1)
    top = quintiles(rv.entropy) == QUINTILES - 1
    rv.values["root"][top] = rv.values["draft"][top]  # no root gain where the row is flattest
    (f,) = first_token_split(rv, Averages(rv, n_resamples=200), BUDGETS[:1])
    assert not f.rises and f.rise[-1].value < 0 and f.quintile_gain[-1].value == 0


def test_the_split_is_resampled_with_the_rule_values_resamples():
    rv = made_up(2)
    one, other = Averages(rv, n_resamples=200, seed=3), Averages(rv, n_resamples=200, seed=9)
    same = first_token_split(rv, one, BUDGETS)[0].agreeing
    assert first_token_split(rv, Averages(rv, n_resamples=200, seed=3), BUDGETS)[0].agreeing == same
    assert first_token_split(rv, other, BUDGETS)[0].agreeing != same


def test_each_task_is_its_prompts_alone_and_the_weighted_gain_averages_the_tasks():
    rv = made_up(3)
    avg = Averages(rv, n_resamples=300)
    tasks = each_task(rv, avg)
    assert [t.task for t in tasks] == ["mt_bench", "qa", "rag"]  # writing is one of MT-bench's: Spec-Bench's order
    for t in tasks:
        group = np.flatnonzero([c == t.task or (t.task == "mt_bench" and c == "writing") for c in rv.categories])
        mine = Averages(rv, prompts=group, n_resamples=300)
        assert t.prompts == 4 and t.resamples == 300 and not t.has_interval  # 4 prompts: fewer than 5
        for a, b in TASK_PAIRS:
            assert t.gains[a, b] == mine.gain(a, b)
    weighted = task_weighted(rv, avg)
    assert weighted.resamples == 300  # at most the paper's 1000, never more than the others'
    assert task_weighted(rv, Averages(rv, n_resamples=2000)).resamples == 1000
    for a, b in TASK_PAIRS:
        per_task = [[(rv.values[r][np.isin(rv.prompt, np.flatnonzero([x == c for x in rv.categories]))]).mean(0)
                     for r in (a, b)] for c in ("writing", "qa", "rag")]
        want = np.mean([x for x, _ in per_task], 0) / np.mean([y for _, y in per_task], 0) - 1
        assert [e.value for e in weighted.gains[a, b]] == pytest.approx(want)


def test_the_tables_say_their_intervals_the_fall_and_the_resamples_they_differ_by():
    from study.tables import table_10, table_15

    rv = made_up(1)
    top = quintiles(rv.entropy) == QUINTILES - 1
    rv.values["root"][top] = rv.values["draft"][top]
    avg = Averages(rv, n_resamples=1500)
    text = "\n".join(table_15(rv, avg))
    assert "| 59 | " in text and "no, quintile 4 to 5: -" in text and text.count("[") >= 2 * (4 + 5)
    said = "\n".join(table_10(rv, avg))
    assert "1000 resamples rather than the 1500 above" in said and "Each task's own gains (1500 resamples" in said
    assert "rather than" not in "\n".join(table_10(rv, Averages(rv, n_resamples=800)))  # the same count: not said
