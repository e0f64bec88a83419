"""A decode's settings (DecodeConfig), checked against the rule table, and the seed of its sampling stream."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from pipeline.config import (AUTO, BUDGET_PRIORS, CapacityError, ConfigError, Filters, check_budget, check_int,
                             check_stop_strings, check_temperature, check_token_ids)
from pipeline.rules import RULES


DRAFTING = ("ahead", "lend_cores", "cut_pools", "cut_weigh", "drafter_window")  # how the drafter works


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
    stop: tuple[str, ...] = field(default=(), metadata={
        "help": "end the output at the first of these strings in its text, which the text then stops just "
                "before (repeatable)", "metavar": "TEXT"})
    stop_token_ids: tuple[int, ...] = field(default=(), metadata={
        "help": "end the output at the first of these token ids, as at an end-of-sequence token: the id is the "
                "output's last, its text left out (comma-separated)", "metavar": "ID,ID", "parse": "token_ids"})
    lend_cores: bool = field(default=False, metadata={
        "help": "on the CPU, while the target waits for a pool it tells the drafter, and a drafter sharing its "
                "CPU takes every core until it sends the pool"})
    cut_pools: bool = field(default=False, metadata={
        "help": "decoders with a root pass (all but draft and ar) ask for the pool as soon as the root pass is "
                "done, and the drafter sends the levels it has grown once the one in progress ends: the target "
                "does not wait for whole pools, and shallower pools may accept fewer tokens (outputs follow the "
                "same law; records give each round's pool depth)"})
    cut_weigh: bool = field(default=False, metadata={
        "help": "with --cut-pools: the drafter grows a further level the target waits for while it brings more "
                "tokens than its wait costs, learnt from recent rounds (for a drafter on a device of its own: "
                "on a shared CPU its levels also slow the target)"})
    ahead: bool = field(default=False, metadata={
        "help": "draft ahead: while the target verifies a round, the drafter grows the next round's pool from "
                "where the round most probably ends, and the next round takes it when the round ended there "
                "(outputs are unchanged; records say how often it was right)"})
    drafter_window: int = field(default=0, metadata={
        "help": "the drafter starts on the context's last N tokens only (0: all of it): on long prompts a "
                "shorter drafter prefill and cheaper drafter passes, for pools that may accept fewer tokens "
                "(outputs follow the same law)", "metavar": "N"})

    def __post_init__(self) -> None:
        if not isinstance(self.decoder, str) or self.decoder not in RULES:  # a dict or params object: unhashable
            raise ConfigError("decoder", f"must be one of {', '.join(RULES)}, got {self.decoder!r:.80}")
        check_temperature("temperature", self.temperature)
        if self.budget != AUTO:
            check_budget("budget", self.budget)
        check_int("max_new_tokens", self.max_new_tokens, 1)
        check_int("seed", self.seed, 0)
        check_int("budget_max", self.budget_max, 1)
        check_int("drafter_window", self.drafter_window, 0)
        if self.budget_prior not in BUDGET_PRIORS:
            raise ConfigError("budget_prior", f"must be one of {', '.join(BUDGET_PRIORS)}, got {self.budget_prior!r}")
        self.filters  # checks top_k, top_p and min_p
        object.__setattr__(self, "stop", check_stop_strings("stop", self.stop))
        object.__setattr__(self, "stop_token_ids", check_token_ids("stop_token_ids", self.stop_token_ids))
        for name in ("ahead", "lend_cores", "cut_pools", "cut_weigh"):
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
