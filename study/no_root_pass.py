"""A decoder without a root pass, offline (DESIGN.md section 12; the paper's D.10): a round holds the exact root
row only when the round before was covered, and then selects with `root`, else with `draft`. It holds the row
with a probability h that follows h' = h cov(root's tree) + (1 - h) cov(draft's tree) from h = 0 at each
decode's first round; per round this gives h and h times each rule's value, whose per-prompt sums
study.values.Averages resamples."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from study.coverage import MEMBERS, SCORED_TOP, reported_budgets
from evaluation.rounds import RecordedDecode
from study.values import BUDGETS, PerRound, by_temperature
from pipeline.pool import ROOT
from pipeline.value import Scored


def scored_sets(top: int = SCORED_TOP) -> tuple[str, str]:
    """What the decoder's pass scores: the M highest-ranked candidates of its rule's order, or the pool."""
    return f"top-{top}", "pool"


def own_coverage(s: Scored, rank: np.ndarray, budgets: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """A fixed tree's value (K,) and exhaustive coverage (2, K) when the pass scores the first `top`
    candidates of the tree's own order, and when it scores the pool, from its ranks (N,) (study.coverage's
    Member.rank) at budgets (K,)."""
    inside = rank[:, None] < budgets
    up = np.where(s.pool.parent == ROOT, -1, rank[np.maximum(s.pool.parent, 0)])
    exits = (up[:, None] < budgets) & ~inside  # where exhaustive traversal ends: outside, parent inside
    return s.mass @ inside, np.stack([s.mass @ (exits & (rank < top)[:, None]), s.mass @ exits])


def held_rounds(decodes: Iterable[RecordedDecode], budgets: Sequence[int] = BUDGETS, *,
                top: int = SCORED_TOP) -> list[PerRound]:
    """Per temperature (warm-ups left out), every round's figures at each budget, named `held:S` (the probability h that
    the round holds the root row), `root:S` and `draft:S` (h times that rule's value) and `decoder:S` (the decoder's
    value, h root's + (1 - h) draft's), for each S of scored_sets(top), and `draft` (draft's value, every round)."""
    names = scored_sets(top)
    out = []
    for temperature, found in by_temperature(decodes).items():
        kept = reported_budgets(found, budgets)
        columns: dict[str, list[np.ndarray]] = {f"{what}:{name}": [] for name in names
                                                for what in ("held", "root", "draft")}
        columns["draft"] = []
        for d in found:
            held = np.zeros((len(names), len(kept)))  # the first round holds nothing
            for rnd in d.rounds:
                s = rnd.scored()
                draft_value, draft_cover = own_coverage(s, MEMBERS["draft"](s).rank, kept, top)
                root_value, root_cover = own_coverage(s, MEMBERS["root"](s).rank, kept, top)
                columns["draft"].append(draft_value)
                for i, name in enumerate(names):
                    columns[f"held:{name}"].append(held[i])
                    columns[f"root:{name}"].append(held[i] * root_value)
                    columns[f"draft:{name}"].append(held[i] * draft_value)
                held = held * root_cover + (1 - held) * draft_cover
        per = PerRound.of(temperature, found, kept)
        per.values = {name: np.array(rows) for name, rows in columns.items()}
        for name in names:  # h root's + (1 - h) draft's
            per.values[f"decoder:{name}"] = per.values[f"root:{name}"] - per.values[f"draft:{name}"] + per.values["draft"]
        out.append(per)
    return out
