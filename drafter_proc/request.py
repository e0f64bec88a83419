"""One request's state on the drafter: its rounds, the growth being answered and its cut-pool timings.

A Request is made by a Start and dropped by that request's End, or with its DrafterSession (drafter_proc.session);
nothing of it is reset anywhere else: a new request gets a new object."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.cut import reached
from pipeline.cut_policy import CutPolicy
from pipeline.pool import Pool


@dataclass(slots=True)
class Request:
    """One request: its rounds, the growth being answered and its cut-pool timings (pipeline.cut_policy).
    Times are perf_counter seconds."""

    id: int  # as the Start named it (a negative id opens no request that a Commit or End can name)
    policy: CutPolicy
    round: int = -1  # the last round whose pool was sent; -1 while round 0's is grown
    grown_from: float = 0.0  # when the growth being answered began: its Start's or Commit's arrival
    level_ended: float | None = None  # when its last pass ended (None: none yet)
    levels: int = 0  # levels it has grown
    cut_asked: int = 0  # the `cut` of a Waiting that came for the pool being grown (0: none came)
    asked_at: float | None = None  # when the target asked for the round's pool (None: it did not, or not yet)
    sent: tuple[Pool, float] | None = None  # the last pool sent, and when
    ahead_finished: float = 0.0  # when the last growth ahead ended

    def growing(self, at: float) -> None:
        """A Start's or Commit's pool is grown from `at` (the message's arrival)."""
        self.grown_from, self.level_ended, self.levels = at, None, 0

    def pass_ended(self, now: float) -> None:
        """A pass of the growth ended at `now`: the commit's prefill (the first) or a level's. Each is timed
        but a prompt's prefill (round 0's first)."""
        if self.level_ended is not None or self.round >= 0:
            self.policy.pass_timed(now - (self.grown_from if self.level_ended is None else self.level_ended))
        self.level_ended = now
        self.levels += 1

    def asked(self, round: int, after: float, cut: int, at: float) -> None:
        """The target asked for round `round`'s pool at `at`, `after` seconds after its Commit."""
        if self.asked_at is None:
            self.asked_at = at
        self.policy.asked(round, after, cut)

    def round_ended(self, tokens: np.ndarray, at: float) -> None:
        """A Commit of `tokens` came at `at`: the round before it ended. When the target asked for that round's
        pool (a round with a tree, in a decode that cuts pools), what the pool's levels brought and how long
        the round took without its wait for the pool count for the cuts after it."""
        if self.asked_at is not None and self.sent is not None:
            pool, sent_at = self.sent
            seconds = at - self.grown_from - max(0.0, sent_at - self.asked_at)
            self.policy.round_ended(int(pool.depth.max()), reached(pool, tokens),
                                    seconds if self.round > 0 else None)  # round 0 began with the prefill
        self.asked_at, self.sent = None, None

    def sending(self, pool: Pool, now: float) -> None:
        """The pool of the growth being answered leaves at `now`."""
        self.sent = (pool, now)
        self.cut_asked = 0
