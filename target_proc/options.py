"""Options of a decode run in the target process (the launcher shows and forwards the same fields)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.config import DECODERS, DecodeConfig, split_list

_DEFAULT = DecodeConfig()


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Decoding"""

    decoders: str = field(default="ar,draft,pearl,root-draw,root", metadata={
        "help": f"comma-separated, from {','.join(DECODERS)}", "metavar": "LIST"})
    temperature: float = field(default=_DEFAULT.temperature, metadata={"help": "0 is greedy", "metavar": "T"})
    budget: int = field(default=_DEFAULT.budget, metadata={"help": "tree budget B (non-root nodes)", "metavar": "B"})
    max_new_tokens: int = field(default=_DEFAULT.max_new_tokens, metadata={
        "help": "stop after the round in which the output reaches this many tokens"})
    seed: int = field(default=_DEFAULT.seed, metadata={"help": "first sampling seed", "metavar": "S"})
    num_seeds: int = field(default=1, metadata={"help": "repeat each decode with seeds S..S+N-1"})
    prompt: tuple[str, ...] = field(default=(), metadata={"help": "a prompt (repeatable)"})
    prompts: str = field(default="", metadata={
        "help": "prompt source: builtin, humaneval, spec-bench:PATH, a .jsonl file or a text file",
        "metavar": "FILE"})
    json: bool = field(default=False, metadata={"help": "one JSON object per decode on stdout"})
    drafter_timeout: float = field(default=60.0, metadata={"help": "seconds to wait for a pool", "metavar": "S"})
    ready_timeout: float = field(default=600.0, metadata={
        "help": "seconds to wait for the drafter's handshake (it may still be loading)", "metavar": "S"})

    def __post_init__(self) -> None:
        names = self.decoder_list
        if not names or any(n not in DECODERS for n in names):
            raise ValueError(f"`decoders` must list names from {','.join(DECODERS)}, got {self.decoders!r}")
        if self.num_seeds < 1:
            raise ValueError(f"`num_seeds` must be a positive integer, got {self.num_seeds}")
        for name in ("drafter_timeout", "ready_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)}")
        for d in names:  # the per-decode checks, with this run's values
            self.decode_config(d, self.seed)

    @property
    def decoder_list(self) -> list[str]:
        return split_list(self.decoders)

    def decode_config(self, decoder: str, seed: int) -> DecodeConfig:
        return DecodeConfig(decoder, self.temperature, self.budget, self.max_new_tokens, seed)
