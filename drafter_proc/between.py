"""Between two passes of a pool's growth: take what came meanwhile, and say whether the pool ends there.

A Waiting for the pool being grown gets no reply: without `cut` it gives the drafter every core until it
sends the pool (the target waits with nothing else to do); with `cut` it asks for the pool now (it ends at
the level in progress, or with WEIGH grows a further level only while that pays, pipeline.cut_policy).
Anything else is stashed, in order, for the serve loop, and ends a growth ahead unless it is the Commit that
growth predicted (drafter_proc.drafter.Abandoned). A committed round's pool also ends before a level that
would end after the time the target asked at in recent rounds (pipeline.cut_policy).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

import numpy as np

from drafter_proc.drafter import Abandoned, Drafter
from drafter_proc.request import Request
from protocol.codec import decode
from protocol.errors import ProtocolError
from protocol.messages import Ahead, Commit, Message, Waiting
from protocol.transport import Left, Listener, Received

STASHED_MAX = 64  # messages taken during one growth, at most: the rest wait in the socket's bounded queue

Stash = deque[tuple[Received | Left, float]]  # events taken during a growth, with their arrival (perf_counter)


def peek(event: Received) -> Message | None:
    """The message an event carries, or None when it does not decode (the serve loop refuses it later)."""
    try:
        return decode(event.frames)
    except ProtocolError:
        return None


class Between:
    """The `between` callback of one growth (Drafter.start, commit or ahead): called after each of its passes
    -> whether the pool ends at the levels grown."""

    def __init__(self, listener: Listener, stashed: Stash, served: bytes | None, request: Request, drafter: Drafter,
                 use_threads: Callable[[bool], None], ahead: Ahead | None = None) -> None:
        self.listener, self.stashed, self.served = listener, stashed, served
        self.request, self.drafter, self.use_threads = request, drafter, use_threads
        self.ahead = ahead  # the Ahead whose growth this is; None: a Start's or Commit's

    def __call__(self) -> bool:
        for event, at in self._arrivals():
            msg = peek(event) if isinstance(event, Received) and event.peer == self.served else None
            if self._for_this_pool(msg):
                self._waiting(msg, at)
                continue
            self.stashed.append((event, at))
            if self.ahead is not None and not self._predicted(msg):
                raise Abandoned
        if self.ahead is not None:
            return bool(self.request.cut_asked)
        now = time.perf_counter()
        self.request.pass_ended(now)
        return self._ends_pool(now)

    def _arrivals(self) -> Iterator[tuple[Received | Left, float]]:
        """What came since the last pass, while the stash has room: the rest waits in the socket's bounded
        queue, which holds its sender back."""
        while len(self.stashed) < STASHED_MAX and (event := self.listener.recv(timeout=0)) is not None:
            yield event, time.perf_counter()

    def _for_this_pool(self, msg: Message | None) -> bool:
        """Whether `msg` is a Waiting for the pool being grown (round `round + 1` of the open request)."""
        return (isinstance(msg, Waiting) and msg.request == self.request.id
                and msg.round == self.request.round + 1)

    def _waiting(self, msg: Waiting, at: float) -> None:
        """The target waits for this pool: it asks for it now (`cut`), or lends its cores until it comes."""
        if msg.cut:
            self.request.cut_asked = msg.cut
            self.request.asked(msg.round, msg.after, msg.cut, at)
        else:
            self.use_threads(True)

    def _predicted(self, msg: Message | None) -> bool:
        """Whether `msg` is the Commit of exactly the tokens the growth ahead was grown from."""
        ahead = self.ahead
        return (isinstance(msg, Commit) and (msg.request, msg.round) == (ahead.request, ahead.round)
                and np.array_equal(msg.tokens, self.drafter.written))

    def _ends_pool(self, now: float) -> bool:
        """The cut-pool decision after a pass: round 0's pool (the target is still in its prefill) ends only
        when asked for; a committed round's as pipeline.cut_policy says."""
        request = self.request
        if request.round < 0:
            return bool(request.cut_asked)
        return request.policy.ends_pool(request.levels, now - request.grown_from, request.cut_asked)
