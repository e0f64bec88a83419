"""Configuration of pools and decodes: each default, and each check of a value, is written here once.

Checks raise ConfigError naming the field (`budget`), never a command-line flag: the programs that take
these values from a command line map field names to their own flags.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field


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
    return value


def parse_budget(text: str) -> int | str:
    """A budget as a command line spells it: an integer or "auto" (checked by check_budget)."""
    text = text.strip()
    return AUTO if text == AUTO else int(text) if text.lstrip("-").isdigit() else text


def check_temperature(name: str, value) -> float:
    """A sampling temperature: a finite number >= 0 (0 is greedy)."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value >= 0):
        raise ConfigError(name, f"must be a finite number >= 0, got {value!r}")
    return float(value)


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
            check_int(name, getattr(self, name), 1)
        if self.expand > self.topk:
            raise ConfigError("expand", f"({self.expand}) must not exceed `topk` ({self.topk})")

    @property
    def size(self) -> int:
        """Candidates in a full pool: topk at depth 1, expand * topk at each deeper level."""
        return self.topk + (self.depth - 1) * self.expand * self.topk

    @property
    def n_expanded(self) -> int:
        """Expanded candidates of a full pool: the drafter's scratch KV slots per round."""
        return (self.depth - 1) * self.expand


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """Decoding

    One decode: which rule, at what temperature and budget, for how long, with which seed.
    """

    decoder: str = field(default="draft", metadata={"help": "the selection rule"})
    temperature: float = field(default=0.0, metadata={"help": "0 is greedy", "metavar": "T"})
    budget: int | str = field(default=8, metadata={
        "help": "tree budget B: non-root nodes verified per round; auto: chosen each round from measured "
                "acceptance and pass costs, up to --budget-max (0, plain decoding, included)",
        "metavar": "B|auto", "parse": "budget"})
    max_new_tokens: int = field(default=256, metadata={"help": "the output holds at most this many new tokens"})
    seed: int = field(default=0, metadata={"help": "sampling seed", "metavar": "S"})
    budget_max: int = field(default=59, metadata={"help": "the largest tree budget auto may choose",
                                                  "metavar": "B"})
    budget_prior: str = field(default="session", metadata={
        "help": "where auto's acceptance prior comes from. session: the optimistic prior and the earlier decodes "
                "of the same decoder, T and cap in this process; decode: the optimistic prior alone, so a "
                "decode's choices do not depend on the decodes before it", "metavar": "session|decode"})
    top_k: int = field(default=0, metadata={
        "help": "at T > 0, sample among the K most probable tokens only (0: all)", "metavar": "K"})
    top_p: float = field(default=1.0, metadata={
        "help": "at T > 0, sample among the most probable tokens whose mass reaches P (1: all)", "metavar": "P"})
    min_p: float = field(default=0.0, metadata={
        "help": "at T > 0, sample among tokens at least P times as probable as the most probable (0: all)",
        "metavar": "P"})

    def __post_init__(self) -> None:
        from pipeline.rules import RULES  # the table imports the selection rules, which import this module

        if self.decoder not in RULES:
            raise ConfigError("decoder", f"must be one of {', '.join(RULES)}, got {self.decoder!r}")
        check_temperature("temperature", self.temperature)
        if self.budget != AUTO:
            check_budget("budget", self.budget)
        check_int("max_new_tokens", self.max_new_tokens, 1)
        check_int("seed", self.seed, 0)
        check_int("budget_max", self.budget_max, 1)
        if self.budget_prior not in BUDGET_PRIORS:
            raise ConfigError("budget_prior", f"must be one of {', '.join(BUDGET_PRIORS)}, got {self.budget_prior!r}")
        self.filters  # checks top_k, top_p and min_p

    @property
    def filters(self):
        """The target law's sampling filters (pipeline.sampling.Filters)."""
        from pipeline.sampling import Filters  # it imports this module

        return Filters(self.top_k, self.top_p, self.min_p)

    @property
    def largest_tree(self) -> int:
        return self.budget_max if self.budget == AUTO else self.budget

    def kv_slots(self, prompt_tokens: int) -> int:
        """Target KV slots a decode of a `prompt_tokens`-token prompt may need: the prompt, the output and
        one round's root and tree (the output may pass the limit inside its last round by at most that)."""
        return prompt_tokens + self.max_new_tokens + self.largest_tree + 1

    def check_fits(self, prompt_tokens: int, capacity: int) -> None:
        """CapacityError when such a decode may not fit a cache of `capacity` slots."""
        need = self.kv_slots(prompt_tokens)
        if need > capacity:
            budget = f"`budget` {self.budget}" if self.budget != AUTO else f"`budget_max` {self.budget_max}"
            raise CapacityError(f"a prompt of {prompt_tokens} tokens with `max_new_tokens` {self.max_new_tokens} "
                                f"and {budget} needs {need} KV slots; the target's cache holds {capacity} "
                                f"(raise `max_context`)")


def stream_seed(seed: int, prompt: str | int, decoder: str) -> int:
    """Seed of the verifier's generator for one (run seed, prompt, decoder), stable across processes."""
    digest = hashlib.blake2b(f"{seed}/{prompt}/{decoder}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
