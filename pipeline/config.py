"""The error base, the checks of configuration values, the pool's shape and the sampling filters: each
written here once.

Checks raise ConfigError naming the field (`budget`), never a command-line flag: the programs that take
these values from a command line map field names to their own flags, and hold their help and parsers
(programs.rule_options, programs.cli). A leaf: it imports nothing of the
project (a decode's settings, which the rule table checks, are pipeline.settings)."""

from __future__ import annotations

import math
from dataclasses import dataclass


class InputError(ValueError):
    """Bad input that the user can fix: a value, a size, a file or a model. Programs report it in one line."""


class ConfigError(InputError):
    """A configuration value is invalid. `field` names it; the message may name other fields in backticks."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"`{field_name}` {problem}")
        self.field = field_name


class CapacityError(InputError):
    """A decode or a pool needs more KV cache slots than the cache holds."""


def is_int(value) -> bool:
    """An int that is not a bool (True would pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


# What the wire between the two processes carries at most (protocol.limits takes them from here): a setting
# beyond them is refused when it is made, not after both processes have started.
MAX_POOL_DEPTH = 64  # levels of a pool: each costs the drafter one pass per round
MAX_POOL_CANDIDATES = 1 << 16  # candidates of a full pool: topk + (depth - 1) * expand * topk
MAX_CONTEXT = 1 << 20  # KV cache slots (prompt and output tokens) a target may have and a Hello may ask for


def check_at_most(name: str, value: int, limit: int, what: str) -> int:
    """`value` if it is at most `limit`, else ConfigError naming `name` and what the limit is."""
    if value > limit:
        raise ConfigError(name, f"must be at most {limit} ({what}), got {value}")
    return value


def check_int(name: str, value, low: int) -> int:
    """`value` if it is an integer >= low, else ConfigError naming `name`."""
    if not is_int(value) or value < low:
        kind = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
        raise ConfigError(name, f"must be {kind}, got {value!r}")
    return value


AUTO = "auto"  # the budget chosen each round (pipeline.budget)
BUDGET_PRIORS = ("session", "decode")  # where auto's prior comes from


def check_budget(name: str, value) -> int | str:
    """A tree budget: a positive integer, or "auto"."""
    if value == AUTO:
        return value
    if not is_int(value) or value < 1:
        raise ConfigError(name, f"must be a positive integer or auto, got {value!r}")
    return check_at_most(name, value, MAX_POOL_CANDIDATES, "a tree holds at most a pool's candidates")


def check_temperature(name: str, value) -> float:
    """A sampling temperature: a finite number >= 0 (0 is greedy)."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value >= 0):
        raise ConfigError(name, f"must be a finite number >= 0, got {value!r}")
    return float(value)


def check_seconds(name: str, value) -> float:
    """A timeout: a finite number of seconds > 0."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ConfigError(name, f"must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def check_stop_strings(name: str, value) -> tuple[str, ...]:
    """Stop strings: one string or a list of them, each non-empty -> a tuple."""
    items = (value,) if isinstance(value, str) else value
    if not (isinstance(items, (list, tuple)) and all(isinstance(s, str) and s for s in items)):
        raise ConfigError(name, f"must be a non-empty string or a list of them, got {value!r}")
    return tuple(items)


def check_token_ids(name: str, value) -> tuple[int, ...]:
    """Token ids: one id or a list of them, each a non-negative integer -> a tuple. Whether they are in the
    vocabulary is checked where the vocabulary is known."""
    items = (value,) if is_int(value) else value
    if not (isinstance(items, (list, tuple)) and all(is_int(t) and t >= 0 for t in items)):
        raise ConfigError(name, f"must be a non-negative token id or a list of them, got {value!r}")
    return tuple(int(t) for t in items)


def split_list(text: str) -> list[str]:
    """The non-empty items of a comma-separated value (option values, and the prompt categories that
    evaluation.prompts selects, below the programs)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def pool_size(topk: int, depth: int, expand: int) -> int:
    """Candidates in a full pool: topk at depth 1, expand * topk at each deeper level (exact for any ints)."""
    return topk + (depth - 1) * expand * topk


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """The shape of the drafter's candidate pool (DESIGN.md section 2): `topk` children proposed per expanded
    node, candidates down to level `depth`, `expand` nodes expanded per level."""

    topk: int = 10
    depth: int = 8
    expand: int = 10

    def __post_init__(self) -> None:
        for name in ("topk", "depth", "expand"):
            check_int(name, getattr(self, name), 1)
        if self.expand > self.topk:
            raise ConfigError("expand", f"({self.expand}) must not exceed `topk` ({self.topk})")
        check_at_most("depth", self.depth, MAX_POOL_DEPTH, "the pool levels the protocol carries")
        if self.size > MAX_POOL_CANDIDATES:
            raise ConfigError("topk", f"{self.topk}, `depth` {self.depth} and `expand` {self.expand} make a pool of "
                                      f"{self.size} candidates; the protocol carries at most {MAX_POOL_CANDIDATES}")

    @property
    def size(self) -> int:
        """Candidates in a full pool (pool_size)."""
        return pool_size(self.topk, self.depth, self.expand)

    @property
    def n_expanded(self) -> int:
        """Expanded candidates of a full pool: the drafter's scratch KV slots per round."""
        return (self.depth - 1) * self.expand


@dataclass(frozen=True, slots=True)
class Filters:
    """The target law's sampling filters (top-k, top-p, min-p); pipeline.sampling applies them."""

    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off
    min_p: float = 0.0  # 0: off

    def __post_init__(self) -> None:
        check_int("top_k", self.top_k, 0)
        for name, low, high in (("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and low <= value <= high) or (name == "top_p" and value == 0):
                bounds = "0 < top_p <= 1" if name == "top_p" else "0 <= min_p <= 1"
                raise ConfigError(name, f"must be a number with {bounds}, got {value!r}")

    @property
    def active(self) -> bool:
        return self.top_k > 0 or self.top_p < 1 or self.min_p > 0
