"""The paper's binary example after Theorem 2, computed by the values program's own coverage code.

An IID uniform binary target on the trie {a, b, aa, ab, ba, aaa, aab} (a = 0, b = 1, every edge 1/2), scored
whole (eight rows with the root's): the round goes through a rounds file and study.coverage's reading, as a
recorded run's rounds do, and each stopping rule's (coverage, expected acceptance, shortfall) comes out beside
the paper's. `python -m study.binary_example` prints the table; its last line is one JSON document."""

from __future__ import annotations

import json
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np

from evaluation.rounds import RecordedRound
from evaluation.rounds_file import RoundStore, load_rounds, rounds_path
from pipeline.pool import Pool
from study.coverage import coverage_tables

BUDGET = 7  # `draft` at B = 7 keeps the whole pool: the scored trie is the tree (Q = T)
PAPER = {"exhaustive": ("0", "2", "0"), "cap-1": ("3/4", "1", "1"), "sampled-leaf": ("3/4", "5/4", "3/4"),
         "cap-2": ("1/4", "7/4", "1/4")}  # (coverage, expected acceptance, shortfall), as the paper states them


def binary_round() -> RecordedRound:
    """The example's one round: the trie above, every edge's draft and target probability 1/2."""
    token, parent = [0, 1, 0, 1, 0, 0, 1], [-1, -1, 0, 0, 1, 2, 2]
    pool = Pool.from_edges(np.array(token), np.array(parent), np.log(np.full(7, 0.5)), np.arange(7) < 3)
    return RecordedRound(budget=BUDGET, accepted=2, emitted=np.array([0, 0, 1]), pool=pool, edge=np.full(7, 0.5))


def binary_figures() -> dict[str, tuple[Fraction, Fraction, Fraction]]:
    """Each stopping rule -> (coverage, expected acceptance, shortfall) of the example, as exact fractions."""
    key = dict(prompt_id="binary", category="example", turn=0, decoder="draft", temperature=1.0, budget=BUDGET,
               seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        with RoundStore(rounds_path(Path(tmp), 1, 1), {"example": "binary"}) as store:
            store.append(key, [binary_round()])
        decodes = [d for found in load_rounds([Path(tmp)]) for d in found.decodes]
    (table,) = coverage_tables(decodes, budgets=(BUDGET,))
    return {stopping: tuple(Fraction(x).limit_denominator(64) for x in table.at("draft", "tree", stopping, BUDGET))
            for stopping in PAPER}


def main() -> int:
    figures = binary_figures()
    print(f"{'stopping':<14}{'coverage':>10}{'acceptance':>12}{'shortfall':>11}   the paper")
    for stopping, (cov, acc, short) in figures.items():
        print(f"{stopping:<14}{str(cov):>10}{str(acc):>12}{str(short):>11}   {', '.join(PAPER[stopping])}")
    same = all(tuple(map(str, figures[s])) == PAPER[s] for s in PAPER)
    print(f"every figure equals the paper's: {'yes' if same else 'no'}")
    print(json.dumps({"figures": {s: [str(x) for x in f] for s, f in figures.items()}, "paper": PAPER,
                      "equal": same}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
