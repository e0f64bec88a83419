"""The target's side of the wire: a DrafterClient that talks to the drafter process."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from pipeline.config import InputError, PoolConfig
from pipeline.pool import InvalidPool, Pool, out_of_vocab
from protocol.errors import (AccessDenied, DrafterBusy, HandshakeMismatch, InvalidPoolMessage, MalformedMessage,
                             PeerError, ProtocolError, StaleMessage, TokenOutOfRange, UnexpectedMessage,
                             VersionMismatch, printable)
from pipeline.ahead import Drafted
from protocol.messages import (PROTOCOL_VERSION, Ahead, Commit, End, Error, Hello, Message, PoolMsg, Ready,
                               Shutdown, Start, Waiting)
from protocol.transport import Channel

log = logging.getLogger("target")

REFUSALS = {"version": VersionMismatch, "mismatch": HandshakeMismatch, "busy": DrafterBusy}  # Error code -> type
# A drafter learns that its last target left a moment after the connection closed: a Hello in that moment is told
# `busy`. Such a Hello is sent again, every BUSY_PAUSE_S, for up to BUSY_RETRY_S before DrafterBusy is raised.
BUSY_RETRY_S = 1.0
BUSY_PAUSE_S = 0.05


def ask_while_busy(ask: Callable[[], Message | None], retry: float = BUSY_RETRY_S) -> Message | None:
    """ask() (send a request, return the reply) again every BUSY_PAUSE_S while the reply is a `busy` Error,
    for up to `retry` s -> the last reply."""
    until = time.monotonic() + retry
    while True:
        reply = ask()
        if not (isinstance(reply, Error) and reply.code == DrafterBusy.code and time.monotonic() < until):
            return reply
        log.debug("the drafter is busy; asking again in %.0f ms", BUSY_PAUSE_S * 1e3)
        time.sleep(BUSY_PAUSE_S)


class UnsendableHello(InputError):
    """This target's own settings are beyond what the protocol carries."""


class RemoteDrafter:
    """DrafterClient over a Channel. Every received message is checked before it is used."""

    def __init__(self, channel: Channel, vocab_size: int, pool: PoolConfig, timeout: float) -> None:
        self.channel = channel
        self.vocab_size = vocab_size
        self.pool_config = pool
        self.timeout = timeout
        self.request = 0
        self.round = 0
        self.asked = 0  # pools asked for and not yet received: those of an abandoned request are drained
        self.cut_asked = False  # the current round's pool was asked for early: it may be a cut pool
        self.sent_at = 0.0  # when the current round's Start or Commit was sent (perf_counter)
        self.wants_features = False  # the drafter is an EAGLE-3 head (its Ready names the layers it takes)

    def handshake(self, model: str, fingerprint: str, capacity: int, timeout: float,
                  busy_retry: float = BUSY_RETRY_S, shape: tuple[int, int] = (0, 0),
                  feature_dtype: str = "float32") -> Ready:
        """Hello -> Ready; raises VersionMismatch or HandshakeMismatch naming both models, DrafterBusy when the
        drafter still serves another target after `busy_retry` s. shape: the target's (hidden size, layers),
        which an EAGLE-3 drafter checks its head against ((0, 0): a target without layers); feature_dtype: its
        model's, which every Start's and Commit's features then keep."""
        c = self.pool_config
        hello = Hello(PROTOCOL_VERSION, self.vocab_size, fingerprint, model, c.topk, c.depth, c.expand, capacity,
                      *shape, feature_dtype)
        try:
            hello.check()
        except ProtocolError as e:  # the target's own options: the user can change them
            raise UnsendableHello(str(e)) from None
        def ask() -> Ready | Error:
            self.channel.send(hello)
            return self._recv(timeout, "ready_timeout", "handshake", (Ready, Error))

        reply = ask_while_busy(ask, busy_retry)
        if isinstance(reply, Error):
            raise refusal(reply)
        try:
            if reply.version != PROTOCOL_VERSION:
                raise VersionMismatch(f"drafter speaks protocol {reply.version}, target {PROTOCOL_VERSION}")
            if reply.vocab_size != self.vocab_size or reply.fingerprint != fingerprint:
                raise HandshakeMismatch(
                    f"target {model!r} (vocabulary {self.vocab_size}, tokenizer {fingerprint}) and drafter "
                    f"{printable(repr(reply.model), 200)} (vocabulary {reply.vocab_size}, tokenizer "
                    f"{printable(reply.fingerprint, 100)}) do not share a tokenizer")
        except ProtocolError as e:
            self._refuse(e)
            raise
        layers = reply.layers()
        if shape[1] and any(i >= shape[1] for i in layers):  # what the target would keep: its own layers only
            error = MalformedMessage(f"the drafter asks for the inputs of layers {list(layers)}; the target has "
                                     f"{shape[1]}")
            self._refuse(error)
            raise error
        self.wants_features = bool(layers)
        return reply

    def start(self, prompt: Sequence[int], features: torch.Tensor | None = None) -> None:
        self._drain()
        self._check_quiet("Start")
        self.request += 1
        self.round = 0
        self.cut_asked = False
        self.channel.send(Start(self.request, np.asarray(prompt, np.int32), *feature_fields(features)))
        self.sent_at = time.perf_counter()
        self.asked = 1

    def commit(self, tokens: Sequence[int], features: torch.Tensor | None = None) -> None:
        self._check_quiet("Commit")
        self.round += 1
        self.channel.send(Commit(self.request, self.round, np.asarray(tokens, np.int32), *feature_fields(features)))
        self.sent_at = time.perf_counter()
        self.asked += 1

    def ahead(self, tokens: Sequence[int]) -> None:
        """The tokens this round will most probably emit: the drafter grows the next pool from them meanwhile."""
        self.channel.send(Ahead(self.request, self.round + 1, np.asarray(tokens, np.int32)))

    def waiting(self, cut: int = 0) -> None:
        """This side waits for the current round's pool with nothing else to do (the drafter may take its cores); with
        `cut` (pipeline.cut's WEIGH or NOW), it asks for the pool now (a cut pool: its first levels)."""
        self.channel.send(Waiting(self.request, self.round, cut, time.perf_counter() - self.sent_at))
        self.cut_asked = self.cut_asked or bool(cut)

    def pool(self) -> Drafted:
        msg = self._recv(self.timeout, "drafter_timeout", "pool", (PoolMsg, Error))
        self.asked -= 1
        cut, self.cut_asked = self.cut_asked, False
        try:
            if isinstance(msg, Error):
                raise PeerError(msg.code, msg.message)
            if (msg.request, msg.round) != (self.request, self.round):
                raise StaleMessage(f"pool for request {msg.request} round {msg.round}, but the target waits "
                                   f"for request {self.request} round {self.round}")
            if problem := out_of_vocab(msg.token, self.vocab_size, "pool token"):
                raise TokenOutOfRange(problem)
            try:
                pool = Pool.from_edges(msg.token, msg.parent, msg.logp, msg.expanded,
                                       max_depth=self.pool_config.depth)
            except InvalidPool as e:
                raise InvalidPoolMessage(f"pool for round {msg.round}: {e}") from None
            if problem := shape_problem(pool, self.pool_config, cut):
                raise InvalidPoolMessage(f"pool for round {msg.round}: {problem}")
        except ProtocolError as e:
            self._refuse(e)
            raise
        return Drafted(pool, msg.seconds, msg.ahead, msg.ahead_seconds)

    def has_pool(self) -> bool:
        return self.channel.pending()

    def end(self) -> None:
        self.channel.send(End(self.request))

    def _drain(self) -> None:
        """Receive and drop the pools a request abandoned midway still has coming (a decode interrupted by
        KeyboardInterrupt, say), so that the next request starts on a quiet channel. Only replies to that
        request are dropped: anything else is refused as ever."""
        while self.asked:
            msg = self._recv(self.timeout, "drafter_timeout", "pool of an interrupted request", (PoolMsg, Error))
            self.asked -= 1
            if getattr(msg, "request", None) != self.request:
                error = StaleMessage(f"{type(msg).__name__} for request {getattr(msg, 'request', '?')}, but the "
                                     f"interrupted request {self.request} is the one with replies to come")
                self._refuse(error)
                raise error

    def shutdown(self) -> None:
        self.channel.send(Shutdown())

    def _check_quiet(self, before: str) -> None:
        """Every drafter message answers one of ours; one waiting before we ask is unsolicited."""
        if not self.channel.pending():
            return
        msg = self._recv(0, "drafter_timeout", "message", None)
        if isinstance(msg, Error):
            raise PeerError(msg.code, msg.message)
        error = UnexpectedMessage(f"the drafter sent a {type(msg).__name__} before this side's {before}, "
                                  f"unasked")
        self._refuse(error)
        raise error

    def _recv(self, timeout, setting, what, expect):
        try:
            return self.channel.recv(timeout, setting, what, expect)
        except ProtocolError as e:
            self._refuse(e)
            raise

    def _refuse(self, error: ProtocolError) -> None:
        """Tell the drafter why its message was refused (it logs it); never let this mask the error. A refused
        connection (AccessDenied) has no drafter to tell, and a drafter's own Error gets no answer."""
        if not isinstance(error, (PeerError, AccessDenied)):
            try:
                self.channel.send(Error(error.code, str(error), self.request))
            except Exception as e:  # the peer may be gone; the original error is what matters
                log.debug("could not send the error reply: %s", e)


def refusal(reply: Error) -> ProtocolError:
    """The error a drafter's refusal of the Hello raises here. A drafter of another protocol version that reads
    the Hello's fields before its version (those before version 8 did) refuses them as malformed: said as the
    version mismatch it is."""
    if reply.code == MalformedMessage.code and reply.message.startswith("Hello needs fields"):
        return VersionMismatch(f"the drafter cannot read this target's Hello, of protocol {PROTOCOL_VERSION}: it "
                               f"speaks another version (it said: {printable(reply.message, 300)})")
    kind = REFUSALS.get(reply.code)
    return kind(printable(reply.message)) if kind else PeerError(reply.code, reply.message)


def feature_fields(features: torch.Tensor | None) -> tuple:
    """(n, F) features in the model's dtype -> a Start's or Commit's (bytes, dtype, width); () for none.
    A host read of the rows: a sync when they are on a GPU."""
    if features is None:
        return ()
    rows = features.detach().contiguous().cpu()
    raw = rows.view(torch.uint8).reshape(-1).numpy()  # bfloat16 has no numpy type: its bytes travel as they are
    return raw, str(rows.dtype).removeprefix("torch."), int(rows.shape[1])


def shape_problem(pool: Pool, config: PoolConfig, cut: bool = False) -> str | None:
    """Why a valid trie is not a full pool of the handshake's configuration: topk children at the root and
    under each expanded candidate, expand candidates expanded at every level but the deepest, depth levels
    (with `cut`, the target asked for the pool early: its first 1 to depth levels). None when it is one."""
    levels = np.bincount(pool.depth)[1:]  # candidates per depth
    depth = min(len(levels), config.depth) if cut and len(levels) else config.depth
    want = [config.topk] + [config.expand * config.topk] * (depth - 1)
    if levels.tolist() != want:
        return (f"{pool.token.shape[0]} candidates on levels of {levels.tolist()[:8]}; the handshake's pool (topk "
                f"{config.topk}, depth {config.depth}, expand {config.expand}) has {config.size} on levels of "
                f"{want[:8]}" + (" (or their first levels, asked for early)" if cut else ""))
    expanded = np.bincount(pool.depth[pool.expanded], minlength=depth + 1)[1:]
    if expanded.tolist() != [config.expand] * (depth - 1) + [0]:
        return f"expanded candidates per level {expanded.tolist()[:8]}, not {config.expand} above the deepest"
    children = np.bincount(pool.parent[pool.parent >= 0], minlength=len(pool))[pool.expanded]
    if np.any(children != config.topk):
        return f"an expanded candidate has {int(children[children != config.topk][0])} children, not {config.topk}"
    return None
