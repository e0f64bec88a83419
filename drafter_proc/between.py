"""Between two passes of a pool's growth: take what came meanwhile, and say whether the pool ends there.

A Waiting for the pool being grown gets no reply: without `cut` it lends the drafter every core until it sends
the pool; with `cut` it asks for the pool now (pipeline.cut_policy). Anything else is held, in order, for the
serve loop (protocol.peers), and ends a growth ahead unless it is the Commit that growth predicted."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from drafter_proc.drafter import Abandoned, Drafter
from drafter_proc.request import Request
from protocol.messages import Ahead, Commit, Message, Waiting
from protocol.peers import Peers, peek
from protocol.transport import Received


class Between:
    """The `between` callback of one growth (Drafter.start, commit or ahead): called after each of its passes
    -> whether the pool ends at the levels grown."""

    def __init__(self, peers: Peers, served: bytes | None, request: Request, drafter: Drafter,
                 use_threads: Callable[[bool], None], ahead: Ahead | None = None) -> None:
        self.peers, self.served = peers, served
        self.request, self.drafter, self.use_threads = request, drafter, use_threads
        self.ahead = ahead  # the Ahead whose growth this is; None: a Start's or Commit's

    def __call__(self) -> bool:
        for event in self.peers.arrivals():
            msg = peek(event) if isinstance(event, Received) and event.peer == self.served else None
            if self._for_this_pool(msg):
                self._waiting(msg, event.at)
                continue
            self.peers.hold(event)
            if self.ahead is not None and not self._predicted(msg):
                raise Abandoned
        if self.ahead is not None:
            return bool(self.request.cut_asked)
        now = time.perf_counter()
        self.request.pass_ended(now)
        return self._ends_pool(now)

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
