"""The options of every program, one dataclass per concern; each value is checked here, where it enters.

Decoding settings are DecodeConfig's own fields, embedded (pipeline.config); pool options are PoolConfig's
and model options ModelOptions'. The launcher, the process programs, sweeps and reports build their
command lines from these classes through programs.cli, so each flag, default and check is written once."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from evaluation.paths import refuse_overwrite
from evaluation.prompts import STRATA
from evaluation.rounds_file import rounds_path
from pipeline.config import ConfigError, InputError, check_int, check_seconds, split_list
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from protocol.limits import IDLE_TIMEOUT_S, MAX_CONTEXT, REQUEST_CONTEXT
from protocol.transport import CONNECT_TIMEOUT_S, check_endpoint


def check_decoders(name: str, text: str) -> list[str]:
    """The distinct decoder names of a comma-separated list."""
    names = split_list(text)
    if not names or any(n not in DECODERS for n in names) or len(set(names)) != len(names):
        raise ConfigError(name, f"must list distinct names from {','.join(DECODERS)}, got {text!r}")
    return names


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
        "help": "0 runs every prompt; N runs N prompts drawn evenly across categories (or groups: --stratify) "
                "under --seed"})
    stratify: str = field(default="category", metadata={
        "help": "what --limit-prompts spreads its prompts over: category, or group (Spec-Bench's groups, where "
                "the eight MT-bench categories are one, mt_bench)", "metavar": "category|group"})
    turns: str = field(default="first", metadata={
        "help": "first: each question's first turn (the paper's protocol); all: every turn of multi-turn "
                "questions, each answered in context of the earlier turns and this decoder's own answers",
        "metavar": "first|all"})

    def __post_init__(self) -> None:
        if not all(isinstance(p, str) and p for p in self.prompt + self.prompts):
            raise ConfigError("prompts", f"must name non-empty sources and prompts, got {self.prompts!r}")
        check_int("limit_prompts", self.limit_prompts, 0)
        if self.stratify not in STRATA:
            raise ConfigError("stratify", f"must be category or group, got {self.stratify!r}")
        if self.turns not in ("first", "all"):
            raise ConfigError("turns", f"must be first or all, got {self.turns!r}")


@dataclass(frozen=True, slots=True)
class ConnectOptions:
    """Drafter connection"""

    drafter_timeout: float = field(default=60.0, metadata={"help": "seconds to wait for a pool", "metavar": "S"})
    ready_timeout: float = field(default=600.0, metadata={
        "help": "seconds to wait for the drafter's handshake (it may still be loading)", "metavar": "S"})
    connect_timeout: float = field(default=CONNECT_TIMEOUT_S, metadata={
        "help": "seconds to wait for anything to answer at the drafter's address (a drafter answers from its "
                "start, while its model still loads); then stop: nothing listens there", "metavar": "S"})
    drafter_key: str = field(default="", metadata={
        "help": "the drafter's CURVE public key (its 40 Z85 characters or its .key file): connect encrypted, to "
                "that drafter alone; needed for a drafter beyond this machine (launch/pair.sh keys prints it)",
        "metavar": "KEY", "dashed": True})

    def __post_init__(self) -> None:
        check_seconds("drafter_timeout", self.drafter_timeout)
        check_seconds("ready_timeout", self.ready_timeout)
        check_seconds("connect_timeout", self.connect_timeout)


def refuse_lookup_when_recording(decode: DecodeConfig) -> None:
    """Recorded rounds keep the drafter's pools for the values program: context lookup's chains must not enter."""
    if decode.lookup:
        raise ConfigError("lookup", "would graft chains copied from the context into the pools that recorded rounds "
                                    "keep for the values program, which studies the drafter's pools: record with a "
                                    "lookup of 0")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Decoding"""

    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={
        "embed": ("temperature", "top_k", "top_p", "min_p", "stop", "stop_token_ids", "ignore_eos", "budget",
                  "budget_max", "budget_prior", "max_new_tokens", "seed", "ahead", "lend_cores", "cut_pools",
                  "cut_weigh", "drafter_window", "lookup"),
        "help": {"seed": "first sampling seed (and the seed of --limit-prompts' subset)"}})
    sources: PromptOptions = field(default_factory=PromptOptions, metadata={
        "embed": ("prompt", "prompts", "categories", "limit_prompts", "stratify", "turns")})
    decoders: str = field(default="ar,draft,pearl,root-draw,root", metadata={
        "help": f"comma-separated, from {','.join(DECODERS)}", "metavar": "LIST"})
    num_seeds: int = field(default=1, metadata={"help": "repeat each decode with seeds S..S+N-1"})
    pick_budget: bool = field(default=False, metadata={
        "help": "in place of --budget, the tree size whose rounds promise the most tokens a second on this machine, "
                "from budget auto's kept pass timings and a conservative τ (the embedded pair's default run "
                "takes it when no --budget is given)"})
    json: bool = field(default=False, metadata={
        "help": "one JSON record per decode on stdout (a live line per decode still goes to stderr)"})
    record_rounds: str = field(default="", metadata={
        "help": "after each round, score its whole pool with one target pass (outside the timed phases) and "
                "keep the pool with the target's edge probabilities in DIR/rounds.shard-1-of-1.bin, for "
                "`launch/pair.sh values DIR` (refused where DIR holds one already, unless --overwrite)",
        "metavar": "DIR"})
    overwrite: bool = field(default=False, metadata={
        "help": "write over the rounds file the --record-rounds DIR holds already"})

    def __post_init__(self) -> None:
        check_decoders("decoders", self.decoders)
        check_int("num_seeds", self.num_seeds, 1)
        if self.record_rounds:  # said before any process starts
            refuse_lookup_when_recording(self.decode)
            if os.path.exists(self.record_rounds) and not os.path.isdir(self.record_rounds):
                raise ConfigError("record_rounds", f"{self.record_rounds} is not a directory")
            try:
                self.check_rounds_file()
            except InputError as e:
                raise ConfigError("record_rounds", str(e)) from None

    def check_rounds_file(self) -> None:
        """InputError where the --record-rounds directory holds a rounds file already (another run's) and
        `overwrite` is not set: one run's rounds are never appended to another's, nor lost to it."""
        refuse_overwrite([rounds_path(self.record_rounds, 1, 1)], self.overwrite, "--record-rounds NEW_DIR")

    @property
    def decoder_list(self) -> list[str]:
        return split_list(self.decoders)

    def configs(self) -> list[DecodeConfig]:
        """Every decode of one prompt: seeds outer, decoders inner."""
        s = self.decode.seed
        return [dataclasses.replace(self.decode, decoder=d, seed=seed)
                for seed in range(s, s + self.num_seeds) for d in self.decoder_list]


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
    clear: bool = field(default=False, metadata={
        "help": "serve a loopback tcp endpoint in clear: any process of this host may then connect and hold the "
                "drafter (every tcp endpoint speaks CURVE otherwise)"})
    max_request_context: int = field(default=REQUEST_CONTEXT, metadata={
        "help": "the largest KV cache, in slots, a target may ask this drafter for (the target's --max-context); "
                "a handshake asking for more is refused, so that no peer makes the drafter take more memory",
        "metavar": "N"})
    idle_timeout: float = field(default=IDLE_TIMEOUT_S, metadata={
        "help": "seconds a served target may stay silent (no message since this drafter's last reply) before "
                "the next target that speaks is served instead: a target stopped or hung mid-decode holds the "
                "drafter no longer; a real round never comes near the default", "metavar": "S"})

    def __post_init__(self) -> None:
        check_seconds("idle_timeout", self.idle_timeout)
        check_int("max_request_context", self.max_request_context, 16)  # as a target's --max-context
        if self.max_request_context > MAX_CONTEXT:
            raise ConfigError("max_request_context", f"must be at most {MAX_CONTEXT} (the KV slots a handshake "
                              f"carries), got {self.max_request_context}")


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
                "from now on (repeatable)", "metavar": "KEY", "dashed": True})
