"""Selection in the rounds that hold a covered row (the paper's Table 27, DESIGN.md section 12): for each setting
recorded along `cover`, the share of its rounds that held their root's exact row, and in those rounds `draft`'s,
`root`'s and `root-draw`'s values with the gains of `root` and `root-draw` over `draft`, as ratios of per-round
figures summed over prompts (study.values.Averages), paired with the other intervals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from study.values import Averages, Estimate, PerRound, RoundValues

RULES = ("draft", "root", "root-draw")  # valued in the rounds that hold the row


@dataclass(frozen=True, slots=True)
class CoveredRounds:
    """Table 27's selection figures for one recording setting, each per reported budget (K,)."""

    decoder: str
    budget: str  # the setting's budget (the grid's B)
    rounds: int  # the setting's recorded rounds
    held_rounds: int  # ... that held their root's exact row
    held_share: Estimate  # the share of the setting's rounds that held it (the same at every budget)
    values: dict[str, list[Estimate]]  # rule (RULES) -> its mean value per round in the rounds that held it
    gains: dict[str, list[Estimate]]  # `root`, `root-draw` -> its gain over `draft` there


def covered_rounds(rv: RoundValues, avg: Averages) -> list[CoveredRounds]:
    """Every recording setting of `rv` with a round that held its root's row, in the order read; `avg` gives the
    resamples."""
    return [_setting(rv, avg, i) for i in range(len(rv.recorded)) if np.any(rv.held & (rv.recorded_in == i))]


def _setting(rv: RoundValues, avg: Averages, index: int) -> CoveredRounds:
    inside = rv.recorded_in == index
    held = inside & rv.held
    k = len(rv.budgets)
    columns = {"rounds": np.repeat(inside[:, None], k, 1).astype(np.float64),
               "held": np.repeat(held[:, None], k, 1).astype(np.float64)}
    columns.update({f"{rule}:held": rv.values[rule] * held[:, None] for rule in RULES})
    per = PerRound(rv.temperature, rv.budgets, rv.prompt, rv.prompts, rv.categories, columns)
    split = Averages(per, **avg.resampling)
    decoder, budget = rv.recorded[index]
    return CoveredRounds(decoder, budget, int(inside.sum()), int(held.sum()), split.ratio("held", "rounds")[0],
                         {rule: split.ratio(f"{rule}:held", "held") for rule in RULES},
                         {rule: split.gain(f"{rule}:held", "draft:held") for rule in RULES[1:]})
