"""Cut pools (DESIGN.md section 10): how a pool asked for early ends, and whether one more level of it pays
for the wait it makes.

With NOW (DecodeConfig.cut_pools) the target takes the levels grown when it asks, the level in progress ended;
with WEIGH (and DecodeConfig.cut_weigh) it waits for each further level while that level pays: a round of R
seconds (its waits left out) committing tau_k tokens with k levels gains g_{k+1} for w more seconds of waiting,
and pays when g_{k+1} R > tau_k w. From recent Commits (how many levels the committed tokens ran through),
a_j is the chance a round runs through level j once it ran through j - 1, with a prior of PRIOR_ACCEPT weighing
PRIOR_ROUNDS rounds; g_j = a_1 ... a_j and tau_k = 1 + g_1 + ... + g_k."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from pipeline.pool import ROOT, Pool

NOW, WEIGH = 1, 2  # how a target asks for its pool early (Waiting.cut): the levels grown, or more while they pay
PRIOR_ACCEPT = 0.8  # a level's chance of being run through, before rounds show it (optimistic: levels get tried)
PRIOR_ROUNDS = 2.0  # the rounds that prior weighs
ROUNDS_KEPT = 32  # recent rounds a level's chance is counted over


def reached(pool: Pool, tokens: Sequence[int]) -> int:
    """How many levels of `pool` a round's committed `tokens` ran through: the depth of the pool path that the
    tokens, their last one left out (the target's own token after those it accepted), begin with."""
    node, depth = ROOT, 0
    for token in tokens[:-1]:
        child = np.flatnonzero((pool.parent == node) & (pool.token == token))
        if not child.size:
            break
        node, depth = int(child[0]), depth + 1
    return depth


class LevelValues:
    """What each level of a pool brought in recent rounds (see the module docstring)."""

    def __init__(self, kept: int = ROUNDS_KEPT) -> None:
        self.rounds: deque[tuple[int, int]] = deque(maxlen=kept)  # (levels the pool had, levels run through)

    def observe(self, levels: int, through: int) -> None:
        assert 0 <= through <= levels, (through, levels)
        self.rounds.append((levels, through))

    def gains(self, levels: int) -> np.ndarray:
        """(levels,) g_j: the tokens a round gains on average from level j of its pool, j = 1 .. levels."""
        j = np.arange(1, levels + 1)
        seen = np.array(self.rounds, np.int64).reshape(-1, 2)
        had, through = seen[:, :1], seen[:, 1:]
        eligible = (had >= j) & (through >= j - 1)
        ran = eligible & (through >= j)
        accept = (PRIOR_ACCEPT * PRIOR_ROUNDS + ran.sum(0)) / (PRIOR_ROUNDS + eligible.sum(0))
        return np.cumprod(accept)

    def worth(self, levels: int, wait: float, round_seconds: float) -> bool:
        """Whether a pool of `levels` levels should grow one more, when that adds `wait` seconds of waiting to
        a round of `round_seconds` (its waits left out)."""
        gain = self.gains(levels + 1)
        return bool(gain[levels] * round_seconds > (1.0 + gain[:levels].sum()) * wait)
