"""The options of every program, one dataclass per concern; each value is checked here, where it enters.

Decoding settings are DecodeConfig's own fields, embedded (pipeline.config); pool options are PoolConfig's
and model options ModelOptions'. The launcher, the process programs, sweeps and reports build their
command lines from these classes through launch.cli, so each flag, default and check is written once.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from launch.cli import split_list
from pipeline.config import AUTO, ConfigError, DecodeConfig, check_int, check_temperature, is_int, parse_budget
from pipeline.rules import DECODERS
from protocol.transport import check_endpoint
from target_proc.summary import SPEED_TOKENS


def check_decoders(name: str, text: str) -> list[str]:
    """The distinct decoder names of a comma-separated list."""
    names = split_list(text)
    if not names or any(n not in DECODERS for n in names) or len(set(names)) != len(names):
        raise ConfigError(name, f"must list distinct names from {','.join(DECODERS)}, got {text!r}")
    return names


def check_seconds(name: str, value) -> float:
    """A timeout: a finite number of seconds > 0."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ConfigError(name, f"must be a finite number of seconds > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class PromptOptions:
    """Prompts"""

    prompt: tuple[str, ...] = field(default=(), metadata={"help": "a prompt (repeatable)"})
    prompts: tuple[str, ...] = field(default=(), metadata={
        "help": "prompt source, repeatable: builtin, humaneval, spec-bench:PATH (Spec-Bench's question.jsonl), "
                "a .jsonl file or a text file", "metavar": "SOURCE"})
    categories: str = field(default="", metadata={
        "help": "keep only these prompt categories, comma-separated; Spec-Bench's group mt_bench names its eight "
                "MT-bench categories (default: all)", "metavar": "LIST"})
    limit_prompts: int = field(default=0, metadata={
        "help": "0 runs every prompt; N runs N prompts drawn evenly across categories under --seed"})
    turns: str = field(default="first", metadata={
        "help": "first: each question's first turn (the paper's protocol); all: every turn of multi-turn "
                "questions, each answered in context of the earlier turns and this decoder's own answers",
        "metavar": "first|all"})

    def __post_init__(self) -> None:
        if not all(isinstance(p, str) and p for p in self.prompt + self.prompts):
            raise ConfigError("prompts", f"must name non-empty sources and prompts, got {self.prompts!r}")
        check_int("limit_prompts", self.limit_prompts, 0)
        if self.turns not in ("first", "all"):
            raise ConfigError("turns", f"must be first or all, got {self.turns!r}")


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """Drafter connection"""

    drafter_timeout: float = field(default=60.0, metadata={"help": "seconds to wait for a pool", "metavar": "S"})
    ready_timeout: float = field(default=600.0, metadata={
        "help": "seconds to wait for the drafter's handshake (it may still be loading)", "metavar": "S"})
    drafter_key: str = field(default="", metadata={
        "help": "the drafter's CURVE public key (its 40 Z85 characters or its .key file): connect encrypted, to "
                "that drafter alone; needed for a drafter beyond this machine (launch/pair.sh keys prints it)",
        "metavar": "KEY"})

    def __post_init__(self) -> None:
        check_seconds("drafter_timeout", self.drafter_timeout)
        check_seconds("ready_timeout", self.ready_timeout)


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Decoding"""

    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={
        "embed": ("temperature", "top_k", "top_p", "min_p", "budget", "budget_max", "budget_prior", "max_new_tokens",
                  "seed"),
        "help": {"seed": "first sampling seed (and the seed of --limit-prompts' subset)"}})
    sources: PromptOptions = field(default_factory=PromptOptions, metadata={
        "embed": ("prompt", "prompts", "categories", "limit_prompts", "turns")})
    decoders: str = field(default="ar,draft,pearl,root-draw,root", metadata={
        "help": f"comma-separated, from {','.join(DECODERS)}", "metavar": "LIST"})
    num_seeds: int = field(default=1, metadata={"help": "repeat each decode with seeds S..S+N-1"})
    json: bool = field(default=False, metadata={
        "help": "one JSON record per decode on stdout (a live line per decode still goes to stderr)"})

    def __post_init__(self) -> None:
        check_decoders("decoders", self.decoders)
        check_int("num_seeds", self.num_seeds, 1)

    @property
    def decoder_list(self) -> list[str]:
        return split_list(self.decoders)

    def configs(self) -> list[DecodeConfig]:
        """Every decode of one prompt: seeds outer, decoders inner."""
        s = self.decode.seed
        return [dataclasses.replace(self.decode, decoder=d, seed=seed)
                for seed in range(s, s + self.num_seeds) for d in self.decoder_list]


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """Sweep"""

    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={
        "embed": ("max_new_tokens", "seed", "budget_max", "budget_prior"),
        "help": {"seed": "seeds the prompt order, the prompt subset and the first sampling seed"}})
    sources: PromptOptions = field(default_factory=PromptOptions, metadata={
        "embed": ("prompts", "categories", "limit_prompts", "turns")})
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
                "so T = 0 runs with S alone)"})
    out: str = field(default="", metadata={
        "help": "output directory, required: records and config.json; rerun to resume", "metavar": "DIR"})
    shard: str = field(default="1/1", metadata={
        "help": "run shard I of N (1-based): every N-th prompt of the seeded order", "metavar": "I/N"})
    warmup: int = field(default=2, metadata={
        "help": "prompts whose every combination is decoded first, untimed in reports"})
    speed_tokens: str = field(default="round", metadata={
        "help": "tokens a speed counts. round: the paper's rule, up to the first end-of-sequence token with the "
                "last round whole; output: only the output a user receives (at most --max-new-tokens)",
        "metavar": "round|output"})

    def __post_init__(self) -> None:
        check_decoders("decoders", self.decoders)
        check_int("warmup", self.warmup, 0)
        if self.speed_tokens not in SPEED_TOKENS:
            raise ConfigError("speed_tokens", f"must be one of {', '.join(SPEED_TOKENS)}, got {self.speed_tokens!r}")
        check_int("num_seeds", self.num_seeds, 1)
        for parsed in ("temperature_list", "budget_list", "overrides", "shard_index"):
            getattr(self, parsed)  # each parsing property raises the ConfigError naming its field
        if not self.out:
            raise ConfigError("out", "must name the output directory")

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
        items = split_list(self.temperatures)
        try:
            values = [check_temperature("temperatures", float(t)) for t in items]
        except (ValueError, ConfigError):
            values = []
        if not values or len(set(values)) != len(values):
            raise ConfigError("temperatures", f"must list distinct finite numbers >= 0, got {self.temperatures!r}")
        return values

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
        """The budget `decoder` runs with at grid budget `budget` (auto stays auto)."""
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


@dataclass(frozen=True, slots=True)
class KeyOptions:
    """Encrypted connections (CURVE keys)"""

    key_dir: str = field(default="", metadata={
        "help": "this host's keypair (self.key, self.key_secret) and the target keys its drafter accepts "
                "(authorized/*.key); made on first use (default: $SPECPAIR_KEYS or ~/.config/specpair/keys)",
        "metavar": "DIR"})
    curve: bool = field(default=False, metadata={
        "help": "encrypt and authenticate an ipc or loopback endpoint too (always on for tcp beyond this "
                "machine)"})


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Serving"""

    persist: bool = field(default=False, metadata={
        "help": "serve target after target: a Shutdown ends that target's session, not the drafter "
                "(launch/pair.sh drafter sets it)"})
    exit_with_target: bool = field(default=False, metadata={
        "help": "exit once the first target served has left, however it left (closed its connection, "
                "died): a drafter private to one target, as the Python API starts it"})


@dataclass(frozen=True, slots=True)
class RemoteOptions:
    """Remote drafter"""

    drafter_at: str = field(default="", metadata={
        "help": "start no drafter: run the target against the drafter serving at this endpoint (launch/pair.sh "
                "drafter on its host; with --drafter-key unless it is on this machine)", "metavar": "ADDR"})

    def __post_init__(self) -> None:
        if self.drafter_at:
            try:
                check_endpoint(self.drafter_at)
            except ValueError as e:
                raise ConfigError("drafter_at", str(e).replace("`endpoint` ", "")) from None


@dataclass(frozen=True, slots=True)
class AuthorizeOptions:
    """Authorized targets"""

    allow: tuple[str, ...] = field(default=(), metadata={
        "help": "a target's public key (40 Z85 characters or its .key file) that this host's drafter accepts "
                "from now on (repeatable)", "metavar": "KEY"})
