"""When a drafter ends the pool it grows for a committed round (DESIGN.md section 10): seconds in, a decision out.

Asked (`Waiting` with `cut`), a drafter ends the pool at the level in progress (NOW) or grows a level only while
it pays (WEIGH, pipeline.cut); not yet asked, from the second round the target asked in, it ends a pool before a
level that would end after when the target asked in recent rounds. A CutPolicy holds one request's timings and
the session's LevelValues, and knows nothing of clocks, sockets or models."""

from __future__ import annotations

from collections import deque

import numpy as np

from pipeline.cut import NOW, WEIGH, LevelValues

TIMINGS_KEPT = 8  # recent rounds whose timings (when the target asked, a level's pass, a round) cuts weigh


class CutPolicy:
    """One request's cut-pool timings, and the decision made from them between a pool's levels."""

    def __init__(self, values: LevelValues, kept: int = TIMINGS_KEPT) -> None:
        self.values = values  # what each level brought in recent rounds: the session's, across requests
        self.asked_after: deque[float] = deque(maxlen=kept)  # seconds after its Commit the target asked
        self.pass_seconds: deque[float] = deque(maxlen=kept)  # a pass of the drafter's (a level's, mostly)
        self.round_seconds: deque[float] = deque(maxlen=kept)  # a round without its wait for the pool
        self.weigh = False  # the target's last ask said WEIGH: the levels it waits for are weighed

    def asked(self, round: int, after: float, cut: int) -> None:
        """The target asked for round `round`'s pool, `after` seconds after its Commit (round 0's ask is not a
        timing: that round began with the target's prefill of the prompt)."""
        assert cut in (NOW, WEIGH), cut
        self.weigh = cut == WEIGH
        if round > 0:
            self.asked_after.append(after)

    def pass_timed(self, seconds: float) -> None:
        self.pass_seconds.append(seconds)

    def round_ended(self, levels: int, through: int, seconds: float | None) -> None:
        """A round whose pool had `levels` levels, of which the committed tokens ran through `through`, ended
        after `seconds` without its wait for the pool (None: a round not to time, round 0)."""
        self.values.observe(levels, through)
        if seconds is not None:
            self.round_seconds.append(seconds)

    def ends_pool(self, levels: int, elapsed: float, asked: int) -> bool:
        """Whether a committed round's pool of `levels` levels, `elapsed` seconds after its Commit came, ends
        before its next level. asked: the `cut` of the target's ask for this pool (0: it has not asked).
        Asked, the next level makes the target wait a pass; not asked, it makes it wait for what the level
        would end after the time the target asked at in recent rounds."""
        if not self.pass_seconds:
            return bool(asked)
        step = float(np.median(self.pass_seconds))
        if asked:
            wait = step
        elif self.asked_after:
            wait = max(0.0, elapsed + step - float(np.median(self.asked_after)))
        else:
            return False
        if wait == 0.0:
            return False
        if asked == NOW or (not asked and not self.weigh):
            return True
        if not self.round_seconds:  # no round timed yet: what a level is worth cannot be weighed
            return True
        return not self.values.worth(levels, wait, float(np.median(self.round_seconds)))
