"""A bounded drafting context (DecodeConfig.drafter_window): the drafter starts on the context's last tokens
and is told every token after them; outputs are unchanged, and budget auto prices the shorter start."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from drafter_proc.drafter import Drafter
from models.hf import HFRunner
from pipeline.budget import AutoPolicy, PassCosts
from pipeline.feed import DrafterFeed
from pipeline.config import ConfigError, PoolConfig
from pipeline.decode import decode
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig
from target_proc.target import Target
from tests.local_drafter import LocalDrafter
from tests.models.conftest import VOCAB, tiny_llama

POOL = PoolConfig(topk=4, depth=3, expand=2)
COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045}, prefill=0.001, prefill_shared=0.003)
DRAFTED = [name for name, rule in RULES.items() if rule.select is not None]
PROMPT = np.random.default_rng(0).integers(1, 40, 30).tolist()


class Told:
    """A DrafterClient around another that keeps what it was told: the start's tokens, then each commit's."""

    def __init__(self, inner) -> None:
        self.inner, self.started, self.committed = inner, [], []

    def start(self, prompt) -> None:
        self.started.append([int(t) for t in prompt])
        self.inner.start(prompt)

    def commit(self, tokens) -> None:
        self.committed += [int(t) for t in tokens]
        self.inner.commit(tokens)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def told_from(full: list[int], seen: list[int]) -> int:
    """Where `seen` (the tokens the drafter was told, in order) lies in the whole context `full`."""
    starts = [s for s in range(len(full) - len(seen) + 1) if full[s:s + len(seen)] == seen]
    assert starts, "the drafter was not told a contiguous stretch of the context"
    return starts[0]


@pytest.mark.parametrize("decoder", DRAFTED)
@pytest.mark.parametrize("budget", [4, "auto"])
def test_a_window_keeps_greedy_outputs_and_the_drafter_sees_the_contexts_last_tokens(mock_pair, decoder, budget):
    want = decode(mock_pair(48, 11, 0.6, POOL).target, None, PROMPT, DecodeConfig("ar", 0.0, 1, 40), frozenset(),
                  None)
    pair = mock_pair(48, 11, 0.6, POOL)
    drafter = Told(pair.drafter)
    config = DecodeConfig(decoder, 0.0, budget, 40, budget_max=4, drafter_window=8)
    got = decode(pair.target, drafter, PROMPT, config, frozenset(), None, costs=copy.deepcopy(COSTS))
    assert got.tokens == want.tokens
    (started,) = drafter.started
    assert len(started) == 8
    start = told_from(PROMPT + got.tokens, started + drafter.committed)
    if budget == 4:  # started before the prefill: on the prompt's last 8 tokens
        assert start == len(PROMPT) - 8
    else:  # budget auto may start the drafter after plain rounds: on the last 8 tokens of that context
        assert start >= len(PROMPT) - 8


def test_without_a_window_the_drafter_starts_on_the_whole_prompt(mock_pair):
    pair = mock_pair(48, 11, 0.6, POOL)
    drafter = Told(pair.drafter)
    got = decode(pair.target, drafter, PROMPT, DecodeConfig("root-draw", 0.0, 4, 20), frozenset(), None)
    assert drafter.started == [PROMPT]
    assert told_from(PROMPT + got.tokens, drafter.started[0] + drafter.committed) == 0


def test_a_window_longer_than_the_context_is_the_whole_context(mock_pair):
    pair = mock_pair(48, 11, 0.6, POOL)
    drafter = Told(pair.drafter)
    decode(pair.target, drafter, PROMPT, DecodeConfig("root-draw", 0.0, 4, 20, drafter_window=500), frozenset(), None)
    assert drafter.started == [PROMPT]


def test_a_windowed_drafter_needs_only_the_window_in_its_cache():
    """A drafter with 64 KV slots serves a 90-token prompt when it starts on the last 16 tokens."""
    model, prompt = tiny_llama(), np.random.default_rng(1).integers(1, VOCAB, 90).tolist()
    config = DecodeConfig("root-draw", 0.0, 4, 12, drafter_window=16)
    want = decode(Target(HFRunner(model, 256)), None, prompt, DecodeConfig("ar", 0.0, 1, 12), frozenset(), None)
    got = decode(Target(HFRunner(model, 256)), LocalDrafter(Drafter(HFRunner(model, 64), POOL)),
                 prompt, config, frozenset(), None)
    assert got.tokens == want.tokens


def test_budget_auto_prices_the_drafters_start_by_the_window():
    """Before the prefill, and in a decode that started plain, the start costs the tokens the drafter is given."""
    feed, whole = DrafterFeed(None, 16), DrafterFeed(None)
    assert (feed.start_tokens(90), feed.start_tokens(10), whole.start_tokens(90)) == (16, 10, 90)
    priced = []

    class Pricing:  # budget auto's choice, reduced to noting what a start is priced at
        costs = COSTS

        def choose(self, switch: float, left: int, start: float) -> int:
            priced.append(start)
            return 0

    policy = AutoPolicy(copy.deepcopy(COSTS), 4, None)
    policy.auto = Pricing()
    for f in (feed, whole):
        policy.first(f, 1000, 64)
        policy.next(f, 1000, 64)  # the drafter not started yet: a late start
    assert priced == pytest.approx([COSTS.start(16), COSTS.start(16, late=True),
                                    COSTS.start(1000), COSTS.start(1000, late=True)])
    assert COSTS.start(16) < COSTS.start(1000)


@pytest.mark.parametrize("bad", [-1, 2.5, "8", True])
def test_a_bad_window_is_named(bad):
    with pytest.raises(ConfigError, match="drafter_window"):
        DecodeConfig(drafter_window=bad)
