"""A run's summary as running sums, a record at a time: what evaluation.summary.analyse gives for the run's
records, without keeping them. What is kept grows with the run's prompts and (decoder, seed) pairs, never with
its decodes or rounds; a prompt is complete when it holds as many conversations (turn-0 records) as the run has
pairs. Rounds' phase times, which only the timing report reads, are not kept."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from evaluation.record import DecodeRecord
from evaluation.summary import (DELIVERED, SPEED_TOKENS, DecoderStats, Setting, ahead_counts, bare_rounds,
                                category_group, copied_counts, counted_tokens, cut_counts, load_of, pool_depth,
                                with_gains)
from pipeline.metrics import RoundCounts
from pipeline.rules import DECODERS


@dataclass(slots=True)
class _Sums:
    """One decoder's decodes of one prompt."""

    decodes: int = 0
    tokens: float = 0.0
    seconds: float = 0.0
    passes: int = 0
    budgets: set = field(default_factory=set)
    rounds: RoundCounts = field(default_factory=RoundCounts)
    budget_rounds: Counter = field(default_factory=Counter)
    ahead: tuple[int, int, float] = (0, 0, 0.0)  # drafting ahead: rounds that tried, hits, seconds hidden
    cut: tuple[int, int] = (0, 0)  # cut pools: rounds with a pool, their pools' levels
    copied: tuple[int, int] = (0, 0)  # context lookup: accepted tokens only a chain proposed, accepted tokens
    prefill: float = 0.0  # seconds
    load: tuple[float, int] | None = None  # highest load average at a decode's start or end, fewest CPUs
    loaded: int = 0  # decodes under load
    bare: int = 0  # rounds that verified nothing beyond the root
    pool_depth: int = 0  # the deepest pool the drafter sent


class Tally:
    """The summary of one setting (T, B, and optionally a category group) of a run, record by record."""

    def __init__(self, temperature: float, budget, category: str | None = None, *,
                 speed_tokens: str = DELIVERED) -> None:
        assert speed_tokens in SPEED_TOKENS, speed_tokens
        self.temperature, self.budget, self.category, self.speed_tokens = temperature, budget, category, speed_tokens
        self.pairs: set[tuple[str, int]] = set()  # (decoder, seed) pairs seen: the run's configurations
        self.conversations: Counter = Counter()  # prompt -> (decoder, seed) conversations begun
        self.sums: dict[str, dict[str, _Sums]] = {}  # prompt -> decoder -> sums

    def add(self, record: DecodeRecord) -> None:
        """Count one decode record; those of other settings and warm-ups are skipped, as analyse skips them."""
        if (float(record.temperature) != self.temperature or record.setting_budget != self.budget
                or record.warmup
                or (self.category is not None and category_group(record.category) != self.category)):
            return
        self.pairs.add((record.decoder, record.seed))
        self.conversations[record.prompt_id] += record.turn == 0
        s = self.sums.setdefault(record.prompt_id, {}).setdefault(record.decoder, _Sums())
        s.decodes += 1
        s.tokens += counted_tokens(record, self.speed_tokens)
        s.seconds += record.seconds
        s.passes += record.target_passes
        s.budgets.add(record.budget)
        s.rounds.add(record.accept_lengths, record.accepted, record.tried, record.tree_sizes)
        s.budget_rounds.update(record.budgets or ())
        s.ahead = tuple(a + b for a, b in zip(s.ahead, ahead_counts([record])))
        s.cut = tuple(a + b for a, b in zip(s.cut, cut_counts([record])))
        s.copied = tuple(a + b for a, b in zip(s.copied, copied_counts([record])))
        s.prefill += record.prefill_seconds
        s.bare += bare_rounds(record)
        s.pool_depth = max(s.pool_depth, pool_depth(record))
        load, under = load_of([record])
        if load is not None:
            s.load = load if s.load is None else (max(s.load[0], load[0]), min(s.load[1], load[1]))
            s.loaded += under

    def setting(self, *, n_resamples: int = 2000, confidence_level: float = 0.95, rng: int = 0) -> Setting:
        """The setting's speeds, round metrics and gains over its complete prompts (see analyse)."""
        prompt_ids = sorted(p for p in self.sums if self.conversations[p] == len(self.pairs))
        names = [d for d in DECODERS if any(d in by_decoder for by_decoder in self.sums.values())]
        stats = {d: self._decoder_stats(d, prompt_ids) for d in names}
        setting = Setting(self.temperature, self.budget, self.category, prompt_ids, len(self.sums),
                          sorted({seed for _, seed in self.pairs}), stats)
        return with_gains(setting, n_resamples=n_resamples, confidence_level=confidence_level, rng=rng)

    def _decoder_stats(self, decoder: str, prompt_ids: list[str]) -> DecoderStats:
        mine = [self.sums[p].get(decoder, _Sums()) for p in prompt_ids]
        rounds, budget_rounds = RoundCounts(), Counter()
        for s in mine:
            rounds.merge(s.rounds)
            budget_rounds.update(s.budget_rounds)
        return DecoderStats(decoder, sorted(set().union(*(s.budgets for s in mine)), key=str),
                            sum(s.decodes for s in mine), np.array([s.tokens for s in mine], float),
                            np.array([s.seconds for s in mine], float), sum(s.passes for s in mine), rounds.stats(),
                            dict(budget_rounds), None,
                            tuple(sum(x) for x in zip((0, 0, 0.0), *(s.ahead for s in mine))),
                            cut=tuple(sum(x) for x in zip((0, 0), *(s.cut for s in mine))),
                            prefill=np.array([s.prefill for s in mine], float), load=_peak(s.load for s in mine),
                            loaded_decodes=sum(s.loaded for s in mine),
                            passes_by_prompt=np.array([s.passes for s in mine], float),
                            copied=tuple(sum(x) for x in zip((0, 0), *(s.copied for s in mine))),
                            bare=sum(s.bare for s in mine), pool_depth=max((s.pool_depth for s in mine), default=0))


def _peak(loads) -> tuple[float, int] | None:
    """The highest load and the fewest CPUs of those known, or None."""
    known = [load for load in loads if load is not None]
    return (max(p for p, _ in known), min(c for _, c in known)) if known else None
