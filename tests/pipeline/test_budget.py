"""Budget auto: the choice maximises expected tokens per second from estimates and costs, estimates follow
what rounds show, and a decode at any chosen size keeps the target's output."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.mock import EOS
from pipeline.budget import (COST_RATE, DECAY, EXPERIENCE, FORGET, LINGER, MARGIN, PRIOR_WEIGHT, RECALL, ROOT_RATE,
                             RUN_RATE, SPIKE, START_ROUNDS, TRY_SHARE, AutoBudget, AutoPolicy, Experience,
                             MeasuredPasses, PassCosts, SessionBudgets, candidate_sizes, costs_for, prior,
                             ranks_on_path)
from pipeline.config import PoolConfig
import pipeline.decode as decode_module
from pipeline.decode import decode
from pipeline.result import Phases
from pipeline.rules import RULES, SPECULATIVE
from pipeline.settings import DecodeConfig

MS = 1e-3


def costs(plain=40, front=45, tree=None) -> PassCosts:
    tree = tree or {1: 42, 2: 43, 4: 45, 8: 60, 16: 90, 32: 150, 59: 260}
    return PassCosts(plain * MS, front * MS, {b: t * MS for b, t in tree.items()})


def test_candidate_sizes_double_up_to_the_cap():
    assert candidate_sizes(59) == (0, 1, 2, 4, 8, 16, 32, 59)
    assert candidate_sizes(8) == (0, 1, 2, 4, 8) and candidate_sizes(1) == (0, 1)


def test_the_prior_makes_a_decode_start_speculating():
    assert AutoBudget(costs(), 59).choose() > 0


@pytest.mark.parametrize("accept, want", [
    # Everything accepted: 32 nodes give 33 tokens in 195 ms (169/s), 59 give 60 in 305 ms (197/s).
    ([1.0] * 59, 59),
    # Nothing accepted past the drawn token: a speculative round gives 2 tokens for 87 ms or more, two plain
    # rounds give them in 80 ms.
    ([1.0] + [0.0] * 58, 0),
    # Half of each next rank: 1 + sum tokens; 4 nodes give 1 + 1.875 in 90 ms: best of all.
    ([0.5 ** k for k in range(59)], 4),
])
def test_the_choice_maximises_expected_tokens_per_second(accept, want):
    auto = AutoBudget(costs(), 59)
    auto.prior[:] = accept  # no round seen yet: the estimate is the prior
    rates = {b: (1.0 + auto.accept[:b].sum()) / auto.costs.round(b) for b in auto.sizes}  # tokens(b) / cost(b)
    assert auto.choose() == want == max(rates, key=rates.get)


def test_a_slow_drafter_switches_speculation_off():
    # 100 ms before every tree pass: 8 nodes at 0.3 each give 3.4 tokens in 160 ms (21/s); plain rounds
    # give 25/s. With acceptance 0.9 the same round gives 8.2 tokens (51/s) and speculation stays on.
    auto = AutoBudget(costs(plain=40, front=100), 8)
    auto.prior[:] = 0.3
    assert auto.choose() == 0
    auto.prior[:] = 0.9
    assert auto.choose() == 8


def test_observed_ranks_move_toward_the_round_and_fade_back_to_the_anchor():
    auto = AutoBudget(costs(), 8)
    auto.prior[:] = 0.5
    auto.observe(np.array([True, False]), 2, front=0.05, tree=0.043)
    # The anchor is the prior beside what the setting's rounds showed, each worth a round (up to EXPERIENCE),
    # the prior PRIOR_WEIGHT (two): after one round each verified rank's anchor is a third of the way from
    # the prior to what it showed; the estimate weighs the anchor as two rounds beside the round itself.
    # Ranks the round did not verify keep the prior.
    assert PRIOR_WEIGHT == 2
    assert auto.anchor[:3].tolist() == pytest.approx([2 / 3, 1 / 3, 0.5])
    assert auto.accept[:3].tolist() == pytest.approx([7 / 9, 2 / 9, 0.5])
    for _ in range(10):  # speculative rounds that verify nothing else age the round by DECAY each
        auto.observe(np.zeros(0, bool), 1, front=0.045, tree=0.042)
    weight = (1 - DECAY) ** 10
    assert auto.accept[0] == pytest.approx((2 * 2 / 3 + weight) / (2 + weight))
    for _ in range(10):  # plain rounds fade it back to the anchor, which keeps what the round showed
        auto.observe(np.zeros(0, bool), 0, plain=0.04)  # (fading by LINGER only)
    shown = 1.0
    for _ in range(10):  # each by FORGET times the share of EXPERIENCE rounds the anchor rests on
        weight *= 1 - FORGET * shown / EXPERIENCE
        shown *= 1 - LINGER
    anchor = (2 * 0.5 + shown) / (2 + shown)
    assert auto.anchor[0] == pytest.approx(anchor) and auto.anchor[0] > 0.65
    assert auto.accept[0] == pytest.approx((2 * anchor + weight) / (2 + weight))
    # Anchored on more rounds, the estimate returns to it faster: FORGET a plain round from EXPERIENCE rounds
    founded = AutoBudget(costs(), 8)
    for _ in range(int(EXPERIENCE)):
        founded.observe(np.array([True, False]), 2, front=0.045, tree=0.043)
    assert founded.founded == 1.0 and auto.founded < 0.2
    before = founded.seen[0]
    founded.observe(np.zeros(0, bool), 0, plain=0.04)
    assert founded.seen[0] == pytest.approx(before * (1 - FORGET))
    # front: 45 ms the round of 50 moved up, ten of 45 moved back, ten plain rounds relaxed toward 45
    assert auto.costs.front == pytest.approx(0.045 + 0.2 * 0.005 * 0.8 ** 10 * (1 - FORGET) ** 10)
    assert auto.costs.tree_pass(2) == pytest.approx(0.043) and auto.costs.plain == pytest.approx(0.04)


def test_a_cost_spike_when_speculation_went_off_does_not_stay_frozen():
    """Speculative costs are timed only by speculative rounds. One slow round (another process took the
    cores) moves a cost by a fraction only: its timing counts as at most SPIKE times the estimate. Slow rounds
    that last (load, a long context) push the costs up round by round and switch speculation off; plain
    rounds move them back toward the median of recent timings, so that speculation comes back once the
    acceptance that paid before still would."""
    auto = AutoBudget(costs(plain=40, front=45), 8)
    auto.prior[:] = 0.5  # 8 nodes at 0.5: 5 tokens in 105 ms (48/s) against plain rounds' 25/s
    half = np.full(8, True) & (np.arange(8) % 2 == 0)
    for _ in range(20):
        auto.observe(half, 8, front=0.045, tree=0.06)
    auto.observe(half, 8, front=3.0, tree=6.0)  # seconds where a round takes 105 ms
    assert auto.costs.front == pytest.approx(0.045 * (1 + COST_RATE * (SPIKE - 1)))
    assert auto.costs.tree_pass(8) == pytest.approx(0.06 * (1 + COST_RATE * (SPIKE - 1))) and auto.choose() == 8
    for _ in range(15):  # lasting: 300 ms before each tree pass, 5 tokens in 360 ms (14/s)
        auto.observe(half, 8, front=0.3, tree=0.06)
    assert auto.choose() == 0
    rounds_off = plain_rounds_until_speculation(auto, 100)
    assert rounds_off < 16 and auto.costs.front < 0.2


def plain_rounds_until_speculation(auto: AutoBudget, most: int) -> int:
    """Plain rounds of 40 ms that `auto` runs before it speculates again (at most `most`)."""
    rounds = 0
    while auto.choose() == 0 and rounds < most:
        auto.observe(np.zeros(0, bool), 0, plain=0.04)
        rounds += 1
    return rounds


def test_costs_a_long_burst_of_load_made_dear_return_to_the_start_up_timing_in_a_few_hundred_plain_rounds():
    """Slow speculative rounds throughout (another process held the cores) leave the recent timings, and so
    the typical values plain rounds relax to, dear: speculation stays off while they last, and comes back
    as what start-up timed wins back the typical values (LINGER a plain round), not never."""
    auto = AutoBudget(costs(plain=40, front=45), 8)
    auto.prior[:] = 0.5  # 8 nodes at 0.5: 5 tokens in 105 ms (48/s) against plain rounds' 25/s
    half = np.full(8, True) & (np.arange(8) % 2 == 0)
    for _ in range(40):  # every round 450 ms before a tree pass of 600 ms: 5 tokens in a second
        auto.observe(half, 8, front=0.45, tree=0.6)
    assert auto.choose() == 0
    assert 64 < plain_rounds_until_speculation(auto, 1000) < 400


def test_tree_passes_of_every_size_share_one_scale():
    """A slow tree pass of one size makes every size dearer alike: sizes keep the proportions timed at
    start-up, so that no size looks cheap only because the slow moments met the others, and none is left
    untimed for good because they met it."""
    auto = AutoBudget(costs(tree={1: 42, 2: 43, 4: 45, 8: 60}), 8)
    auto.observe(np.zeros(8, bool), 8, front=0.045, tree=0.066)  # 10% slower than timed at start-up
    assert auto.costs.scale == pytest.approx(1 + COST_RATE * 0.1)
    assert [auto.costs.tree_pass(b) / auto.costs.tree[b] for b in (1, 2, 4, 8)] == pytest.approx([1.02] * 4)


def test_a_plain_cost_inflated_by_one_slow_moment_is_brought_back_by_the_root_passes():
    """Plain rounds alone time a plain round, so plain rounds made slow by a moment's load would, once
    speculation is on, keep it on for good. The root pass of a speculative round is the same one-token
    pass: scaled by the ratio timed at start-up, it brings the plain cost back, and speculation that does
    not pay switches off."""
    def speculating_rounds(root: float | None) -> int:
        auto = AutoBudget(costs(plain=200, front=100), 8)  # plain rounds really take 40 ms; 200 was a spike
        auto.costs.solo = 0.8  # a plain pass takes 0.8 of a root pass beside the drafter
        auto.prior[:] = [1.0] + [0.0] * 7  # only the drawn token: 2 tokens in 142 ms (14/s) against 25/s
        rounds = 0
        while auto.choose() > 0 and rounds < 200:
            auto.observe(np.array([True]), 1, front=0.1, tree=0.042, root=root)
            rounds += 1
        return rounds

    assert speculating_rounds(root=None) == 200  # timed by plain rounds alone: trapped
    assert speculating_rounds(root=0.05) < 40  # 0.8 * 50 ms: 40 ms, below the 71 ms a token costs


def test_drafts_tree_passes_bring_down_a_plain_cost_learnt_on_a_longer_context_and_never_raise_it():
    """`draft` has no root pass. Plain rounds of a long prompt taught 50 ms where start-up timed 40, and this
    short prompt's tree passes run at their start-up timing: each brings the plain cost ROOT_RATE of the way
    down to 40 ms, and a decode whose rounds bring 1.2 tokens in 45 ms (26.7/s, not 10% above 25/s) stops
    speculating. A tree pass twice as slow (load) leaves the plain cost alone."""
    auto = AutoBudget(costs(plain=40, front=3), 8)
    auto.costs.plain = 0.05
    auto.prior[:] = [0.2] + [0.0] * 7
    rounds = 0
    while auto.choose() > 0 and rounds < 200:
        auto.observe(np.array([rounds % 5 == 0]), 1, front=0.003, tree=0.042)
        rounds += 1
    assert 10 < rounds < 80 and 0.04 < auto.costs.plain < 0.0415
    slow = AutoBudget(costs(plain=40, front=3), 8)
    slow.costs.plain = 0.05
    slow.observe(np.array([True]), 1, front=0.003, tree=0.084)
    assert slow.costs.plain == 0.05


def test_the_work_between_rounds_counts_in_what_a_round_costs():
    """What the target does outside a round's phases (asking the drafter for the next pool, with features
    for a head) is part of the round's cost: a steady speculative round's front and a plain round's cost."""
    class Steady:  # a DrafterFeed after a speculative round
        previous, missed, told = 8, 0, 10

    policy = AutoPolicy(costs(plain=40, front=45), 8, None)
    times = Phases(root=None, wait=0.005, select=0.001, tree=0.06, commit=0.001)
    policy.observe(np.ones(8, bool), 8, times, Steady(), outside=0.02)
    assert policy.auto.costs.front == pytest.approx(0.045 + COST_RATE * (0.027 - 0.045))
    Steady.previous = 0
    policy.observe(None, 0, Phases(root=0.04, commit=0.001), Steady(), outside=0.009)
    assert policy.auto.costs.plain == pytest.approx(0.04 + COST_RATE * 0.01)
    policy.observe(None, 0, Phases(root=0.04, commit=0.001), Steady(), outside=-0.001)  # clock noise: none
    assert policy.auto.costs.plain == pytest.approx(0.042 + COST_RATE * (0.041 - 0.042))


class VirtualClock:
    """`pipeline.decode`'s clock, moved by the test alone: each reading advances it by `tick`, so every phase
    costs the same small time whatever the host's load, and a slow request adds exactly its seconds."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now


class SlowFeed:
    """The mock pair's drafter, each request taking `seconds` more of the target's time (a head's features
    sent over a slow link) on `clock`."""

    def __init__(self, drafter, seconds: float, clock: VirtualClock) -> None:
        self.drafter, self.seconds, self.clock = drafter, seconds, clock

    def start(self, prompt, *features):
        self.clock.now += self.seconds
        self.drafter.start(prompt, *features)

    def commit(self, tokens, *features):
        self.clock.now += self.seconds
        self.drafter.commit(tokens, *features)

    def __getattr__(self, name):
        return getattr(self.drafter, name)


def test_a_decode_whose_requests_cost_more_than_speculation_gains_turns_plain(mock_pair, greedy, monkeypatch):
    """Passes at a tenth of their 1 ms prior; a request to the drafter that takes 40 ms more makes a
    speculative round dearer than the tokens it brings, which only the time outside the phases shows."""
    pair = mock_pair(64, 4, 0.5, PoolConfig(topk=4, depth=4, expand=2))
    config = DecodeConfig("draft", 0.0, "auto", 48, 0, 8)

    def share_plain(seconds: float) -> float:
        clock = VirtualClock(0.1 * MS)
        monkeypatch.setattr(decode_module, "time", clock)
        c = PassCosts(1 * MS, 1 * MS, {b: 1 * MS for b in candidate_sizes(8) if b})
        result = decode(pair.target, SlowFeed(pair.drafter, seconds, clock), [3, 4, 5], config, frozenset(),
                        None, costs=c)
        assert result.tokens == greedy(pair.target_model, [3, 4, 5], 48)
        return sum(r.budget == 0 for r in result.rounds) / len(result.rounds)

    assert share_plain(0.04) > 0.6
    assert share_plain(0.0) < 0.3


def test_the_start_up_ratio_of_plain_to_root_pass_scales_the_root_passes():
    measured = MeasuredPasses(plain=0.06, overlapped=0.05, tree={1: 0.07}, tree_with_root={1: 0.09}, prefill=0.001,
                              prefill_shared=0.002)
    assert costs_for(True, measured).solo == pytest.approx(1.2)
    assert costs_for(False, measured).solo == 1.0  # `draft` has no root pass to scale
    auto = AutoBudget(costs_for(True, measured), 1)
    auto.observe(np.array([True]), 1, front=0.1, tree=0.07, root=0.1)
    assert auto.costs.plain == pytest.approx(0.06 + ROOT_RATE * (1.2 * 0.1 - 0.06))
    auto.observe(np.zeros(0, bool), 0, plain=0.05, root=0.5)  # a plain round times itself; no root pass
    assert auto.costs.plain == pytest.approx(0.063 + COST_RATE * (0.05 - 0.063))


def test_a_decode_that_stopped_speculating_tries_again():
    # A round that shows nothing accepted, many times: speculation goes off; plain rounds fade what the
    # rounds showed (slowly: the anchor rests on few rounds) until the (optimistic) prior brings a
    # speculative round back.
    auto = AutoBudget(costs(), 59)
    dip = 0
    while b := auto.choose():
        auto.observe(np.zeros(b, bool), b, front=0.045, tree=auto.costs.tree_pass(b))
        dip += 1
    assert dip < 5
    rounds_off = 0
    while auto.choose() == 0:
        auto.observe(np.zeros(0, bool), 0, plain=0.04)
        rounds_off += 1
    assert 16 < rounds_off < 64


def test_a_try_that_loses_keeps_speculation_off_until_plain_rounds_pay_it_back():
    """The estimates call for speculation (an optimistic prior), but the decode's one try (after 20 plain
    rounds, the drafter catching up on them) lost: 2 tokens in 330 ms against plain rounds of 40 ms. No try
    comes before plain rounds have paid the loss back at TRY_SHARE of their time, then one does."""
    auto = AutoBudget(costs(plain=40, front=45), 8)
    auto.prior[:] = 0.9
    for _ in range(20):
        auto.observe(np.zeros(0, bool), 0, plain=0.04)
    credit = 20 * TRY_SHARE * 0.04
    assert auto.balance == pytest.approx(credit) and auto.choose() == 8
    auto.observe(np.arange(8) < 1, 8, tree=0.06, caught_up=(0.27, 20))  # 2 tokens in 330 ms
    debt = 0.33 - 2 * auto.costs.plain - credit
    assert auto.balance == pytest.approx(-debt)
    auto.observe(np.zeros(0, bool), 0, plain=0.04)  # the run ends
    owed = math.ceil(debt / (TRY_SHARE * 0.04))  # plain rounds that pay it back, the one above included
    assert plain_rounds_until_speculation(auto, 1000) == owed - 1


def test_a_try_timed_in_a_moment_of_load_costs_the_ledger_at_most_spike_times_its_estimate():
    auto = AutoBudget(costs(plain=40, front=45), 8)
    auto.observe(np.arange(8) < 4, 8, front=3.0, tree=6.0)  # 5 tokens in seconds where a round takes 105 ms
    assert auto.balance == pytest.approx(5 * 0.04 - SPIKE * 0.105)


def test_the_ledger_passes_a_decodes_debt_to_the_next_in_full_and_what_it_saved_at_recall():
    """Plain rounds' shares pay a debt and fund the decode's own tries; only what speculation saved passes on,
    so that a run of plain decodes does not save up for a dear try in a later one."""
    experience = Experience(8)
    losing = AutoBudget(costs(), 8, experience)
    losing.observe(np.zeros(8, bool), 8, front=0.045, tree=0.06)  # 1 token in 105 ms: 65 ms lost
    experience.learn(losing)
    assert experience.balance == pytest.approx(-0.065)
    following = AutoBudget(costs(), 8, experience)
    assert following.balance == pytest.approx(-0.065) and following.choose() == 0  # it starts plain
    for _ in range(100):  # pays back
        following.observe(np.zeros(0, bool), 0, plain=0.04)
    following.observe(np.full(8, True), 8, front=0.045, tree=0.06)  # 9 tokens in 105 ms: 255 ms saved
    assert following.balance == pytest.approx(100 * TRY_SHARE * 0.04 - 0.065 + 0.255)
    experience.learn(following)
    assert experience.balance == pytest.approx(RECALL * (0.255 - 0.065))
    plain = AutoBudget(costs(), 8, experience)
    for _ in range(100):
        plain.observe(np.zeros(0, bool), 0, plain=0.04)
    experience.learn(plain)
    assert experience.balance == pytest.approx(RECALL * RECALL * (0.255 - 0.065))


def test_after_a_dip_the_settings_prior_decides_whether_speculation_comes_back():
    """A few rounds that accept nothing switch speculation off in any setting. Where the setting's earlier
    decodes showed speculation paying, the decode tries again within a few plain rounds; where they showed
    it losing, it stays off for hundreds of plain rounds (what they showed fades by LINGER a round)."""
    def dip_then_plain(shown: float) -> int:
        experience = Experience(8)
        earlier = AutoBudget(costs(), 8, experience)
        for _ in range(40):
            earlier.observe(np.full(8, True) & (np.arange(8) < 8 * shown), 8, front=0.045, tree=0.06)
        experience.learn(earlier)
        auto = AutoBudget(costs(), 8, experience)
        while auto.choose():  # the dip
            auto.observe(np.zeros(8, bool), 8, front=0.045, tree=0.06)
        rounds_off = 0
        while auto.choose() == 0 and rounds_off < 500:
            auto.observe(np.zeros(0, bool), 0, plain=0.04)
            rounds_off += 1
        return rounds_off

    assert dip_then_plain(0.75) < 16  # 6 of 8 nodes: 7 tokens in 105 ms, plain rounds give 2.6
    assert 256 < dip_then_plain(0.0) < 500  # no node: 1 token in 105 ms


def test_a_session_prior_learns_from_earlier_decodes_and_forgets_when_they_show_nothing():
    experience = Experience(8)
    assert experience.prior().tolist() == pytest.approx(prior(8).tolist())
    first = AutoBudget(costs(), 8, experience)
    for _ in range(100):  # a decode whose trees never get past the drawn token
        first.observe(np.zeros(8, bool), 8, front=0.045, tree=0.06)
    experience.learn(first)
    # The earlier decode weighs EXPERIENCE rounds at most: the next decode's own rounds soon outweigh it.
    want = PRIOR_WEIGHT * prior(8) / (PRIOR_WEIGHT + EXPERIENCE)
    assert experience.prior().tolist() == pytest.approx(want.tolist())
    second = AutoBudget(costs(), 8, experience)
    assert second.choose() == 0  # a session whose speculation did not pay starts the next decode without it
    for _ in range(200):  # ... and keeps it off: plain rounds fade toward the session prior, which says so
        second.observe(np.zeros(0, bool), 0, plain=0.04)
        assert second.choose() == 0
    # Decodes that verify nothing make the session forget a little (RECALL) of what the earlier ones
    # showed: the prior goes back toward the optimistic one, and speculation is tried again (their plain
    # rounds paid back what the first decode's try lost: see the ledger's tests).
    tries = 0
    while (plain := AutoBudget(costs(), 8, experience)).choose() == 0:
        for _ in range(64):
            plain.observe(np.zeros(0, bool), 0, plain=0.04)
        experience.learn(plain)
        tries += 1
    assert 0 < tries < 30


def test_the_session_prior_counts_every_round_a_decode_verified():
    # A decode whose early rounds accepted everything and whose last few accepted nothing: the session
    # learns the whole decode (10 of 14 rounds), not the dip its decayed estimate ended on.
    experience = Experience(1)
    auto = AutoBudget(costs(tree={1: 42}), 1, experience)
    for hit in [True] * 10 + [False] * 4:
        auto.observe(np.array([hit]), 1, front=0.045, tree=0.042)
    experience.learn(auto)
    assert experience.hits.tolist() == [10] and experience.seen.tolist() == [14]
    experience.learn(AutoBudget(costs(tree={1: 42}), 1, experience))  # a decode that verified nothing
    assert experience.hits.tolist() == [10 * RECALL] and experience.seen.tolist() == [14 * RECALL]


def test_decode_teaches_the_session_prior(mock_pair, greedy):
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    experience = Experience(8)
    config = DecodeConfig("root-draw", 0.0, "auto", 30, 0, 8)
    result = decode(pair.target, pair.drafter, [3, 4, 5], config, frozenset(), None, costs=costs(),
                    experience=experience)
    assert result.tokens == greedy(pair.target_model, [3, 4, 5], 30)
    verified = sum(r.budget > 0 for r in result.rounds)
    assert verified and experience.seen[0] == verified


def test_ranks_follow_the_selection_order():
    # Tree nodes by cumulative log-prob -0.1, -0.5, -0.3 (pool indices 3, 7, 5): ranks 0, 2, 1.
    on_path = ranks_on_path(np.array([-0.1, -0.5, -0.3]), np.array([1, 2, 2]), np.array([3, 7, 5]), [0, 1])
    assert on_path.tolist() == [True, False, True]


@pytest.mark.parametrize("decoder", SPECULATIVE)
def test_auto_keeps_the_greedy_output_and_records_each_rounds_budget(decoder, mock_pair, greedy):
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    for slow_drafter in (False, True):
        front = 1.0 if slow_drafter else 0.0  # a drafter that takes a second: speculation goes off at once
        result = decode(pair.target, pair.drafter, [3, 4, 5], DecodeConfig(decoder, 0.0, "auto", 30, 0, 16),
                        frozenset({EOS}), None, costs=costs(front=front * 1e3))
        assert result.tokens == greedy(pair.target_model, [3, 4, 5], 30)
        budgets = [r.budget for r in result.rounds]
        assert set(budgets) <= set(candidate_sizes(16))
        assert all((r.tree_size == 0) == (r.budget == 0 or r.accepted == 0 and r.tree_size == 0)
                   for r in result.rounds)
        if slow_drafter:
            assert budgets.count(0) > len(budgets) / 2


class CountingDrafter:
    """A DrafterClient that counts the pools it is asked for."""

    def __init__(self, inner) -> None:
        self.inner, self.asked = inner, 0

    def start(self, prompt):
        self.asked += 1
        self.inner.start(prompt)

    def commit(self, tokens):
        self.asked += 1
        self.inner.commit(tokens)

    def pool(self):
        return self.inner.pool()

    def has_pool(self):
        return self.inner.has_pool()

    def end(self):
        self.inner.end()


def test_plain_rounds_ask_the_drafter_for_nothing(mock_pair):
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    drafter = CountingDrafter(pair.drafter)
    result = decode(pair.target, drafter, [3, 4, 5], DecodeConfig("root-draw", 0.0, "auto", 40, 0, 8), frozenset(),
                    None, costs=costs(front=500))
    assert drafter.asked == sum(r.budget > 0 for r in result.rounds)


def test_auto_needs_costs(mock_pair):
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    with pytest.raises(ValueError, match="budget auto needs the pass costs"):
        decode(pair.target, pair.drafter, [3], DecodeConfig("draft", 0.0, "auto", 4), frozenset(), None)


@pytest.mark.parametrize("decoder", ["ar"] + [d for d in SPECULATIVE if RULES[d].root_pass][:1])
def test_auto_at_t1_draws_from_the_targets_law(decoder, mock_pair):
    """Seeded T = 1 decodes with auto and with a fixed budget give different trees but the same law; here
    the first token's frequencies over many decodes match the target's row within a chi-square test."""
    import scipy.stats

    from models.mock import MockModel
    pair = mock_pair(8, 5, 1.0, PoolConfig(topk=3, depth=3, expand=2))
    row = torch.softmax(torch.from_numpy(MockModel(8, 5).logits(MockModel(8, 5).digest([3]))).double(), -1).numpy()
    counts = np.zeros(8)
    for i in range(1500):
        result = decode(pair.target, pair.drafter, [3], DecodeConfig(decoder, 1.0, "auto", 2, 0, 8), frozenset(),
                        torch.Generator().manual_seed(i), costs=costs())
        counts[result.tokens[0]] += 1
    assert scipy.stats.chisquare(counts, 1500 * row).pvalue > 1e-4


def test_the_drafters_catch_up_after_plain_rounds_is_not_taken_for_its_wait():
    """The first speculative round after a start or after plain rounds waits while the drafter ingests the
    tokens it missed: that wait is not what a steady round costs, so only steady rounds teach `front`, and
    rounds after plain ones teach the catch-up per missed token."""
    from pipeline.feed import DrafterFeed
    from pipeline.result import Phases

    policy = AutoPolicy(costs(front=45), 8, None)
    auto, on_path, feed = policy.auto, np.array([True, False]), DrafterFeed(None)

    def _observe(auto, on_path, budget, times, previous, missed):
        feed.previous, feed.missed = previous, missed
        policy.observe(on_path, budget, times, feed)

    times = Phases(root=0.05, wait=0.4, select=0.0, tree=0.06, commit=0.0)
    _observe(auto, on_path, 8, times, None, 0)  # a decode's first round: the prefill's business
    assert auto.costs.front == pytest.approx(0.045) and auto.costs.catch_up == 0
    assert auto.seen[:8].tolist() == [1] * 8
    _observe(auto, on_path, 8, times, 0, 20)  # after plain rounds, 20 tokens behind
    assert auto.costs.front == pytest.approx(0.045)
    assert auto.costs.catch_up == pytest.approx(0.2 * (0.45 - 0.045) / 20)
    _observe(auto, on_path, 8, times, 0, 0)  # a late start: the drafter's prefill teaches no catch-up
    assert auto.costs.front == pytest.approx(0.045)
    assert auto.costs.catch_up == pytest.approx(0.2 * (0.45 - 0.045) / 20)
    _observe(auto, on_path, 8, times, 8, 3)  # steady: 450 ms count as SPIKE times the 45 ms estimate
    assert auto.costs.front == pytest.approx(0.045 + 0.2 * (SPIKE * 0.045 - 0.045))
    assert auto.costs.catch_up == pytest.approx(0.2 * (0.45 - 0.045) / 20)


def test_switching_speculation_on_is_spread_over_the_rounds_it_serves():
    # Acceptance 0.6 at each of 8 ranks: 5.8 tokens for 105 ms (55/s) against plain rounds' 25/s. A switch
    # that costs 150 ms (3 ms for each of 50 missed tokens) paid by one round gives 23/s: it stays plain.
    auto = AutoBudget(costs(plain=40, front=45), 8)
    auto.prior[:] = 0.6
    auto.costs.catch_up = 0.003
    auto.balance = 10.0  # a ledger that covers any switch: the spread alone decides here
    assert auto.costs.switch(50) == pytest.approx(0.15)
    assert auto.choose() == 8 and auto.choose(auto.costs.switch(50)) == 8  # no run ended yet: the rest
    assert auto.choose(auto.costs.switch(50), left=5) == 0  # the decode's last round pays it alone
    assert auto.choose(auto.costs.switch(50), left=12) == 8  # two rounds share it: 5.8 tokens in 180 ms
    auto.run = 1.0  # this setting's speculative runs last a round: the switch is the next round's alone
    assert auto.choose(auto.costs.switch(50)) == 0 and auto.choose(auto.costs.switch(10)) == 8
    # Before the first round: what the drafter's prefill adds to the target's, by prompt token. A start
    # serves the rounds a run lasts, at least START_ROUNDS, at most the rest of the decode: 180 ms over a
    # round loses, over eight rounds it pays. Where the setting's runs last a round, the 0.9 s of a 300-token
    # prompt loses even in a decode of 600 tokens, which runs lasting the decode pay.
    auto.costs.prefill, auto.costs.prefill_shared = 0.001, 0.004
    assert auto.costs.start(10) == pytest.approx(0.03) and auto.choose(start=auto.costs.start(10), left=5) == 8
    assert START_ROUNDS == 8
    assert auto.choose(start=auto.costs.start(300), left=600) == 0
    assert auto.choose(start=auto.costs.start(60), left=60) == 8
    auto.run = math.inf
    assert auto.choose(start=auto.costs.start(300), left=600) == 8
    assert auto.choose(start=auto.costs.start(60), left=5) == 0
    # A decode that started plain and switches on later waits for the drafter's whole prefill.
    assert auto.costs.start(60, late=True) == pytest.approx(0.24)
    auto.costs.prefill_shared = 0.0005  # sharing that costs nothing (two devices) adds nothing
    assert auto.costs.start(1000) == 0


def test_a_try_switches_speculation_on_only_where_the_ledger_covers_what_switching_costs():
    """The drafter's start or catch-up is lost whatever the try's rounds accept: a try makes it only within
    what the ledger holds and TRY_SHARE of the plain rounds the rest of the decode would take. So a drafter
    whose start beside a long prompt's prefill costs ten plain rounds starts plain in a decode of 96 tokens,
    while one whose start costs little, or a decode whose tries saved, starts it."""
    auto = AutoBudget(costs(plain=55, front=45), 8)
    auto.prior[:] = 0.9
    auto.costs.prefill, auto.costs.prefill_shared = 1.7 * MS, 2.7 * MS  # 0.587 s beside 587 prompt tokens
    allowance = TRY_SHARE * 0.055 * 96
    assert auto.affordable(allowance, 96) and not auto.affordable(allowance + 1e-6, 96)
    assert auto.choose(start=auto.costs.start(587), left=96) == 0
    assert auto.choose(start=auto.costs.start(53), left=96) == 8  # 53 ms: within the allowance
    auto.balance = 0.6  # what earlier tries saved
    assert auto.choose(start=auto.costs.start(587), left=96) == 8
    auto.balance = 0.0
    auto.costs.catch_up = 0.003
    assert auto.choose(auto.costs.switch(60), left=96) == 0 and auto.choose(auto.costs.switch(50), left=96) == 8
    auto.observe(np.ones(8, bool), 8, front=0.045, tree=0.06)  # within a run no switch is paid
    assert auto.choose(left=1) == 8


def test_a_start_beside_the_prefill_is_the_tries_and_its_run_pays_it_back():
    """A decode that starts the drafter beside its prefill charges the ledger what the prefill took beyond
    its cost alone (at most SPIKE times the start's estimate), and credits every round of the run it serves,
    not its first alone; the run's end ends that."""
    from pipeline.feed import DrafterFeed

    c = costs(plain=40, front=45)
    c.prefill, c.prefill_shared = 1 * MS, 2 * MS
    policy = AutoPolicy(c, 8, None)
    feed = DrafterFeed(IdleDrafter())
    feed.ask(list(range(100)))
    policy.prefilled(feed, 100, 0.1 + 0.08)  # 80 ms beyond the 100 ms alone, within SPIKE * 100 ms
    assert policy.auto.balance == pytest.approx(-0.08) and policy.auto.started
    for _ in range(3):  # 5 tokens in 105 ms: each saves 95 ms
        policy.auto.observe(np.arange(8) < 4, 8, front=0.045, tree=0.06)
    assert policy.auto.balance == pytest.approx(-0.08 + 3 * 0.095)
    policy.auto.observe(np.zeros(0, bool), 0, plain=0.04)
    assert not policy.auto.started
    policy.auto.observe(np.arange(8) < 4, 8, front=0.045, tree=0.06)  # a new run's first round: a try
    policy.auto.observe(np.arange(8) < 4, 8, front=0.045, tree=0.06)  # its later rounds: the estimates'
    assert policy.auto.balance == pytest.approx(-0.08 + 4 * 0.095 + TRY_SHARE * 0.04)
    slow = AutoPolicy(costs(plain=40, front=45), 8, None)
    slow.auto.costs.prefill, slow.auto.costs.prefill_shared = 1 * MS, 2 * MS
    slow.prefilled(feed, 100, 5.0)  # a moment of load: counted as at most SPIKE times the 100 ms estimate
    assert slow.auto.balance == pytest.approx(-SPIKE * 0.1)


def test_runs_of_speculative_rounds_teach_their_mean_length_across_decodes():
    experience = Experience(8)
    auto = AutoBudget(costs(), 8, experience)
    assert math.isinf(auto.run)
    for b in (8, 8, 8, 0, 0, 4, 0):
        auto.observe(np.zeros(b, bool), b, front=0.045 if b else None, tree=0.06 if b else None,
                     plain=None if b else 0.04)
    assert auto.run == pytest.approx(3 + RUN_RATE * (1 - 3)) and auto.streak == 0
    auto.observe(np.zeros(8, bool), 8)  # a run the decode's end cuts short counts as it went
    experience.learn(auto)
    want = 2.6 + RUN_RATE * (1 - 2.6)
    assert experience.run == pytest.approx(want) and AutoBudget(costs(), 8, experience).run == pytest.approx(want)
    assert math.isinf(AutoBudget(costs(), 8).run)  # a decode of its own (--budget-prior decode) starts afresh


def test_a_decode_whose_start_would_not_pay_starts_plain(mock_pair, greedy):
    """When the drafter's prefill would slow the target's by more than a first round gains, the decode
    starts without speculation, and still gives the target's output."""
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    slow = costs()
    slow.prefill_shared = 1.0  # a second a prompt token, beside the drafter
    config = DecodeConfig("root-draw", 0.0, "auto", 12, 0, 8)
    result = decode(pair.target, pair.drafter, [3, 4, 5], config, frozenset(), None, costs=slow)
    assert result.rounds[0].budget == 0 and result.tokens == greedy(pair.target_model, [3, 4, 5], 12)
    assert not any(r.budget for r in result.rounds)  # starting later would wait for the same prefill
    result = decode(pair.target, pair.drafter, [3, 4, 5], config, frozenset(), None, costs=costs())
    assert result.rounds[0].budget > 0


def test_the_prefill_costs_follow_what_decodes_prefills_take():
    """Start-up times the prefill beside an idle drafter; a decode's prefill beside a starting one shows
    what starting it really adds, charged per drafter token, and a prefill alone moves the alone cost."""
    c = PassCosts(40 * MS, 45 * MS, {8: 60 * MS}, prefill=2 * MS, prefill_shared=2 * MS)
    assert c.start(700) == 0.0  # costs that price starting the drafter at nothing
    c.prefilled(700, 700 * 2 * MS + 0.7, started=700)  # the drafter's prefill added 0.7 s to 1.4
    assert c.prefill_shared == pytest.approx(2 * MS + COST_RATE * 1 * MS)
    assert c.start(700) == pytest.approx(COST_RATE * 0.7)
    c.prefilled(700, 700 * 2 * MS + 0.7, started=350)  # a window: the drafter started on 350 tokens
    assert c.prefill_shared == pytest.approx(2 * MS + COST_RATE * MS + COST_RATE * (2 * MS - COST_RATE * MS))
    c.prefilled(100, 100 * 3 * MS)  # alone, at 3 ms a token
    assert c.prefill == pytest.approx(2 * MS + COST_RATE * MS)
    before = (c.prefill, c.prefill_shared)
    c.prefilled(0, 0.01, started=1)  # a one-token prompt prefills nothing
    assert (c.prefill, c.prefill_shared) == before


def test_a_decode_teaches_its_prefill_cost_and_long_prompts_then_start_plain(mock_pair, greedy):
    """A decode that started the drafter feeds its prefill's time to the costs; once they show starting
    it dear, a long prompt starts plain and a short one still speculates, each with the target's output."""
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    c = costs()
    config = DecodeConfig("root-draw", 0.0, "auto", 12, 0, 8)
    prompt = [3, 4, 5, 6, 7, 8, 9, 10] * 5
    result = decode(pair.target, pair.drafter, prompt, config, frozenset(), None, costs=c)
    assert result.rounds[0].budget > 0 and c.prefill_shared > 0  # learnt from the decode's own prefill

    def taught() -> PassCosts:  # what slower prefills beside the drafter would teach (each decode moves them)
        c = costs()
        c.prefill, c.prefill_shared = 1 * MS, 20 * MS
        return c

    long = decode(pair.target, pair.drafter, prompt, config, frozenset(), None, costs=taught())
    assert long.rounds[0].budget == 0 and long.tokens == greedy(pair.target_model, prompt, 12)
    config = DecodeConfig("root-draw", 0.0, "auto", 48, 0, 8)  # long enough for its start: see affordable
    short = decode(pair.target, pair.drafter, [3, 4], config, frozenset(), None, costs=taught())
    want = greedy(pair.target_model, [3, 4], 48)  # up to its EOS, which the decode (no stops) runs past
    assert short.rounds[0].budget > 0 and short.tokens[:len(want)] == want



def test_measured_passes_are_checked_where_they_are_built():
    with pytest.raises(ValueError, match="`overlapped` must be finite seconds"):
        MeasuredPasses(plain=0.06, overlapped=float("nan"), tree={1: 0.07}, tree_with_root={1: 0.09}, prefill=0.0,
                       prefill_shared=0.0)
    with pytest.raises(ValueError, match="`tree` and `tree_with_root` must time the same sizes"):
        MeasuredPasses(plain=0.06, overlapped=0.05, tree={1: 0.07}, tree_with_root={2: 0.09}, prefill=0.0,
                       prefill_shared=0.0)


# Budget auto against plain decoding, on the passes a machine timed and the acceptance its drafter reaches.
# A round of the simulated decode costs what the timed passes say (a root-pass rule's: the root pass beside
# the drafter, the rest of the pool's wait, the tree pass; after plain rounds the drafter first ingests what it
# missed) and accepts a path of L nodes with P(L >= i) = alpha^i down to the pool's depth, its nodes the tree's
# first ranks. alpha 0.85 is about what the int8 copy of the target reaches at T = 0, 0.6 at T = 1.
PLAIN_MS, DEPTH, CAP, PROMPT, CATCH_UP_MS = 45.0, 4, 16, 40, 0.6


def timed_passes(pool_ms: float) -> MeasuredPasses:
    """A machine like the embedded pair's on two CPU cores (a plain pass 45 ms, a tree pass of 16 nodes 55),
    whose drafter grows a pool in `pool_ms`, its prefill beside the target's adding to it in proportion (1 ms a
    prompt token for the int8 drafter's 95 ms pool, 0.1 ms for a head's 10 ms one)."""
    sizes = [b for b in candidate_sizes(CAP) if b]
    tree = {b: (PLAIN_MS + 10 * b / CAP) * MS for b in sizes}
    return MeasuredPasses(plain=PLAIN_MS * MS, overlapped=PLAIN_MS * MS, tree=tree,
                          tree_with_root={b: t + 2 * MS for b, t in tree.items()}, prefill=1.5 * MS,
                          prefill_shared=(1.5 + pool_ms / 95) * MS, pool=pool_ms * MS)


class IdleDrafter:
    """A DrafterClient that only takes requests: the simulated decode times the pools."""

    def start(self, prompt):
        pass

    def commit(self, tokens):
        pass

    def end(self):
        pass


def simulated_decode(policy, m: MeasuredPasses, root_pass: bool, alpha: float, rng: np.random.Generator,
                     tokens: int = 64, prompt: int = PROMPT) -> tuple[float, list[int]]:
    """One decode as pipeline.decode runs it (the policy's first, prefilled, observe and next calls; the
    drafter asked for a pool only before a speculative round) -> (its seconds, each round's budget)."""
    from pipeline.feed import DrafterFeed
    from pipeline.result import Phases

    feed, history, out, budgets = DrafterFeed(IdleDrafter()), list(range(prompt + 1)), 0, []
    budget = policy.first(feed, prompt, tokens)
    if budget:
        feed.ask(history)
    seconds = prompt * (m.prefill_shared if budget else m.prefill)
    policy.prefilled(feed, prompt, seconds)
    while out < tokens:
        if budget == 0:
            times = Phases(root=m.plain, commit=0.0)
            on_path = None
        else:
            # the first pool grows during the prefill; after plain rounds the drafter first catches up
            pool = 0.0 if feed.previous is None else m.pool + CATCH_UP_MS * MS * feed.missed
            ahead = m.overlapped if root_pass else 0.0
            tree = (m.tree if root_pass else m.tree_with_root)[budget]
            times = Phases(root=m.overlapped if root_pass else None, wait=max(0.0, pool - ahead), select=0.0,
                           tree=tree, commit=0.0)
            length = 0
            while length < min(DEPTH, budget) and rng.random() < alpha:
                length += 1
            on_path = np.arange(budget) < length
        policy.observe(on_path, budget, times, feed)
        seconds += sum(times.ran().values())
        budgets.append(budget)
        emitted = 1 + (0 if on_path is None else int(on_path.sum()))
        out += emitted
        history += [0] * emitted
        feed.ran(budget, history)
        budget = policy.next(feed, len(history), tokens - out)
        if budget:
            feed.ask(history)
    policy.end()
    return seconds, budgets


def simulated_session(pool_ms: float, decoder: str, alpha: float, decodes: int = 8, seed: int = 0,
                      tokens: int = 64, prompt: int = PROMPT):
    """`decodes` decodes of one setting in one session (its costs and Experience shared), each's speed over
    plain decoding's (the prefill alone, then a plain pass a token) -> [(speed ratio, budgets)]."""
    m = timed_passes(pool_ms)
    session, rng = SessionBudgets(lambda cap: m), np.random.default_rng(seed)
    root_pass = RULES[decoder].root_pass
    plain = prompt * m.prefill + tokens * m.plain
    runs = []
    for _ in range(decodes):
        costs, experience = session.for_decode(decoder, root_pass, 1.0, CAP, True)
        seconds, budgets = simulated_decode(AutoPolicy(costs, CAP, experience), m, root_pass, alpha, rng, tokens,
                                            prompt)
        runs.append((plain / seconds, budgets))
    return runs


@pytest.mark.parametrize("decoder", ["root-draw", "draft"])
@pytest.mark.parametrize("alpha", [0.85, 0.6])  # about T = 0's acceptance and T = 1's
def test_a_drafter_as_costly_as_the_target_leaves_every_decode_plain(decoder, alpha):
    """A pool of four levels that each cost a target pass: a speculative round costs five plain rounds or
    more and gives at most five tokens. The pool is timed at start-up, so no decode speculates to learn it."""
    for ratio, budgets in simulated_session(4 * PLAIN_MS, decoder, alpha):
        assert budgets.count(0) == len(budgets) and ratio == pytest.approx(1.0)


@pytest.mark.parametrize("decoder", ["root-draw", "draft"])
@pytest.mark.parametrize("seed", range(4))
def test_a_drafter_whose_rounds_lose_settles_on_plain_decoding_within_a_decodes_first_rounds(decoder, seed):
    """The int8 drafter's pool on two CPU cores (95 ms: a round costs about 3.3 plain rounds) at T = 1's
    acceptance (about 2.3 tokens a round): a decode tries a round or two, then decodes plainly; it tries
    again rarely (a few rounds in eight decodes of 64 tokens), and none falls below 0.95 of plain decoding."""
    runs = simulated_session(95, decoder, 0.6, seed=seed)
    for ratio, budgets in runs:
        assert ratio >= 0.95 and sum(b > 0 for b in budgets) <= 5
        assert 0 in budgets[:4]
    assert sum(b > 0 for _, budgets in runs for b in budgets) <= 16


@pytest.mark.parametrize("decoder", ["root-draw", "draft"])
@pytest.mark.parametrize("alpha", [0.95, 0.85, 0.6])
@pytest.mark.parametrize("prompt", [300, 587])
def test_no_decode_pays_for_a_dear_start_beside_a_long_prompt(decoder, alpha, prompt):
    """The int8 drafter's start beside a long prompt's prefill costs 0.3 to 0.6 s, six to thirteen plain
    rounds: spread over the rounds it would serve it can look worth it, and where those rounds merely break even
    (T = 0's acceptance) the decode loses it all. The ledger covers no such start in a decode of 96 tokens, so
    every decode of twelve in a session stays within 0.95 of plain decoding; a head's start, cheap, is made
    (where its rounds pay or not, which later decodes learn)."""
    for seed in range(3):
        runs = simulated_session(95, decoder, alpha, decodes=12, seed=seed, tokens=96, prompt=prompt)
        assert min(ratio for ratio, _ in runs) >= 0.95
        head = simulated_session(10, decoder, alpha, decodes=1, seed=seed, tokens=96, prompt=prompt)
        assert head[0][1][0] > 0


@pytest.mark.parametrize("decoder", ["root-draw", "draft"])
@pytest.mark.parametrize("pool_ms", [10, 95])  # a cheap head's pool; the int8 drafter's
def test_a_drafter_whose_rounds_pay_speculates(decoder, pool_ms):
    """Acceptance 0.95 (4.7 tokens a round at most 5): the int8 drafter's rounds (3.3 plain rounds) and a
    cheap head's (about 2.3, 1.3 for `draft`) pay, and auto speculates in most rounds of every decode after
    the first few (a first round that accepts one node can leave the int8 drafter's next decodes plain until
    the session forgets it), faster than plain decoding over the session."""
    runs = simulated_session(pool_ms, decoder, 0.95, seed=1)
    assert all(sum(b > 0 for b in budgets) > len(budgets) / 2 for _, budgets in runs[3:])
    assert np.mean([ratio for ratio, _ in runs]) > 1.15 and min(ratio for ratio, _ in runs) >= 0.95


def test_speculation_must_beat_plain_decoding_by_a_margin():
    # 8 nodes at acceptance a: 1 + 8a tokens in 105 ms against a plain round's 40 ms. At a = 0.22 the tokens
    # per second nearly tie (26.3 against 25, inside MARGIN): plain; at a = 0.3, 32.4 a second: speculate.
    auto = AutoBudget(costs(plain=40, front=45), 8)
    auto.prior[:] = 0.22
    rate = (1 + 8 * 0.22) / 0.105
    assert 25 < rate < 25 * (1 + MARGIN) and auto.choose() == 0
    auto.prior[:] = 0.3
    assert auto.choose() == 8


def test_the_drafters_pool_timed_at_start_up_is_what_a_round_waits_for():
    measured = timed_passes(95)
    assert costs_for(True, measured).front == pytest.approx(0.095)  # the root pass (45 ms) beside it
    assert costs_for(False, measured).front == pytest.approx(0.095)  # `draft` waits for all of it
    assert costs_for(True, timed_passes(20)).front == pytest.approx(0.045)  # a pool ready before the root pass
    # Cut pools take the levels grown by the end of the root pass: the whole pool is not what they wait for.
    assert costs_for(True, measured, whole_pool=False).front == pytest.approx(0.045)
    assert costs_for(False, measured, whole_pool=False).front == 0.0


def test_a_decode_whose_drafter_costs_more_than_any_acceptance_pays_never_asks_it(mock_pair, greedy):
    pair = mock_pair(64, 4, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    drafter = CountingDrafter(pair.drafter)
    sizes = [b for b in candidate_sizes(8) if b]
    tree = dict.fromkeys(sizes, 0.05)
    measured = MeasuredPasses(plain=0.04, overlapped=0.04, tree=tree, tree_with_root=tree, prefill=0.001,
                              prefill_shared=0.002, pool=0.2)  # a pool of five plain passes
    for decoder in ("root-draw", "draft"):
        config = DecodeConfig(decoder, 0.0, "auto", 20, 0, 8)
        result = decode(pair.target, drafter, [3, 4, 5], config, frozenset(), None,
                        costs=costs_for(RULES[decoder].root_pass, measured))
        assert not any(r.budget for r in result.rounds) and drafter.asked == 0
        assert result.tokens == greedy(pair.target_model, [3, 4, 5], 20)
