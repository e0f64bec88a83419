"""The cut-pool policy on plain seconds and counts: a pool asked for ends at once (NOW) or while its levels do
not pay (WEIGH); before it is asked, it ends before a level that would end after the time the target asked
at in recent rounds; nothing is decided from timings a request has not seen yet."""

from __future__ import annotations

import pytest

from pipeline.cut import NOW, WEIGH, LevelValues
from pipeline.cut_policy import TIMINGS_KEPT, CutPolicy


def policy(passes=(), asked_after=(), rounds=(), weigh=False, values=None) -> CutPolicy:
    """A policy that has seen these timings: level passes, asks (after their Commits) and timed rounds."""
    made = CutPolicy(values or LevelValues())
    for seconds in passes:
        made.pass_timed(seconds)
    for after in asked_after:
        made.asked(1, after, WEIGH if weigh else NOW)
    for seconds in rounds:
        made.round_ended(3, 3, seconds)
    made.weigh = weigh
    return made


@pytest.mark.parametrize("asked", [0, NOW, WEIGH])
def test_before_any_pass_is_timed_a_pool_ends_only_when_asked_for(asked):
    assert policy().ends_pool(2, 10.0, asked) == bool(asked)


def test_asked_now_the_pool_ends_at_the_level_in_progress():
    assert policy(passes=[0.01]).ends_pool(1, 0.0, NOW)
    assert policy(passes=[0.01], asked_after=[99.0], rounds=[1.0]).ends_pool(5, 0.0, NOW)


def test_not_asked_and_never_asked_a_pool_grows_whole():
    assert not policy(passes=[0.05, 0.05]).ends_pool(3, 100.0, 0)


def test_not_asked_a_pool_ends_before_a_level_that_would_end_after_the_usual_ask():
    timed = policy(passes=[0.1, 0.1, 0.1], asked_after=[0.5, 0.5, 0.9])  # median ask 0.5 s after the Commit
    assert not timed.ends_pool(2, 0.35, 0)  # the next level ends at 0.45 s: before the target asks
    assert not timed.ends_pool(2, 0.4, 0)  # at 0.5 s: no wait added
    assert timed.ends_pool(2, 0.45, 0)  # at 0.55 s: the target would wait for it


def test_the_median_of_recent_timings_decides_not_the_last():
    timed = policy(passes=[0.1, 0.1, 5.0], asked_after=[0.5, 0.5, 0.01])
    assert not timed.ends_pool(2, 0.3, 0)  # 0.3 + 0.1 (median pass) < 0.5 (median ask)
    assert timed.ends_pool(2, 0.45, 0)


def test_only_the_most_recent_timings_are_kept():
    timed = policy(passes=[9.0] * 20 + [0.1] * TIMINGS_KEPT, asked_after=[0.01] * 20 + [0.5] * TIMINGS_KEPT)
    assert len(timed.pass_seconds) == len(timed.asked_after) == TIMINGS_KEPT
    assert not timed.ends_pool(2, 0.3, 0)


def values_of(rounds: list[tuple[int, int]]) -> LevelValues:
    values = LevelValues()
    for had, through in rounds:
        values.observe(had, through)
    return values


@pytest.mark.parametrize("asked", [WEIGH, 0])
def test_weighed_a_level_grows_exactly_when_it_pays_for_its_wait(asked):
    paying = values_of([(4, 4)] * 30)  # every level run through: each brings nearly a token
    idle = values_of([(4, 0)] * 30)  # no level ever run through: the next brings almost nothing
    for values, grows in ((paying, True), (idle, False)):
        timed = policy(passes=[0.1], asked_after=[0.0], rounds=[1.0], weigh=True, values=values)  # waits 0.1 s
        assert timed.ends_pool(2, 0.0, asked) == (not grows)
        assert timed.ends_pool(2, 0.0, asked) == (not values.worth(2, 0.1, 1.0))


@pytest.mark.filterwarnings("error")  # nothing computed from an empty sample
def test_weighed_before_any_round_is_timed_the_pool_ends():
    timed = policy(passes=[0.01], asked_after=[0.0], weigh=True, values=values_of([(4, 4)] * 30))
    assert timed.ends_pool(2, 0.0, WEIGH)


def test_an_ask_says_whether_later_unasked_levels_are_weighed_and_round_0_is_no_timing():
    timed = CutPolicy(LevelValues())
    timed.asked(0, 7.0, WEIGH)  # round 0's ask came after the target's prefill: not a timing
    assert timed.weigh and list(timed.asked_after) == []
    timed.asked(3, 0.2, NOW)
    assert not timed.weigh and list(timed.asked_after) == [0.2]


def test_a_round_ended_teaches_the_levels_and_times_the_round_unless_told_not_to():
    values = LevelValues()
    timed = CutPolicy(values)
    timed.round_ended(4, 2, None)  # round 0: its levels count, its time does not
    timed.round_ended(4, 1, 0.3)
    assert list(values.rounds) == [(4, 2), (4, 1)] and list(timed.round_seconds) == [0.3]
