"""The served target's session on the drafter, made by its Hello: a handler per request message.

A DrafterSession holds the drafter (on the process's one KV cache), what each pool level brought in its recent
rounds (pipeline.cut) and the open Request (drafter_proc.request). It is dropped by the next Hello or when
its target leaves, and its request with it; a Start makes a new request and an End drops it. A message that
names another request or round than the one expected is refused (StaleMessage) and changes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from drafter_proc.between import Between
from drafter_proc.drafter import Drafter
from drafter_proc.head import HeadDrafter, features_of
from drafter_proc.request import Request
from pipeline.ahead import HIT, Drafted
from pipeline.cut import LevelValues
from pipeline.cut_policy import CutPolicy
from pipeline.pool import out_of_vocab
from protocol.errors import BadArray, BadFeatures, StaleMessage, TokenOutOfRange
from protocol.messages import Ahead, Commit, End, PoolMsg, Start, Waiting

BetweenFor = Callable[[Request, Drafter, Ahead | None], Between]  # the between-passes callback of a growth


class DrafterSession:
    """The drafter's side of a session with the target it serves: a handler per request message."""

    def __init__(self, drafter: Drafter | HeadDrafter, vocab_size: int, between: BetweenFor,
                 use_threads: Callable[[bool], None], feature_dtype: str = "") -> None:
        self.drafter = drafter
        self.feature_dtype = feature_dtype  # the Hello's: every Start's and Commit's features keep it
        self.vocab_size = vocab_size  # of the drafter's model: tokens beyond it are refused
        self.between = between
        self.use_threads = use_threads  # every core (True) while the target waits for a pool, else its own
        self.values = LevelValues()  # what each pool level brought, over this session's recent rounds
        self.request: Request | None = None

    def start(self, msg: Start, arrived: float) -> PoolMsg:
        """A new request: round 0's pool from the prompt."""
        self._check_tokens(msg.prompt, "prompt")
        features = self._features(msg)
        self.request = request = Request(msg.request, CutPolicy(self.values))
        request.growing(arrived)
        try:
            drafted = self.drafter.start(msg.prompt, *features, self.between(request, self.drafter, None))
        except BaseException:  # its rows overwrote the request before it: no request is open
            self.request = None
            self.use_threads(False)
            raise
        request.round = 0
        return self._pool_msg(drafted, arrived)

    def commit(self, msg: Commit, arrived: float) -> PoolMsg:
        """The tokens the last round emitted: the next round's pool (or the one grown ahead from them)."""
        request = self._next_round(msg)
        features = self._features(msg)
        request.round_ended(msg.tokens, arrived)
        request.growing(arrived)
        try:  # a drafter that fails keeps its rows as before (Drafter.commit, HeadDrafter.commit): the round
            drafted = self.drafter.commit(msg.tokens, *features, self.between(request, self.drafter, None))
        except BaseException:  # stays the one to commit, and may be sent again
            self.use_threads(False)
            raise
        request.round = msg.round
        return self._pool_msg(drafted, arrived)

    def ahead(self, msg: Ahead, arrived: float) -> None:
        """Grow round `msg.round`'s pool from the predicted tokens, until a message other than the Commit they
        predict (or a Waiting) comes."""
        request = self._next_round(msg)
        self.drafter.ahead(msg.tokens, self.between(request, self.drafter, msg))
        request.ahead_finished = time.perf_counter()

    def waiting(self, msg: Waiting, arrived: float) -> None:
        """A Waiting for a pool already sent (one for the pool being grown is taken between its levels)."""
        open_id, last = self.position()
        if msg.request != open_id or not 0 <= msg.round <= last:
            raise StaleMessage(f"waiting for request {msg.request} round {msg.round}, but the drafter "
                               f"serves request {open_id} round {last}")
        if msg.cut and msg.round == last:
            self.request.asked(msg.round, msg.after, msg.cut, arrived)

    def end(self, msg: End, arrived: float) -> None:
        open_id, _ = self.position()
        if msg.request != open_id or open_id < 0:
            raise StaleMessage(f"end of request {msg.request}, but "
                               + (f"request {open_id} is open" if open_id >= 0 else "no request is open"))
        self.request = None

    def position(self) -> tuple[int, int]:
        """(open request, its last round sent): (-1, -1) when no request is open."""
        return (-1, -1) if self.request is None else (self.request.id, self.request.round)

    def _next_round(self, msg: Commit | Ahead) -> Request:
        """The open request, which a Commit or Ahead must name with its next round."""
        name, (open_id, last) = type(msg).__name__.lower(), self.position()
        if open_id < 0:  # before any Start or after End: (-1, 0) would otherwise match
            raise StaleMessage(f"{name} for request {msg.request} round {msg.round}, but no request is "
                               f"open (Start begins one)")
        if (msg.request, msg.round) != (open_id, last + 1):
            raise StaleMessage(f"{name} for request {msg.request} round {msg.round}, but the drafter "
                               f"expects request {open_id} round {last + 1}")
        self._check_tokens(msg.tokens, "tokens")
        return self.request

    def _features(self, msg: Start | Commit) -> tuple:
        """(the message's features as a (rows, F) tensor,) for an EAGLE-3 drafter, which needs them; () for a
        standalone one, which takes none. Their values were checked as the message was read
        (protocol.messages.check_features); here, that they are what this drafter takes."""
        name = type(msg).__name__
        if not getattr(self.drafter, "wants_features", False):
            if msg.feature_width or msg.features.shape[0]:
                raise BadFeatures(f"the drafter is a standalone model, not an EAGLE-3 head: it takes no features; "
                                  f"the {name} carries {msg.feature_width} values a token")
            return ()
        if isinstance(msg, Start) and msg.prompt.shape[0] < 2:
            raise BadArray("an EAGLE-3 drafter starts from two tokens at least: `prompt` holds one")
        want = self.drafter.runner.feature_width
        if msg.feature_width != want:
            raise BadFeatures(f"the EAGLE-3 drafter takes features of {want} values a token; the {name} carries "
                              f"{msg.feature_width or 'none'}")
        if msg.feature_dtype != self.feature_dtype:
            raise BadFeatures(f"the {name}'s features are {msg.feature_dtype}; the Hello said {self.feature_dtype} "
                              f"(a target's features keep its model's dtype)")
        return (features_of(msg),)

    def _check_tokens(self, tokens: np.ndarray, name: str) -> None:
        if problem := out_of_vocab(tokens, self.vocab_size, name):
            raise TokenOutOfRange(problem)

    def _pool_msg(self, drafted: Drafted, arrived: float) -> PoolMsg:
        """The reply to a Start or Commit. Its seconds run from the message's arrival: the part of the drafting
        the target can have waited for; a pool grown ahead counts what it grew before that arrival apart."""
        self.use_threads(False)  # the target works again once it has the pool
        request, now = self.request, time.perf_counter()
        ahead_seconds = 0.0
        if drafted.ahead == HIT:
            ahead_seconds = max(0.0, drafted.ahead_seconds - max(0.0, request.ahead_finished - arrived))
        pool = drafted.pool
        request.sending(pool, now)
        return PoolMsg(request.id, request.round, now - arrived, drafted.ahead, ahead_seconds,
                       pool.token.astype(np.int32), pool.parent.astype(np.int32), pool.logp, pool.expanded)
