"""The timing programs' options: a sweep's grid, the report, the export and the matched-size plan. Decoding
settings are DecodeConfig's fields, embedded; prompt options are programs.options'; each value is checked
here, where it enters."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from evaluation.summary import DELIVERED, EVERY_BUDGET, SPEED_TOKENS
from models.options import ModelOptions
from pipeline.config import AUTO, ConfigError, check_int, check_temperature, is_int, split_list
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from programs.cli import parse_budget
from programs.options import PromptOptions, check_decoders, refuse_lookup_when_recording



def temperature_list(text: str) -> list[float]:
    """The distinct temperatures of a comma-separated `temperatures` option; ConfigError naming it otherwise."""
    try:
        values = [check_temperature("temperatures", float(t)) for t in split_list(text)]
    except (ValueError, ConfigError):
        values = []
    if not values or len(set(values)) != len(values):
        raise ConfigError("temperatures", f"must list distinct finite numbers >= 0, got {text!r}")
    return values


# DecodeConfig's fields a sweep takes on its command line (the grid gives the decoder, T and B)
SWEEP_DECODE = ("max_new_tokens", "ignore_eos", "seed", "budget_max", "budget_prior", "ahead", "lend_cores",
                "cut_pools", "cut_weigh", "drafter_window", "lookup")


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """Sweep"""

    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={
        "embed": SWEEP_DECODE,
        "help": {"seed": "seeds the prompt order, the prompt subset and the first sampling seed"}})
    sources: PromptOptions = field(default_factory=PromptOptions, metadata={
        "embed": ("prompts", "categories", "limit_prompts", "stratify", "turns")})
    decoders: str = field(default="draft,pearl,root-draw,root", metadata={
        "help": f"comma-separated, from {','.join(DECODERS)}", "metavar": "LIST"})
    temperatures: str = field(default="0,1", metadata={"help": "comma-separated; 0 is greedy", "metavar": "LIST"})
    budgets: str = field(default="8,59", metadata={
        "help": "comma-separated tree budgets B; auto: chosen each round (see --budget)", "metavar": "LIST"})
    budget_overrides: str = field(default="", metadata={
        "help": "run DECODER at cap C where the grid says B: DECODER@B=C, or DECODER=C for every B; "
                "comma-separated (e.g. root-draw@59=41 for the matched-size run)", "metavar": "LIST"})
    num_seeds: int = field(default=1, metadata={
        "help": "at T > 0, decode with sampling seeds S..S+N-1 (greedy decodes do not depend on the seed, "
                "so T = 0 runs with S alone, unless --greedy-repeats)"})
    greedy_repeats: int = field(default=1, metadata={
        "help": "at T = 0, decode each prompt N times (recorded under seeds S..S+N-1; the same output each "
                "time): reports sum a prompt's decodes, so one slow moment weighs 1/N in its gain",
        "metavar": "N"})
    out: str = field(default="", metadata={
        "help": "output directory: records and config.json; rerun to resume", "metavar": "DIR",
        "required": True})
    shard: str = field(default="1/1", metadata={
        "help": "run shard I of N (1-based): every N-th prompt of the seeded order", "metavar": "I/N"})
    warmup: int = field(default=2, metadata={
        "help": "prompts whose every combination is decoded first, untimed in reports"})
    speed_tokens: str = field(default=DELIVERED, metadata={
        "help": "tokens a speed counts. output: the tokens delivered, the output a user receives (at most "
                "--max-new-tokens); round: the paper's count instead, up to the first end-of-sequence token with "
                "the last round whole (past the limit)",
        "metavar": "output|round"})
    record_rounds: bool = field(default=False, metadata={
        "help": "after each round, score its whole pool with one target pass (outside the timed phases) and "
                "keep the pool with the target's edge probabilities in rounds.shard-I-of-N.bin, for "
                "`launch/pair.sh values`"})

    def __post_init__(self) -> None:
        check_decoders("decoders", self.decoders)
        check_int("warmup", self.warmup, 0)
        if self.speed_tokens not in SPEED_TOKENS:
            raise ConfigError("speed_tokens", f"must be one of {', '.join(SPEED_TOKENS)}, got {self.speed_tokens!r}")
        check_int("num_seeds", self.num_seeds, 1)
        check_int("greedy_repeats", self.greedy_repeats, 1)
        for parsed in ("temperature_list", "budget_list", "overrides", "shard_index"):
            getattr(self, parsed)  # each parsing property raises the ConfigError naming its field
        if self.record_rounds:
            refuse_lookup_when_recording(self.decode)
        if not self.out:
            raise ConfigError("out", "must name the output directory")
        if os.path.exists(self.out) and not os.path.isdir(self.out):  # said before any process starts
            raise ConfigError("out", f"{self.out} is not a directory")

    @property
    def max_new_tokens(self) -> int:
        return self.decode.max_new_tokens

    @property
    def seed(self) -> int:
        return self.decode.seed

    @property
    def decoder_list(self) -> list[str]:
        return split_list(self.decoders)

    @property
    def temperature_list(self) -> list[float]:
        return temperature_list(self.temperatures)

    @property
    def budget_list(self) -> list[int | str]:
        values = [parse_budget(b) for b in split_list(self.budgets)]
        if not values or not all(b == AUTO or (is_int(b) and b > 0) for b in values) or len(set(values)) != len(values):
            raise ConfigError("budgets", f"must list distinct positive integers or auto, got {self.budgets!r}")
        return values

    @property
    def overrides(self) -> dict[tuple[str, int], int]:
        """(decoder, grid budget) -> the cap that decoder runs with there."""
        out: dict[tuple[str, int], int] = {}
        for item in split_list(self.budget_overrides):
            lhs, eq, cap = item.partition("=")
            decoder, at, budget = lhs.strip().partition("@")
            decoder, cap, budget = decoder.strip(), cap.strip(), budget.strip()
            if (not eq or decoder not in self.decoder_list or not cap.isdigit() or int(cap) < 1
                    or (at and not (budget.isdigit() and int(budget) in self.budget_list))):  # auto has budget_max
                raise ConfigError("budget_overrides", f"entries must be DECODER@B=C or DECODER=C with a decoder of "
                                  f"`decoders`, B in `budgets` and C a positive integer, got {item!r}")
            for b in ([int(budget)] if at else [b for b in self.budget_list if b != AUTO]):
                if (decoder, b) in out:
                    raise ConfigError("budget_overrides", f"sets {decoder} at B = {b} twice")
                out[decoder, b] = int(cap)
        return out

    @property
    def shard_index(self) -> tuple[int, int]:
        """(I, N), 1 <= I <= N."""
        i, slash, n = self.shard.partition("/")
        if not (slash and i.strip().isdigit() and n.strip().isdigit() and 1 <= int(i) <= int(n)):
            raise ConfigError("shard", f"must be I/N with 1 <= I <= N, got {self.shard!r}")
        return int(i), int(n)

    def cap(self, decoder: str, budget: int | str) -> int | str:
        """The budget `decoder` runs with at grid budget `budget` (auto stays auto; `ar`, shared by every
        budget, runs with the grid's first, which changes nothing in it)."""
        if budget == EVERY_BUDGET:
            return self.budget_list[0]
        return self.overrides.get((decoder, budget), budget)

    def seeds(self, temperature: float) -> list[int]:
        return list(range(self.seed, self.seed + (self.greedy_repeats if temperature == 0 else self.num_seeds)))


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """Report"""

    out: str = field(default="", metadata={
        "help": "directory for report.md and the plots; empty: the first DIR (refused where they exist already, "
                "unless --overwrite)", "metavar": "DIR"})
    overwrite: bool = field(default=False, metadata={
        "help": "write over the report.md and plots the output directory holds already"})
    resamples: int = field(default=2000, metadata={"help": "paired bootstrap resamples of prompts"})
    confidence: float = field(default=0.95, metadata={"help": "interval coverage", "metavar": "P"})
    bootstrap_seed: int = field(default=0, metadata={
        "help": "seed of the resampled prompt indices, the same for every setting", "metavar": "S"})
    by_category: bool = field(default=False, metadata={"help": "add speeds and gains per prompt category"})
    plots: bool = field(default=True, metadata={"help": "do not draw the PNG plots"})
    timeline_decoder: str = field(default="root-draw", metadata={
        "help": "decoder whose median rounds the timeline plot shows (falls back to one present)",
        "metavar": "NAME"})

    def __post_init__(self) -> None:
        check_int("resamples", self.resamples, 1)
        if not (isinstance(self.confidence, float) and 0 < self.confidence < 1):
            raise ConfigError("confidence", f"must be in (0, 1), got {self.confidence!r}")
        check_int("bootstrap_seed", self.bootstrap_seed, 0)
        if self.timeline_decoder not in DECODERS:
            raise ConfigError("timeline_decoder", f"must be one of {', '.join(DECODERS)}, "
                              f"got {self.timeline_decoder!r}")


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """Export"""

    format: str = field(default="spec-bench", metadata={
        "help": "spec-bench: one model-answer JSONL per decoder and setting, as Spec-Bench's evaluation/speed.py "
                "reads them", "metavar": "NAME"})
    model_id: str = field(default="", metadata={
        "help": "the answers' model_id prefix (default: the target model's name)", "metavar": "NAME"})
    overwrite: bool = field(default=False, metadata={
        "help": "write over the answer files OUT_DIR holds already (refused otherwise)"})

    def __post_init__(self) -> None:
        if self.format != "spec-bench":
            raise ConfigError("format", f"must be spec-bench, got {self.format!r}")


@dataclass(frozen=True, slots=True)
class MatchedOptions:
    """Matched size"""

    budget: int = field(default=59, metadata={"help": "pearl's budget", "metavar": "B"})
    num_seeds: int = field(default=2, metadata={"help": "sampling seeds of the matched run at T > 0"})
    out: str = field(default="", metadata={
        "help": "the matched run's output directory (default: the first DIR with -matched)", "metavar": "DIR"})

    def __post_init__(self) -> None:
        check_int("budget", self.budget, 1)
        check_int("num_seeds", self.num_seeds, 1)


def sweep_target(python: list[str], options: list[str], drafter: tuple[ModelOptions, dict] | None) -> list[str]:
    """The command line of a sweep's target process (`python -m timing sweep`, whose options are the
    target's `options`); `drafter`: the local drafter's model options and environment, which config.json
    records (None: a drafter started elsewhere)."""
    argv = [*python, "timing", "sweep", *options]
    if drafter is not None:
        model, env = drafter
        argv += ["--drafter-launch", json.dumps({"options": dataclasses.asdict(model), "env": env})]
    return argv
