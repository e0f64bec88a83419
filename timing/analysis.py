"""From timed records to per-setting speeds, paired gains and round statistics (no printing, no plots).

A setting is one (T, B). Only prompts that hold every (decoder, seed) recorded at a setting enter it, so
every decoder's speed and every gain rests on the same prompts; a prompt's tokens and seconds are summed
over its seeds, so the prompt stays the unit that the bootstrap resamples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.decode import PHASES
from pipeline.rules import DECODERS, comparisons
from timing.stats import GainResult, paired_gains


@dataclass(slots=True)
class DecoderStats:
    """One decoder at one setting, over the setting's complete prompts."""

    decoder: str
    caps: list[int]  # the budgets it ran with (the grid's B unless overridden)
    decodes: int
    tokens: np.ndarray  # (n_prompts,) summed over seeds
    seconds: np.ndarray  # (n_prompts,)
    accepted: np.ndarray  # (n_rounds,) accepted tree nodes per round
    tree_sizes: np.ndarray  # (n_rounds,)
    phases: np.ndarray  # (n_rounds, len(PHASES)) seconds

    @property
    def speed(self) -> float:
        return float(self.tokens.sum() / self.seconds.sum())

    @property
    def round_seconds(self) -> np.ndarray:
        """(n_rounds,) target-side wall time of each round: its phases one after another."""
        return self.phases[:, 1:].sum(axis=1)

    def phase_median(self, name: str) -> float | None:
        """Median seconds of a phase over rounds, None when the decoder never runs it."""
        column = self.phases[:, PHASES.index(name)]
        return float(np.median(column)) if column.any() else None


@dataclass(slots=True)
class Setting:
    temperature: float
    budget: int
    category: str | None  # None: all categories
    prompt_ids: list[str]  # the complete prompts, sorted
    prompts_seen: int  # prompts with any record at this setting
    seeds: list[int]
    decoders: dict[str, DecoderStats]
    gains: dict[tuple[str, str], GainResult] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"T={self.temperature:g} B={self.budget}" + (f" [{self.category}]" if self.category else "")


def settings_of(records: Sequence[dict]) -> list[tuple[float, int]]:
    return sorted({(float(r["temperature"]), int(r["budget"])) for r in records})


def analyse(records: Sequence[dict], temperature: float, budget: int, category: str | None = None, *,
            n_resamples: int = 2000, confidence_level: float = 0.95, rng: int = 0) -> Setting:
    """Speeds, round statistics and gains at one setting from timed (non-warm-up) records.

    Every setting's bootstrap starts from the same `rng` seed over prompts sorted by id, so settings with
    the same prompts are resampled with the same prompt indices.
    """
    at = [r for r in records if float(r["temperature"]) == temperature and int(r["budget"]) == budget
          and not r["warmup"] and (category is None or r["category"] == category)]
    wanted = {(r["decoder"], r["seed"]) for r in at}
    have: dict[str, set] = {}
    for r in at:
        have.setdefault(r["prompt_id"], set()).add((r["decoder"], r["seed"]))
    prompt_ids = sorted(p for p, got in have.items() if got == wanted)
    index = {p: i for i, p in enumerate(prompt_ids)}
    names = [d for d in DECODERS if any(r["decoder"] == d for r in at)]
    stats = {}
    for d in names:
        mine = [r for r in at if r["decoder"] == d and r["prompt_id"] in index]
        tokens, seconds = np.zeros(len(prompt_ids)), np.zeros(len(prompt_ids))
        for r in mine:
            tokens[index[r["prompt_id"]]] += r["tokens"]
            seconds[index[r["prompt_id"]]] += r["seconds"]
        stats[d] = DecoderStats(
            d, sorted({int(r.get("cap", budget)) for r in mine}), len(mine), tokens, seconds,
            np.array([a for r in mine for a in r["accepted"]], float),
            np.array([t for r in mine for t in r["tree_sizes"]], float),
            _phase_matrix(mine))
    setting = Setting(temperature, budget, category, prompt_ids, len(have), sorted({s for _, s in wanted}), stats)
    pairs = comparisons(names)
    if pairs and len(prompt_ids) >= 2 and all(stats[b].tokens.sum() > 0 for _, b in pairs):
        setting.gains = paired_gains({d: s.tokens for d, s in stats.items()},
                                     {d: s.seconds for d, s in stats.items()}, pairs,
                                     n_resamples=n_resamples, confidence_level=confidence_level, rng=rng)
    return setting


def median_rounds(stats: DecoderStats, k: int = 3) -> np.ndarray:
    """(k', len(PHASES)) phase seconds of the k rounds whose target-side time is nearest the median."""
    times = stats.round_seconds
    if len(times) == 0:
        return np.zeros((0, len(PHASES)))
    nearest = np.argsort(np.abs(times - np.median(times)), kind="stable")[:k]
    return stats.phases[np.sort(nearest)]


def _phase_matrix(records: Sequence[dict]) -> np.ndarray:
    """(n_rounds, len(PHASES)) seconds per phase, rounds of all records one after another."""
    columns = [np.concatenate([np.asarray(r["phases"].get(name, [0.0] * r["rounds"]), float) for r in records])
               if records else np.zeros(0) for name in PHASES]
    return np.stack(columns, axis=1) if records else np.zeros((0, len(PHASES)))
