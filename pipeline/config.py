"""Configuration dataclasses for pools and decodes; each default is defined here once."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

DECODERS = ("ar", "draft", "pearl", "pearl-top1", "root-draw", "root")
# Decoders that take the root row in a one-token target pass while the drafter works.
ROOT_PASS_DECODERS = frozenset({"pearl", "pearl-top1", "root-draw", "root"})


def is_int(value) -> bool:
    """An int that is not a bool (True would pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def split_list(text: str) -> list[str]:
    """The non-empty items of a comma-separated option value."""
    return [item.strip() for item in text.split(",") if item.strip()]


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """Candidate pool

    The shape of the drafter's candidate pool (DESIGN.md section 2).
    """

    topk: int = field(default=10, metadata={"help": "children proposed per expanded node"})
    depth: int = field(default=8, metadata={"help": "deepest candidate level"})
    expand: int = field(default=10, metadata={"help": "nodes expanded per level"})

    def __post_init__(self) -> None:
        for name in ("topk", "depth", "expand"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"`pool_{name}` must be a positive integer, got {value!r}")
        if self.expand > self.topk:
            raise ValueError(f"`pool_expand` ({self.expand}) must not exceed `pool_topk` ({self.topk})")

    @property
    def size(self) -> int:
        """Candidates in a full pool: topk at depth 1, expand * topk at each deeper level."""
        return self.topk + (self.depth - 1) * self.expand * self.topk

    @property
    def n_expanded(self) -> int:
        return (self.depth - 1) * self.expand


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """One decode: which rule, at what temperature and budget, for how long, with which seed."""

    decoder: str = "draft"
    temperature: float = 0.0
    budget: int = 8
    max_new_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.decoder not in DECODERS:
            raise ValueError(f"`decoder` must be one of {', '.join(DECODERS)}, got {self.decoder!r}")
        if not (isinstance(self.temperature, (int, float)) and not isinstance(self.temperature, bool)
                and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ValueError(f"`temperature` must be a finite number >= 0, got {self.temperature!r}")
        if not is_int(self.budget) or self.budget < 1:
            raise ValueError(f"`budget` must be a positive integer, got {self.budget!r}")
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be a positive integer, got {self.max_new_tokens!r}")
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"`seed` must be a non-negative integer, got {self.seed!r}")


def stream_seed(seed: int, prompt: str | int, decoder: str) -> int:
    """Seed of the verifier's generator for one (run seed, prompt, decoder), stable across processes."""
    digest = hashlib.blake2b(f"{seed}/{prompt}/{decoder}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
