"""Options of a timing sweep and of its report; the launcher shows and forwards the sweep's fields."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from pipeline.config import DECODERS, DecodeConfig, is_int, split_list
from target_proc.options import RunOptions

_DEFAULT = DecodeConfig()
_RUN = {f.name: f for f in dataclasses.fields(RunOptions)}  # timeouts mean the same here as in a decode run


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """Sweep"""

    prompts: tuple[str, ...] = field(default_factory=lambda: ("builtin",), metadata={
        "help": "prompt source, repeatable: builtin, humaneval, spec-bench:PATH, a .jsonl file or a text file "
                "(default: builtin)"})
    limit_prompts: int = field(default=0, metadata={
        "help": "0 runs every prompt; N runs N prompts drawn evenly across categories under --seed"})
    decoders: str = field(default="draft,pearl,root-draw,root", metadata={
        "help": f"comma-separated, from {','.join(DECODERS)}", "metavar": "LIST"})
    temperatures: str = field(default="0,1", metadata={"help": "comma-separated; 0 is greedy", "metavar": "LIST"})
    budgets: str = field(default="8,59", metadata={"help": "comma-separated tree budgets B", "metavar": "LIST"})
    budget_overrides: str = field(default="", metadata={
        "help": "run DECODER at cap C where the grid says B: DECODER@B=C, or DECODER=C for every B; "
                "comma-separated (e.g. root-draw@59=41 for the matched-size run)", "metavar": "LIST"})
    max_new_tokens: int = field(default=_DEFAULT.max_new_tokens, metadata={
        "help": "stop after the round in which the output reaches this many tokens"})
    seed: int = field(default=_DEFAULT.seed, metadata={
        "help": "seeds the prompt order, the prompt subset and the first sampling seed", "metavar": "S"})
    num_seeds: int = field(default=1, metadata={
        "help": "at T > 0, decode with sampling seeds S..S+N-1 (greedy decodes do not depend on the seed, "
                "so T = 0 runs with S alone)"})
    out: str = field(default="", metadata={
        "help": "output directory, required: records and config.json; rerun to resume", "metavar": "DIR"})
    shard: str = field(default="1/1", metadata={
        "help": "run shard I of N (1-based): every N-th prompt of the seeded order", "metavar": "I/N"})
    warmup: int = field(default=2, metadata={
        "help": "prompts whose every combination is decoded first, untimed in reports"})
    drafter_timeout: float = field(default=_RUN["drafter_timeout"].default,
                                   metadata=_RUN["drafter_timeout"].metadata)
    ready_timeout: float = field(default=_RUN["ready_timeout"].default, metadata=_RUN["ready_timeout"].metadata)

    def __post_init__(self) -> None:
        if not self.prompts or not all(isinstance(p, str) and p for p in self.prompts):
            raise ValueError(f"`prompts` must name at least one source, got {self.prompts!r}")
        for name in ("limit_prompts", "warmup"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ValueError(f"`{name}` must be a non-negative integer, got {value!r}")
        for name in ("max_new_tokens", "num_seeds"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"`seed` must be a non-negative integer, got {self.seed!r}")
        names = split_list(self.decoders)
        if not names or any(n not in DECODERS for n in names) or len(set(names)) != len(names):
            raise ValueError(f"`decoders` must list distinct names from {','.join(DECODERS)}, got {self.decoders!r}")
        for parsed in ("temperature_list", "budget_list", "overrides", "shard_index"):
            getattr(self, parsed)  # each parsing property raises the ValueError naming its field
        if not self.out:
            raise ValueError("`out` must name the output directory")
        for name in ("drafter_timeout", "ready_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)}")

    @property
    def decoder_list(self) -> list[str]:
        return split_list(self.decoders)

    @property
    def temperature_list(self) -> list[float]:
        try:
            values = [float(t) for t in split_list(self.temperatures)]
        except ValueError:
            values = []
        if not values or not all(math.isfinite(t) and t >= 0 for t in values) or len(set(values)) != len(values):
            raise ValueError(f"`temperatures` must list distinct finite numbers >= 0, got {self.temperatures!r}")
        return values

    @property
    def budget_list(self) -> list[int]:
        items = split_list(self.budgets)
        if not items or not all(b.isdigit() and int(b) > 0 for b in items) or len(set(map(int, items))) != len(items):
            raise ValueError(f"`budgets` must list distinct positive integers, got {self.budgets!r}")
        return [int(b) for b in items]

    @property
    def overrides(self) -> dict[tuple[str, int], int]:
        """(decoder, grid budget) -> the cap that decoder runs with there."""
        out: dict[tuple[str, int], int] = {}
        for item in split_list(self.budget_overrides):
            lhs, eq, cap = item.partition("=")
            decoder, at, budget = lhs.strip().partition("@")
            decoder, cap, budget = decoder.strip(), cap.strip(), budget.strip()
            if (not eq or decoder not in self.decoder_list or not cap.isdigit() or int(cap) < 1
                    or (at and not (budget.isdigit() and int(budget) in self.budget_list))):
                raise ValueError(f"`budget_overrides` entries must be DECODER@B=C or DECODER=C with a decoder "
                                 f"of --decoders, B in --budgets and C a positive integer, got {item!r}")
            for b in ([int(budget)] if at else self.budget_list):
                if (decoder, b) in out:
                    raise ValueError(f"`budget_overrides` sets {decoder} at B = {b} twice")
                out[decoder, b] = int(cap)
        return out

    @property
    def shard_index(self) -> tuple[int, int]:
        """(I, N), 1 <= I <= N."""
        i, slash, n = self.shard.partition("/")
        if not (slash and i.strip().isdigit() and n.strip().isdigit() and 1 <= int(i) <= int(n)):
            raise ValueError(f"`shard` must be I/N with 1 <= I <= N, got {self.shard!r}")
        return int(i), int(n)

    def cap(self, decoder: str, budget: int) -> int:
        """The budget `decoder` runs with at grid budget `budget`."""
        return self.overrides.get((decoder, budget), budget)

    def seeds(self, temperature: float) -> list[int]:
        return [self.seed] if temperature == 0 else list(range(self.seed, self.seed + self.num_seeds))


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """Report"""

    out: str = field(default="", metadata={
        "help": "directory for report.md and the plots; empty: the first DIR", "metavar": "DIR"})
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
        if not is_int(self.resamples) or self.resamples < 1:
            raise ValueError(f"`resamples` must be a positive integer, got {self.resamples!r}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"`confidence` must be in (0, 1), got {self.confidence!r}")
        if not is_int(self.bootstrap_seed) or self.bootstrap_seed < 0:
            raise ValueError(f"`bootstrap_seed` must be a non-negative integer, got {self.bootstrap_seed!r}")
        if self.timeline_decoder not in DECODERS:
            raise ValueError(f"`timeline_decoder` must be one of {', '.join(DECODERS)}, "
                             f"got {self.timeline_decoder!r}")

