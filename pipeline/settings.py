"""A decode's settings (DecodeConfig), checked against the rule table, and the seed of its sampling stream."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pipeline.config import (AUTO, BUDGET_PRIORS, MAX_CONTEXT, MAX_POOL_CANDIDATES, MAX_POOL_DEPTH, CapacityError,
                             ConfigError, Filters, check_at_most, check_budget, check_int,
                             check_stop_strings, check_temperature, check_token_ids)
from pipeline.rules import RULES


DRAFTING = ("ahead", "lend_cores", "cut_pools", "cut_weigh", "drafter_window", "lookup")  # how the drafter works


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """One decode: which rule, at what temperature and budget, for how long, with which seed, its sampling
    filters and stops (`ignore_eos`: the target's end-of-sequence tokens do not end it), and how the drafter
    works with the target (DRAFTING). What each field means on a command line, programs.rule_options says."""

    decoder: str = "draft"
    temperature: float = 0.0
    budget: int | str = 8
    max_new_tokens: int = 256
    seed: int = 0
    budget_max: int = 59
    budget_prior: str = "session"
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    lend_cores: bool = False
    cut_pools: bool = False
    cut_weigh: bool = False
    ahead: bool = False
    drafter_window: int = 0
    lookup: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.decoder, str) or self.decoder not in RULES:  # a dict or params object: unhashable
            raise ConfigError("decoder", f"must be one of {', '.join(RULES)}, got {self.decoder!r:.80}")
        check_temperature("temperature", self.temperature)
        if self.budget != AUTO:
            check_budget("budget", self.budget)
        check_int("max_new_tokens", self.max_new_tokens, 1)
        check_at_most("max_new_tokens", self.max_new_tokens, MAX_CONTEXT, "the KV slots a context may have")
        check_int("seed", self.seed, 0)
        check_int("budget_max", self.budget_max, 1)
        check_at_most("budget_max", self.budget_max, MAX_POOL_CANDIDATES, "a tree holds at most a pool's candidates")
        check_int("drafter_window", self.drafter_window, 0)
        check_int("lookup", self.lookup, 0)
        check_at_most("lookup", self.lookup, MAX_POOL_DEPTH, "the pool levels the protocol carries")
        if self.budget_prior not in BUDGET_PRIORS:
            raise ConfigError("budget_prior", f"must be one of {', '.join(BUDGET_PRIORS)}, got {self.budget_prior!r}")
        self.filters  # checks top_k, top_p and min_p
        object.__setattr__(self, "stop", check_stop_strings("stop", self.stop))
        object.__setattr__(self, "stop_token_ids", check_token_ids("stop_token_ids", self.stop_token_ids))
        for name in ("ignore_eos", "ahead", "lend_cores", "cut_pools", "cut_weigh"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be true or false, got {getattr(self, name)!r}")
        if self.cut_weigh and not self.cut_pools:
            raise ConfigError("cut_weigh", "says how pools are cut: it needs cut_pools")

    @property
    def filters(self) -> Filters:
        """The target law's sampling filters (pipeline.sampling applies them)."""
        return Filters(self.top_k, self.top_p, self.min_p)

    @property
    def drafting(self) -> tuple:
        """How the drafter works with the target: the options that change what rounds cost and accept."""
        return tuple(getattr(self, name) for name in DRAFTING)

    @property
    def auto(self) -> bool:
        """Budget auto is on: budget "auto" with a rule that has a drafter (`ar` has no tree to size)."""
        return self.budget == AUTO and RULES[self.decoder].select is not None

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
