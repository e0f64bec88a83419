"""The rounds split three ways, every figure with its paired prompt-bootstrap interval: by task (the paper's Table
10: the tasks weighted the same, and each task's own gains), and by the first-token split and the root row's
entropy quintile (Table 15), as ratios of per-round figures summed over prompts (study.values.Averages). The
quintile edges are taken once over a temperature's rounds and held fixed in the resamples."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import category_group, group_order
from study.selection import quintiles, stratified_counts, task_weighted_gain
from study.values import Averages, Estimate, PerRound, RoundValues

TASK_PAIRS = (("root", "draft"), ("root-draw", "draft"), ("root-draw", "pearl"))  # Table 10's gains
TASK_RESAMPLES = 1000  # the paper's resamples of prompts within each task (Table 10), at most
QUINTILES = 5


@dataclass(frozen=True, slots=True)
class TaskGains:
    """Gains of TASK_PAIRS at every reported budget over one task's prompts, or over every task weighted the
    same (`task` empty), with intervals from `resamples` resamples of prompts (within each task)."""

    task: str
    prompts: int
    rounds: int
    resamples: int
    gains: dict[tuple[str, str], list[Estimate]]  # (rule, baseline) -> per budget

    @property
    def has_interval(self) -> bool:
        """Whether enough prompts back the intervals for them to be given as bootstrap intervals."""
        return self.prompts >= MIN_INTERVAL_PROMPTS


def task_weighted(rv: RoundValues, avg: Averages) -> TaskGains:
    """Every task (prompt group) weighted the same: each task's value per round averaged over the tasks, with
    prompts resampled within each task (TASK_RESAMPLES, or fewer where `avg` has fewer)."""
    groups = np.array([category_group(c) for c in rv.categories])
    n = min(TASK_RESAMPLES, avg.counts.shape[0])
    counts = stratified_counts(groups, n, 1)
    gains = {}
    for a, b in TASK_PAIRS:
        point, low, high = task_weighted_gain(avg.totals[a], avg.totals[b], avg.rounds, groups, counts, avg.tail)
        gains[a, b] = [Estimate(float(p), float(lo), float(hi)) for p, lo, hi in zip(point, low, high)]
    return TaskGains("", avg.n_prompts, int(avg.rounds.sum()), n, gains)


def each_task(rv: RoundValues, avg: Averages) -> list[TaskGains]:
    """Each task's own gains, its prompts resampled (as many resamples as `avg`), tasks in Spec-Bench's order."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(rv.categories):
        groups.setdefault(category_group(c), []).append(i)
    out = []
    for g in group_order(set(groups)):
        mine = Averages(rv, prompts=np.array(groups[g]), **avg.resampling)
        out.append(TaskGains(g, mine.n_prompts, int(mine.rounds.sum()), mine.counts.shape[0],
                             {(a, b): mine.gain(a, b) for a, b in TASK_PAIRS}))
    return out


@dataclass(frozen=True, slots=True)
class FirstTokenSplit:
    """Table 15 at one budget: the rounds whose drafter's most probable first token is the target's most probable token
    at the root, and the root gain (root's value less draft's) by quintile of the root row's entropy."""

    budget: int
    agreeing: Estimate  # the share of rounds whose first tokens agree
    root_gain_share: Estimate  # their share of root's gain over draft
    depth_two_share: Estimate  # the share of the oracle's advantage that depth two recovers in them
    quintile_rounds: list[int]  # (5,) rounds in each entropy quintile, lowest first
    quintile_gain: list[Estimate]  # (5,) mean root gain per round in each quintile
    rise: list[Estimate]  # (4,) each quintile's mean root gain less the one's before it
    upper_over_lower: Estimate  # the root gain of the upper two quintiles over the lower two's

    @property
    def rises(self) -> bool:
        """Whether the mean root gain rises from each quintile to the next (the paper's greedy runs all do)."""
        return all(r.value > 0 for r in self.rise)


def first_token_split(rv: RoundValues, avg: Averages, budgets: list[tuple[int, int]]) -> list[FirstTokenSplit]:
    """Table 15 at each (budget, column) of `budgets`; the rounds' figures resampled as `avg`'s."""
    ks = [k for _, k in budgets]
    draft = rv.values["draft"][:, ks]
    gain, advantage, depth2 = (rv.values[name][:, ks] - draft for name in ("root", "oracle", "depth-2"))
    agree = rv.first_agree.astype(np.float64)[:, None]
    which = quintiles(rv.entropy)
    columns = {"agree": np.repeat(agree, len(ks), 1), "gain": gain, "gain:agree": gain * agree,
               "depth-2:agree": depth2 * agree, "advantage:agree": advantage * agree,
               "gain:lower": gain * (which <= 1)[:, None], "gain:upper": gain * (which >= 3)[:, None]}
    for q in range(QUINTILES):
        inside = (which == q)[:, None]
        columns[f"gain:{q}"], columns[f"rounds:{q}"] = gain * inside, np.repeat(inside, len(ks), 1).astype(np.float64)
    per = PerRound(rv.temperature, np.array([b for b, _ in budgets]), rv.prompt, rv.prompts, rv.categories, columns)
    split = Averages(per, **avg.resampling)
    agreeing, gain_share = split.mean("agree"), split.ratio("gain:agree", "gain")
    depth_two, ratio = split.ratio("depth-2:agree", "advantage:agree"), split.ratio("gain:upper", "gain:lower")
    by_quintile = [split.ratio(f"gain:{q}", f"rounds:{q}") for q in range(QUINTILES)]
    rise = [split.difference((f"gain:{q}", f"rounds:{q}"), (f"gain:{q - 1}", f"rounds:{q - 1}"))
            for q in range(1, QUINTILES)]
    counts = np.bincount(which, minlength=QUINTILES)
    return [FirstTokenSplit(b, agreeing[i], gain_share[i], depth_two[i], counts.tolist(),
                            [column[i] for column in by_quintile], [column[i] for column in rise], ratio[i])
            for i, (b, _) in enumerate(budgets)]
