"""The retained-row study's selections at one temperature (the paper's Tables 4, 19 and 25, Figure 6): every
replacement of the draft factors valued at every budget beside `draft` and `root`, the mixtures' weights, and
the rerankers' first-level figures against the draft's.

Controls (CONTROLS): `isotonic-q1` and `per-depth` (study.controls), the rerankers `base` and `rows`
(study.rerank), `substitute-K` and `mix-K`. The fitted ones need prompts in both halves, the rerankers
RERANK_PROMPTS in each; those reading retained rows need a recording that kept them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from study.controls import (MIXED, SUBSTITUTES, WEIGHTS, StudyRounds, base_values, chosen_weight, edge_values,
                                 first_values, isotonic_first, mixed_first, per_depth_edges, study_rounds)
from study.rerank import RERANKERS, first_level_figures, rerank
from study.retained_rows import holds_rows
from evaluation.rounds import RecordedDecode
from study.values import PerRound

CALIBRATED = ("isotonic-q1", "per-depth")
CONTROLS = (*CALIBRATED, *RERANKERS, *(f"substitute-{k}" for k in SUBSTITUTES), *(f"mix-{k}" for k in MIXED))
RERANK_PROMPTS = 3  # prompts each half needs for the rerankers to be fitted


@dataclass(slots=True)
class FirstFactors:
    """One temperature's study: `values` (name -> (R, K): `draft`, `root` and each control computed),
    `figures` (f"{ranking}:{figure}" -> (R, 1) for the draft's and each reranker's first-level ranking)."""

    study: StudyRounds
    values: PerRound
    figures: PerRound
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # mixed row -> (2, K) weight each half got
    seconds: dict[str, float] = field(default_factory=dict)  # reranker -> fitting and applying both halves

    @property
    def controls(self) -> list[str]:
        return [name for name in CONTROLS if name in self.values.values]


def first_factors(temperature: float, decodes: Sequence[RecordedDecode], budgets, *,
                  rerank_prompts: int = RERANK_PROMPTS) -> FirstFactors:
    """Every control that the rounds allow, valued at `budgets` (K,); the rerankers when each half holds
    `rerank_prompts` prompts."""
    s = study_rounds(temperature, decodes, budgets)
    budgets = np.asarray(budgets)
    rows = any(holds_rows(r) for r in s.rounds)
    values = base_values(s, budgets)
    for kind in SUBSTITUTES if rows else ():  # the root row's figures are recorded with the rows
        values[f"substitute-{kind}"] = first_values(s, [mixed_first(r, kind, 1.0) for r in s.rounds], budgets)
    draft_first = [np.exp(r.pool.logp[r.first].astype(np.float64)) for r in s.rounds]
    figures = {f"draft:{k}": v for k, v in first_level_figures(s, draft_first).items()}
    out = FirstFactors(s, s.table, PerRound(temperature, np.array([0]), s.table.prompt, s.table.prompts,
                                            s.table.categories))
    if s.splits:
        values["isotonic-q1"] = first_values(s, isotonic_first(s), budgets)
        values["per-depth"] = edge_values(s, per_depth_edges(s), budgets)
        fitted = RERANKERS if rows else RERANKERS[:1]
        for name in fitted if len(s.table.prompts) // 2 >= rerank_prompts else ():  # the odd half's prompts
            t0 = time.perf_counter()
            firsts = rerank(s, name)
            out.seconds[name] = time.perf_counter() - t0
            values[name] = first_values(s, firsts, budgets)
            figures.update({f"{name}:{k}": v for k, v in first_level_figures(s, firsts).items()})
        for kind in MIXED if rows else ():
            by_weight = np.stack([first_values(s, [mixed_first(r, kind, w) for r in s.rounds], budgets)
                                  for w in WEIGHTS])
            values[f"mix-{kind}"], picks = chosen_weight(by_weight, s.half)
            out.weights[kind] = np.asarray(WEIGHTS)[picks]
    s.table.values = values
    out.figures.values = {name: v[:, None] for name, v in figures.items()}
    return out
