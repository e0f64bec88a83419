"""Which recorded rounds held their root's exact row (`cover`, DESIGN.md section 12), from the decode's record.

A round of the covering decoder that follows a round stopped at a leaf draws X1 from the row that pass scored;
its record says so of every round (`held_rows`). Its rounds file keeps only the rounds with a pool (a plain
round, at budget 0, has none to measure), so the record's rounds are matched to the recorded ones through the
rounds with a budget, their budgets and accepted nodes checked one by one: a flag never lands on another round."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluation.record import DecodeRecord
from evaluation.rounds import RecordedRound, key_text, round_key
from pipeline.config import InputError


def held_rows(record: DecodeRecord | None, rounds: Sequence[RecordedRound]) -> np.ndarray | None:
    """(len(rounds),) bool: whether each recorded round of a decode held its root's exact row, from the decode's
    `record`; None where no record says (no record, or one written before `held_rows`). InputError naming the
    decode when its record's rounds with a budget are not its recorded rounds."""
    if record is None or record.held_rows is None:
        return None
    n, budgets = record.rounds, record.budgets
    if len(record.held_rows) != n or len(record.accepted) != n or (budgets is not None and len(budgets) != n):
        raise InputError(f"the record of decode {key_text(round_key(record))}: `held_rows`, `budgets` and "
                         f"`accepted` must hold one value for each of its {n} rounds")
    kept = list(range(n)) if budgets is None else [i for i, b in enumerate(budgets) if b != 0]  # plain: no pool
    if problem := _mismatch(record, kept, rounds):
        raise InputError(f"decode {key_text(round_key(record))}: its record does not match its recorded rounds "
                         f"({problem})")
    return np.array([bool(record.held_rows[i]) for i in kept], bool)


def _mismatch(record: DecodeRecord, kept: list[int], rounds: Sequence[RecordedRound]) -> str | None:
    """Where the record's rounds `kept` (indices, those with a pool) differ from the recorded `rounds`, in
    words; None where each ran at the same budget and accepted as many nodes."""
    if len(kept) != len(rounds):
        return f"{len(kept)} rounds with a budget, {len(rounds)} recorded"
    for j, (i, rnd) in enumerate(zip(kept, rounds)):
        budget = rnd.budget if record.budgets is None else record.budgets[i]  # none recorded: any budget
        if (budget, record.accepted[i]) != (rnd.budget, rnd.accepted):
            return (f"recorded round {j} ran at budget {rnd.budget} and accepted {rnd.accepted}, its record's round "
                    f"{i} at budget {budget} and accepted {record.accepted[i]}")
    return None
