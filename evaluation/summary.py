"""From decode records to per-setting speeds, the field's metrics and paired gains (no printing, no plots).

A setting is one (T, B). Only prompts that hold every (decoder, seed) recorded at a setting enter it, and a
prompt's tokens and seconds are summed over its turns and seeds, so the prompt is the unit the bootstrap
resamples. Speed counts the tokens delivered (`new_tokens`) unless a sweep names `--speed-tokens round`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from evaluation.cautions import PLAIN_SHARE, Caution, cautions, loaded
from evaluation.record import DecodeRecord
from evaluation.stats import GainResult, paired_gains
from pipeline.metrics import RoundStats, round_stats, tokens_per_pass
from pipeline.result import PHASES
from pipeline.rules import DECODERS, RULES, comparisons

DELIVERED, PAPER_ROUND = "output", "round"  # the tokens delivered; the paper's count, the last round whole
SPEED_TOKENS = (DELIVERED, PAPER_ROUND)
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
# Spec-Bench's reporting groups, in its order, then HumanEval; other categories follow by name.
GROUPS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "humaneval")


def category_group(category: str) -> str:
    """Spec-Bench's grouping: the eight MT-bench categories are one `mt_bench` group; others stand alone."""
    return "mt_bench" if category in MT_BENCH else category


def group_order(groups) -> list[str]:
    groups = set(groups)
    return [g for g in GROUPS if g in groups] + sorted(groups - set(GROUPS))


EVERY_BUDGET = "all"  # a sweep's `ar` decodes: one per (prompt, T, seed), compared at every budget


def counted_tokens(record: DecodeRecord, rule: str = DELIVERED) -> int:
    """The tokens `record`'s speed counts under `rule` (one of SPEED_TOKENS): its output, plus what its last
    round verified past the limit only under the paper's count."""
    return record.new_tokens + (record.overshoot if rule == PAPER_ROUND else 0)


@dataclass(slots=True)
class DecoderStats:
    """One decoder at one setting, over the setting's complete prompts."""

    decoder: str
    budgets: list  # the budgets it ran with (the grid's B unless overridden)
    decodes: int
    tokens: np.ndarray  # (n_prompts,) counted tokens, summed over turns and seeds
    seconds: np.ndarray  # (n_prompts,)
    passes: int  # target passes after the prefills
    rounds: RoundStats
    budget_rounds: dict[int, int]  # rounds at each budget a round ran with (budget auto's choices; 0: plain)
    phases: np.ndarray | None  # (n_rounds, len(PHASES)) seconds; None from a running tally (evaluation.tally)
    ahead: tuple[int, int, float] = (0, 0, 0.0)  # drafting ahead: rounds that tried it, hits, seconds hits hid
    # Per round, for the report's plots; None from a running tally:
    tree_sizes: np.ndarray | None = None  # (n_rounds,)
    chosen: np.ndarray | None = None  # (n_rounds,) the budget each round ran with (budget auto's choices; 0: plain)
    accepted: np.ndarray | None = None  # (n_rounds,) tree nodes each round accepted
    cut: tuple[int, int] = (0, 0)  # cut pools: rounds with a pool in decodes that cut them, their pools' levels
    prefill: np.ndarray | None = None  # (n_prompts,) prefill seconds, summed over turns and seeds
    load: tuple[float, int] | None = None  # the highest load average at a decode's start or end, and the CPUs
    #                                        the process might use; None where no record says (schema 3)
    loaded_decodes: int = 0  # decodes that started or ended under load (evaluation.cautions)
    passes_by_prompt: np.ndarray | None = None  # (n_prompts,) target passes after the prefills, as `tokens`
    copied: tuple[int, int] = (0, 0)  # context lookup: accepted tokens only its chains proposed, of all accepted
    #                                   ((0, 0) where no decode ran with it)
    bare: int = 0  # rounds that verified nothing beyond the root (bare_rounds): the work of a plain round
    pool_depth: int = 0  # the deepest pool the drafter sent; deeper tree nodes came from context lookup's chains

    @property
    def plain_work(self) -> bool:
        """Whether its rounds verified nothing beyond the root, all of them or all but a few (PLAIN_SHARE): the
        work of plain decoding, whatever its rule's name."""
        return self.rounds.rounds > 0 and self.bare >= PLAIN_SHARE * self.rounds.rounds

    def acceptance_text(self) -> str:
        """Acceptance by depth as a row reads it: "0.55 0.54 0.67", the depths beyond the deepest pool the drafter
        sent marked as context lookup's chains ("0.55 0.54 0.67; chains 1.00 1.00"), "—" where none."""
        rates = [f"{a:.2f}" for a in self.rounds.acceptance]
        if 0 < self.pool_depth < len(rates):
            return " ".join(rates[: self.pool_depth]) + "; chains " + " ".join(rates[self.pool_depth:])
        return " ".join(rates) or "—"

    def ahead_summary(self) -> dict | None:
        """Drafting ahead over the rounds that tried it: the share whose pool was grown ahead (hit rate), and
        the mean drafting a hit hid; None when no round tried."""
        tried, hits, hidden = self.ahead
        if not tried:
            return None
        return {"ahead_tried": tried, "ahead_hit_rate": hits / tried,
                "ahead_hidden_ms": 1000 * hidden / hits if hits else 0.0}

    def cut_summary(self) -> dict | None:
        """Cut pools: the rounds with a pool and their pools' mean depth; None when no decode cut its pools."""
        rounds, levels = self.cut
        return {"cut_rounds": rounds, "pool_depth_mean": levels / rounds} if rounds else None

    def copied_summary(self) -> dict | None:
        """Context lookup: the accepted tokens only its chains proposed and their share of all accepted tokens; None
        where no decode ran with it."""
        copied, accepted = self.copied
        return {"copied": copied, "copied_share": copied / accepted} if accepted else None

    def budget_shares(self) -> dict[int, float]:
        """Share of rounds at each budget, smallest first."""
        total = sum(self.budget_rounds.values())
        return {b: self.budget_rounds[b] / total for b in sorted(self.budget_rounds)}

    @property
    def speed(self) -> float:
        return float(self.tokens.sum() / self.seconds.sum())

    @property
    def tokens_per_pass(self) -> float:
        return tokens_per_pass(int(self.tokens.sum()), self.passes)

    @property
    def round_seconds(self) -> np.ndarray:
        """(n_rounds,) target-side wall time of each round: its phases one after another."""
        assert self.phases is not None, "a running tally keeps no rounds' phases: analyse the records"
        return self.phases[:, 1:].sum(axis=1)

    def phase_median(self, name: str) -> float | None:
        """Median seconds of a phase over rounds, None when the decoder never runs it."""
        assert self.phases is not None, "a running tally keeps no rounds' phases: analyse the records"
        column = self.phases[:, PHASES.index(name)]
        return float(np.median(column)) if column.any() else None


@dataclass(slots=True)
class Setting:
    temperature: float
    budget: object  # the setting's B (an int, or a name such as "auto")
    category: str | None  # None: all categories
    prompt_ids: list[str]  # the complete prompts, sorted
    prompts_seen: int  # prompts with any record at this setting
    seeds: list[int]
    decoders: dict[str, DecoderStats]
    gains: dict[tuple[str, str], GainResult] = field(default_factory=dict)
    cautions: list[Caution] = field(default_factory=list)  # why some gains measure noise (evaluation.cautions)
    # tokens per target pass, a over b, with the speed gains' resamples (GainResult's speeds are tokens per pass)
    pass_gains: dict[tuple[str, str], GainResult] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"T={self.temperature:g} B={self.budget}" + (f" [{self.category}]" if self.category else "")


def settings_of(records: Sequence[DecodeRecord]) -> list[tuple[float, object]]:
    """The (T, B) settings of `records`, sorted; a sweep's `ar` (EVERY_BUDGET) enters each B at its T, and is
    a setting of its own only at a T where nothing else ran."""
    keys = {(float(r.temperature), r.setting_budget) for r in records}
    keys -= {(t, b) for t, b in keys if b == EVERY_BUDGET and any(u == t and c != b for u, c in keys)}
    return sorted(keys, key=lambda k: (k[0], isinstance(k[1], str), k[1] if not isinstance(k[1], str) else 0,
                                       str(k[1])))


def analyse(records: Sequence[DecodeRecord], temperature: float, budget, category: str | None = None, *,
            speed_tokens: str = DELIVERED, n_resamples: int = 2000, confidence_level: float = 0.95,
            rng: int = 0) -> Setting:
    """Speeds, round metrics and gains at one setting from timed (non-warm-up) records.
    category: a category group (see category_group), or None for all. Every setting's bootstrap starts from the same
    `rng` seed over prompts sorted by id, so settings with the same prompts are resampled with the same prompt indices.
    """
    assert speed_tokens in SPEED_TOKENS, speed_tokens
    at = records_at(records, temperature, budget, category)
    wanted = {(r.decoder, r.seed) for r in at}
    have: dict[str, set] = {}
    for r in at:
        have.setdefault(r.prompt_id, set()).add((r.decoder, r.seed))
    prompt_ids = sorted(p for p, got in have.items() if got == wanted)
    index = {p: i for i, p in enumerate(prompt_ids)}
    names = [d for d in DECODERS if any(r.decoder == d for r in at)]
    stats = {d: _decoder_stats(d, [r for r in at if r.decoder == d and r.prompt_id in index], index,
                               speed_tokens) for d in names}
    setting = Setting(temperature, budget, category, prompt_ids, len(have), sorted({s for _, s in wanted}), stats)
    return with_gains(setting, n_resamples=n_resamples, confidence_level=confidence_level, rng=rng)


def records_at(records: Sequence[DecodeRecord], temperature: float, budget, category: str | None = None) -> list[DecodeRecord]:
    """The timed records of one setting: those of its (T, B), and where no `ar` record has that B, the
    sweep's `ar` records at T (EVERY_BUDGET), which every budget shares."""
    def kept(r: DecodeRecord, b) -> bool:
        return (float(r.temperature) == temperature and r.setting_budget == b and not r.warmup
                and (category is None or category_group(r.category) == category))
    at = [r for r in records if kept(r, budget)]
    if budget != EVERY_BUDGET and not any(r.decoder == "ar" for r in at):
        at += [r for r in records if r.decoder == "ar" and kept(r, EVERY_BUDGET)]
    return at


def with_gains(setting: Setting, *, n_resamples: int, confidence_level: float, rng: int) -> Setting:
    """The setting with the paired gains of every comparison among its decoders (none from fewer than two
    prompts, or over a baseline with no tokens), in speed and, where every prompt made target passes after its
    prefill, in tokens per pass; and the cautions that go with them."""
    stats = setting.decoders
    pairs = comparisons(list(stats))
    if pairs and len(setting.prompt_ids) >= 2 and all(stats[b].tokens.sum() > 0 for _, b in pairs):
        tokens = {d: s.tokens for d, s in stats.items()}
        setting.gains = paired_gains(tokens, {d: s.seconds for d, s in stats.items()}, pairs,
                                     n_resamples=n_resamples, confidence_level=confidence_level, rng=rng)
        passes = {d: s.passes_by_prompt for d, s in stats.items()}
        if all(p is not None and (p > 0).all() for p in passes.values()):
            setting.pass_gains = paired_gains(tokens, passes, pairs, n_resamples=n_resamples,
                                              confidence_level=confidence_level, rng=rng)
    setting.cautions = cautions(stats, setting.prompt_ids, pairs)
    return setting


def _decoder_stats(decoder: str, mine: list[DecodeRecord], index: dict[str, int], speed_tokens: str) -> DecoderStats:
    tokens, seconds, prefill, passes = (np.zeros(len(index)) for _ in range(4))
    for r in mine:
        tokens[index[r.prompt_id]] += counted_tokens(r, speed_tokens)
        seconds[index[r.prompt_id]] += r.seconds
        prefill[index[r.prompt_id]] += r.prefill_seconds
        passes[index[r.prompt_id]] += r.target_passes
    column = lambda name: [x for r in mine for x in getattr(r, name) or ()]  # noqa: E731
    rounds = round_stats(column("accept_lengths"), column("accepted"), column("tried"), column("tree_sizes"))
    return DecoderStats(decoder, sorted({r.budget for r in mine}, key=str), len(mine), tokens, seconds,
                        int(passes.sum()), rounds, dict(Counter(column("budgets"))),
                        _phase_matrix(mine), ahead_counts(mine), np.array(column("tree_sizes"), float),
                        np.array(column("budgets"), np.int64), np.array(column("accepted"), np.int64),
                        cut_counts(mine), prefill, *load_of(mine), passes, copied_counts(mine),
                        sum(map(bare_rounds, mine)), max(map(pool_depth, mine), default=0))


def bare_rounds(record: DecodeRecord) -> int:
    """The rounds of `record` that verified nothing beyond the root: no tree, or a tree of the target's own draw X1
    alone, which its root pass or held row had already given (a root-pass rule runs its tree pass only on a tree
    that holds X1; `cover` draws X1 from a held row): one token a target pass, as `ar`."""
    rule = RULES[record.decoder]
    held = record.held_rows or [0] * len(record.tree_sizes)
    return sum(size <= (1 if rule.root_pass or (rule.covers and h) else 0)
               for size, h in zip(record.tree_sizes, held))


def pool_depth(record: DecodeRecord) -> int:
    """The deepest pool the drafter sent in `record`'s rounds (0: none, or an older record that does not say)."""
    return max(record.pool_depths or (), default=0)


def load_of(records: Sequence[DecodeRecord]) -> tuple[tuple[float, int] | None, int]:
    """((highest load average at a decode's start or end, fewest CPUs), decodes under load) over the records
    that say (schema 4); (None, 0) where none does."""
    said = [r for r in records if r.load_average]
    if not said:
        return None, 0
    peak = max(max(r.load_average) for r in said)
    return (float(peak), min(int(r.cpus) for r in said)), sum(loaded(r.load_average, r.cpus) for r in said)


def copied_counts(records: Sequence[DecodeRecord]) -> tuple[int, int]:
    """(accepted tokens only context lookup's chains proposed, accepted tokens) over the records that ran with it."""
    with_lookup = [r for r in records if r.lookup and r.copied is not None]
    return sum(map(sum, (r.copied for r in with_lookup))), sum(map(sum, (r.accepted for r in with_lookup)))


def ahead_counts(records: Sequence[DecodeRecord]) -> tuple[int, int, float]:
    """(rounds that drafted ahead, hits, seconds of drafting the hits hid) over records (older ones: none)."""
    rounds = [(hit, seconds) for r in records for hit, seconds in zip(r.ahead_hits or (), r.ahead_seconds or ())]
    return (sum(hit >= 0 for hit, _ in rounds), sum(hit == 1 for hit, _ in rounds),
            sum((seconds for hit, seconds in rounds if hit == 1), 0.0))


def cut_counts(records: Sequence[DecodeRecord]) -> tuple[int, int]:
    """(rounds with a pool, their pools' levels summed) over the records of decodes that cut pools (decoders
    with a root pass: the others wait for whole pools)."""
    depths = [d for r in records if r.cut_pools and RULES[r.decoder].root_pass for d in r.pool_depths if d > 0]
    return len(depths), sum(depths)


def median_rounds(stats: DecoderStats, k: int = 3) -> np.ndarray:
    """(k', len(PHASES)) phase seconds of the k rounds whose target-side time is nearest the median."""
    times = stats.round_seconds
    if len(times) == 0:
        return np.zeros((0, len(PHASES)))
    nearest = np.argsort(np.abs(times - np.median(times)), kind="stable")[:k]
    return stats.phases[np.sort(nearest)]


def _phase_matrix(records: Sequence[DecodeRecord]) -> np.ndarray:
    """(n_rounds, len(PHASES)) seconds per phase, rounds of all records one after another."""
    if not records:
        return np.zeros((0, len(PHASES)))
    return np.stack([np.concatenate([np.asarray(r.phase(name), float) for r in records]) for name in PHASES], axis=1)


def phase_ms(st: DecoderStats) -> dict:
    """The median round (`round_ms`, target side) and each phase's median over rounds (`PHASE_ms`, None where the
    decoder never runs it) in milliseconds, as the report's decoder table prints them; none from a running tally."""
    if st.phases is None:
        return {}
    rounds = st.round_seconds
    return {"round_ms": 1000 * float(np.median(rounds)) if len(rounds) else None,
            **{f"{p}_ms": None if (m := st.phase_median(p)) is None else 1000 * m for p in PHASES}}


def as_json(s: Setting) -> dict:
    """A setting's numbers as one JSON object: speeds, the field's metrics and gains with intervals."""
    return {"temperature": s.temperature, "budget": s.budget, "category": s.category, "prompts": len(s.prompt_ids),
            "decoders": {d: {"budgets": st.budgets, "decodes": st.decodes, "tokens": float(st.tokens.sum()),
                             "seconds": float(st.seconds.sum()), "tokens_per_second": st.speed,
                             "tokens_per_pass": st.tokens_per_pass, **st.rounds.as_json(),
                             **({"budget_shares": st.budget_shares()} if "auto" in st.budgets else {}),
                             **(st.ahead_summary() or {}), **(st.cut_summary() or {}),
                             **(st.copied_summary() or {}), **phase_ms(st)}
                         for d, st in s.decoders.items()},
            "gains": {f"{a}/{b}": {"gain": g.gain, "low": g.low if g.has_interval else None,
                                 "high": g.high if g.has_interval else None, "prompts": g.n_prompts,
                                 "standard_error": g.standard_error,
                                 "lowest_prompt": g.lowest if np.isfinite(g.lowest) else None,
                                 "cautions": [c.kind for c in s.cautions if c.concerns((a, b))]}
                      for (a, b), g in s.gains.items()},
            "pass_gains": {f"{a}/{b}": {"gain": g.gain, "low": g.low if g.has_interval else None,
                                      "high": g.high if g.has_interval else None, "prompts": g.n_prompts,
                                      "tokens_per_pass": g.speed_a, "baseline_tokens_per_pass": g.speed_b}
                           for (a, b), g in s.pass_gains.items()},
            "cautions": [c.as_json() for c in s.cautions]}
