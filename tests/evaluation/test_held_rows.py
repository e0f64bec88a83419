"""The records' held rows joined to the recorded rounds: a plain round (budget 0) has a record's column entry and
no recorded round, so the flags land on the rounds with a pool, checked round by round."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evaluation.held_rows import held_rows
from evaluation.rounds import RecordedRound
from pipeline.config import InputError
from pipeline.pool import Pool

POOL = Pool.from_edges(np.array([1, 2]), np.array([-1, 0]), np.array([-0.1, -0.2]), np.array([True, False]))


def recorded(budget: int, accepted: int) -> RecordedRound:
    return RecordedRound(budget=budget, accepted=accepted, emitted=np.array([1, 2, 3][: accepted + 1]), pool=POOL,
                         edge=np.array([0.5, 0.5]))


def cover_record(make_record, budgets, accepted, held):
    return make_record("a", "cover", budget=4, tree_sizes=budgets, accepted=accepted, budgets=budgets,
                       held_rows=held)


def test_held_flags_land_on_the_rounds_with_a_pool(make_record):
    # Rounds 0 and 3 are plain (budget 0): the rounds file holds rounds 1, 2 and 4 of the record.
    record = cover_record(make_record, [0, 4, 4, 0, 4], [0, 1, 2, 0, 1], [0, 0, 1, 0, 1])
    got = held_rows(record, [recorded(4, 1), recorded(4, 2), recorded(4, 1)])
    assert got.dtype == bool and got.tolist() == [False, True, True]


def test_a_decode_without_a_record_or_held_rows_holds_none(make_record):
    rounds = [recorded(4, 1)]
    assert held_rows(None, rounds) is None
    record = cover_record(make_record, [4], [1], [1])
    old = dataclasses.replace(record, held_rows=None, schema=3)  # written before the column
    assert held_rows(old, rounds) is None


@pytest.mark.parametrize("rounds, said", [
    ([(4, 1), (4, 1)], "round 1 ran at budget 4 and accepted 1, its record's round 2 at budget 4 and accepted 2"),
    ([(4, 1)], "2 rounds with a budget, 1 recorded"),
    ([(8, 1), (4, 2)], "round 0 ran at budget 8"),
])
def test_a_record_that_is_not_its_rounds_is_refused(make_record, rounds, said):
    record = cover_record(make_record, [0, 4, 4], [0, 1, 2], [0, 1, 1])
    with pytest.raises(InputError, match="decode prompt_id='a'.*does not match its recorded rounds") as e:
        held_rows(record, [recorded(b, a) for b, a in rounds])
    assert said in str(e.value)


def test_columns_of_another_length_are_refused(make_record):
    record = cover_record(make_record, [4, 4], [1, 1], [0, 1, 1])
    with pytest.raises(InputError, match="`held_rows`, `budgets` and `accepted` must hold one value for each of its 2"):
        held_rows(record, [recorded(4, 1), recorded(4, 1)])
