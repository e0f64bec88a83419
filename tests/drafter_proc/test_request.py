"""One request's state on plain times: which passes and rounds it times for its cuts, and what a round's time
leaves out (the target's wait for the pool after it asked)."""

from __future__ import annotations

import numpy as np

from drafter_proc.request import Request
from pipeline.cut import NOW, LevelValues
from pipeline.cut_policy import CutPolicy
from pipeline.pool import ROOT, Pool


def request() -> Request:
    return Request(3, CutPolicy(LevelValues()))


def two_level_pool() -> Pool:
    """Root children 7 and 8; 7 expanded with children 9 and 10."""
    return Pool.from_edges(np.array([7, 8, 9, 10]), np.array([ROOT, ROOT, 0, 0]), np.full(4, -0.5, np.float32),
                           np.array([True, False, False, False]))


def test_a_prompts_prefill_is_not_timed_but_a_commits_prefill_and_every_level_are():
    first = request()  # round 0's growth: the prefill of the prompt, then two levels
    first.growing(10.0)
    for now in (12.0, 12.5, 13.25):
        first.pass_ended(now)
    assert list(first.policy.pass_seconds) == [0.5, 0.75] and first.levels == 3
    first.round = 0  # a commit's growth: its prefill is a pass like a level's
    first.growing(20.0)
    first.pass_ended(20.25)
    assert list(first.policy.pass_seconds) == [0.5, 0.75, 0.25] and first.levels == 1


def test_a_round_is_timed_without_the_wait_after_the_ask_and_round_0_is_not_timed():
    req = request()
    req.growing(0.0)
    req.asked(0, 0.0, NOW, at=1.0)
    req.sending(two_level_pool(), 1.5)
    req.round_ended(np.array([7, 9, 4]), at=2.0)  # round 0: its levels teach, its time does not
    assert list(req.policy.values.rounds) == [(2, 2)] and list(req.policy.round_seconds) == []
    req.round = 1
    req.growing(2.0)
    req.asked(2, 0.4, NOW, at=2.4)
    req.asked(2, 0.6, NOW, at=2.6)  # a second ask: the round's wait still runs from the first
    req.sending(two_level_pool(), 3.0)  # the target waited 0.6 s for it
    req.round_ended(np.array([8, 4]), at=5.0)
    assert list(req.policy.values.rounds) == [(2, 2), (2, 1)]
    assert list(req.policy.round_seconds) == [3.0 - 0.6] and req.asked_at is None and req.sent is None


def test_a_round_the_target_did_not_ask_in_teaches_nothing():
    req = request()
    req.round = 1
    req.sending(two_level_pool(), 1.0)
    req.round_ended(np.array([7, 9, 4]), at=2.0)
    assert list(req.policy.values.rounds) == [] and list(req.policy.round_seconds) == []


def test_sending_the_pool_ends_the_ask_for_it():
    req = request()
    req.cut_asked = NOW
    req.sending(two_level_pool(), 1.0)
    assert req.cut_asked == 0
