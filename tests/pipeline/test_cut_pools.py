"""Cut pools (DecodeConfig.cut_pools): a pool asked for early is the whole pool's first levels, the decoders
with a root pass ask for it once that pass is done, and outputs follow the target's law whatever the depth
each round's pool reached."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from models.mock import EOS
from pipeline.ahead import Drafted
from pipeline.budget import PassCosts
from pipeline.config import PoolConfig
from pipeline.cut import NOW, PRIOR_ACCEPT, PRIOR_ROUNDS, WEIGH, LevelValues, reached
from pipeline.decode import decode
from pipeline.pool import ROOT, Pool, grow_pool
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig
from target_proc.client import shape_problem
from tests.pipeline.test_sampling_law import HORIZON, N_DECODES, NOISE, POOL, PROMPT, SEED, VOCAB, exact_law, \
    goodness_of_fit

CONFIG = PoolConfig(topk=4, depth=4, expand=2)
COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045})  # for budget auto
DRAFTED = [name for name, rule in RULES.items() if rule.select is not None]


class CuttingDrafter:
    """A drafter in another process as a target with cut_pools meets it: its pool is never there before the
    target asks, and asked early it sends the first levels of its pool, as many as a seeded draw says (a
    draw of its own, as a drafter's timing is independent of the target's sampling)."""

    def __init__(self, inner, seed: int) -> None:
        self.inner, self.rng = inner, np.random.default_rng(seed)
        self.told: list[int] = []  # per waiting() call, how it asked for a cut pool (0: it did not)
        self.cut = False

    def start(self, prompt) -> None:
        self.inner.start(prompt)

    def commit(self, tokens) -> None:
        self.inner.commit(tokens)

    def ahead(self, tokens) -> None:
        self.inner.ahead(tokens)

    def waiting(self, cut: int = 0) -> None:
        self.told.append(cut)
        self.cut = cut

    def has_pool(self) -> bool:
        return False

    def pool(self) -> Drafted:
        got = self.inner.pool()
        if self.cut:
            depth = int(self.rng.integers(1, int(got.pool.depth.max()) + 1))
            got = Drafted(got.pool.first_levels(depth), got.seconds, got.ahead, got.ahead_seconds)
        self.cut = False
        return got

    def end(self) -> None:
        self.inner.end()


@pytest.mark.parametrize("levels", range(1, CONFIG.depth + 1))
def test_a_cut_pool_is_the_whole_pools_first_levels(levels):
    gen = torch.Generator().manual_seed(3)
    rows = [torch.log_softmax(torch.randn(n, 40, generator=gen), -1) for n in (1,) + (CONFIG.expand,) * 3]
    expand = lambda nodes, tokens, parents, depth: rows[depth]  # noqa: E731
    asked = []
    cut = grow_pool(rows[0][0], expand, CONFIG, stop=lambda: asked.append(1) or len(asked) >= levels)
    whole = grow_pool(rows[0][0], expand, CONFIG)
    want = whole.first_levels(levels)
    assert int(cut.depth.max()) == levels and len(cut) == len(want)
    for name in ("token", "parent", "logp", "expanded", "cum"):
        np.testing.assert_array_equal(getattr(cut, name), getattr(want, name))
    assert shape_problem(cut, CONFIG, cut=True) is None
    assert (shape_problem(cut, CONFIG) is None) == (levels == CONFIG.depth)  # unasked, only a whole pool passes


@pytest.mark.parametrize("weigh", [False, True], ids=["now", "weigh"])
@pytest.mark.parametrize("decoder", DRAFTED)
@pytest.mark.parametrize("budget", [1, 6, "auto"])
def test_cut_pools_keep_greedy_outputs_and_are_asked_for_after_the_root_pass(mock_pair, decoder, budget, weigh):
    prompt = [3, 1, 4, 1, 5]
    want = decode(mock_pair(48, 11, 0.6, CONFIG).target, None, prompt, DecodeConfig("ar", 0.0, 1, 40),
                  frozenset(), None)
    pair = mock_pair(48, 11, 0.6, CONFIG)
    drafter = CuttingDrafter(pair.drafter, 0)
    config = DecodeConfig(decoder, 0.0, budget, 40, budget_max=4, cut_pools=True, cut_weigh=weigh)
    got = decode(pair.target, drafter, prompt, config, frozenset(), None, costs=copy.deepcopy(COSTS))
    assert got.tokens == want.tokens
    drafted = [r for r in got.rounds if r.budget > 0]
    if RULES[decoder].root_pass:  # asked for each pool once the root pass is done; depths as sent
        assert drafter.told == [WEIGH if weigh else NOW] * len(drafted)
        assert {r.pool_depth for r in drafted} > {1} and max(r.pool_depth for r in drafted) <= CONFIG.depth
    else:  # nothing to do before the pool: it is waited for whole
        assert drafter.told == [] and {r.pool_depth for r in drafted} == {CONFIG.depth}
    assert all(r.pool_depth == 0 for r in got.rounds if r.budget == 0)


CUT_CASES = [(d, b) for d in DRAFTED if RULES[d].root_pass for b in (4, "auto")]
CUT_ALPHA = 1e-3 / len(CUT_CASES)  # family-wise, as the law tests of whole pools


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CUT_CASES)), ids=[f"{d}-B{b}" for d, b in CUT_CASES])
def test_outputs_from_cut_pools_follow_the_target_law(case, mock_pair, softmax):
    decoder, budget = CUT_CASES[case]
    pair = mock_pair(VOCAB, SEED, NOISE, POOL)
    law = exact_law(pair.target_model, PROMPT, HORIZON, softmax)
    drafter = CuttingDrafter(pair.drafter, 100 + case)
    config = DecodeConfig(decoder, 1.0, budget, HORIZON, seed=case, budget_max=4, cut_pools=True)
    outcomes, depths = [], set()
    for i in range(N_DECODES):
        result = decode(pair.target, drafter, PROMPT, config, frozenset({EOS}),
                        torch.Generator().manual_seed(2_000_003 * case + i), costs=copy.deepcopy(COSTS))
        outcomes.append(tuple(result.tokens))
        depths.update(r.pool_depth for r in result.rounds if r.budget > 0)
    assert depths == set(range(1, POOL.depth + 1))  # every cut was met
    assert goodness_of_fit(outcomes, law) >= CUT_ALPHA


def chain_pool(tokens: list[list[int]]) -> Pool:
    """A pool of one candidate list per level, every level's candidates the children of the first one before."""
    token, parent, first = [], [], ROOT
    for level in tokens:
        start = len(token)
        token += level
        parent += [first] * len(level)
        first = start
    n = len(token)
    return Pool.from_edges(np.array(token), np.array(parent), np.full(n, -1.0, np.float32),
                           np.isin(np.arange(n), [i for i in range(n) if i in parent]))


@pytest.mark.parametrize("tokens, levels", [([5, 9], 1), ([5, 9, 2, 8], 3), ([5, 9, 2, 7, 1], 3), ([6, 9, 2], 1),
                                            ([5, 8, 2], 2), ([7, 9], 0), ([5], 0), ([5, 7], 1)])
def test_reached_counts_the_levels_a_commit_ran_through_its_last_token_left_out(tokens, levels):
    pool = chain_pool([[5, 6], [9, 8], [2, 3]])  # 8's children: none; 9's: 2 and 3
    assert reached(pool, tokens) == levels


def test_level_values_start_at_the_prior_and_learn_each_levels_chance_from_the_rounds_that_had_it():
    values = LevelValues()
    np.testing.assert_allclose(values.gains(3), PRIOR_ACCEPT ** np.arange(1, 4))
    for _ in range(30):  # pools of 2 levels: the first always run through, the second in half the rounds
        values.observe(2, 1)
        values.observe(2, 2)
    a1, a2 = 1.0, 0.5
    want = [(PRIOR_ACCEPT * PRIOR_ROUNDS + 32 * a1) / (PRIOR_ROUNDS + 32),
            (PRIOR_ACCEPT * PRIOR_ROUNDS + 32 * a2) / (PRIOR_ROUNDS + 32), PRIOR_ACCEPT]  # 32 rounds kept
    np.testing.assert_allclose(values.gains(3), np.cumprod(want))
    values = LevelValues()  # a round that did not run through level 1 could not run through level 2
    for seen in [(2, 1), (2, 2)] * 5 + [(2, 0)]:
        values.observe(*seen)
    prior = PRIOR_ACCEPT * PRIOR_ROUNDS
    a1, a2 = (prior + 10) / (PRIOR_ROUNDS + 11), (prior + 5) / (PRIOR_ROUNDS + 10)
    np.testing.assert_allclose(values.gains(2), [a1, a1 * a2])


def test_a_level_is_worth_its_wait_exactly_when_tokens_per_second_grow():
    values = LevelValues()
    for _ in range(32):
        values.observe(3, 3)
    g = values.gains(3)
    for levels in (1, 2):
        tau, gain, round_seconds = 1 + g[:levels].sum(), g[levels], 0.2
        even = gain * round_seconds / tau  # the wait at which both rates are equal
        for wait in (0.5 * even, 0.99 * even, 1.01 * even, 2 * even):
            faster = (tau + gain) / (round_seconds + wait) > tau / round_seconds
            assert values.worth(levels, wait, round_seconds) == faster
    assert values.worth(1, 0.0, 0.2)


def test_weighed_cuts_need_cut_pools():
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="cut_weigh"):
        DecodeConfig("root-draw", cut_weigh=True)
    assert DecodeConfig("root-draw", cut_pools=True, cut_weigh=True).cut_weigh
