"""The drafter's serving loop: one target at a time, each Start or Commit answered with the round's pool.

A target is served once its Hello is accepted (drafter_proc.handshake); any other peer is told the drafter is
busy. The served target leaves by Shutdown (the drafter exits, or with `persist` waits for the next) or by
closing its connection (a private drafter, `exit_with_target`, then exits); one silent for `idle_timeout` s is
let go when another peer speaks. A refused message gets an Error reply naming the problem and changes nothing;
one whose answer fails in the model or the pool gets an Error too, its traceback logged (a Commit leaves the
rows as they were, a Start leaves no request open). The one KV cache (models.kv_cache) is replaced only by a
Hello that needs a larger one, never beyond `max_request_context` slots nor what the device holds. Each message
type has its handler (`DrafterServer.handlers`; the request messages' are drafter_proc.session's), and between
a pool's passes drafter_proc.between takes what came meanwhile."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch

from drafter_proc.between import Between
from drafter_proc.drafter import Drafter
from drafter_proc.handshake import check_hello, feature_layers, ready
from drafter_proc.head import HeadDrafter
from drafter_proc.request import Request
from drafter_proc.session import DrafterSession
from models.kv_cache import KVCache
from models.load import Loaded
from pipeline.config import CapacityError
from protocol.codec import MAX_FRAMES, decode
from protocol.errors import BadArray, DrafterBusy, ProtocolError, UnexpectedMessage, printable
from protocol.limits import IDLE_TIMEOUT_S, MAX_TEXT, REQUEST_CONTEXT
from protocol.messages import Ahead, Commit, End, Error, Hello, Message, Ready, Shutdown, Start, Waiting
from protocol.peers import Farewell, Left, Peers, peek, tag
from protocol.transport import Listener, Received

log = logging.getLogger("drafter")

Handler = Callable[[Message, bytes, float], Message | None]  # (message, its sender, its arrival) -> the reply


class DrafterServer:
    def __init__(self, listener: Listener, loaded: Loaded, *, persist: bool = False,
                 exit_with_target: bool = False, max_request_context: int = REQUEST_CONTEXT,
                 threads: tuple[int, int] | None = None, idle_timeout: float = IDLE_TIMEOUT_S) -> None:
        self.peers = Peers(listener)
        self.loaded = loaded
        self.cache = KVCache(loaded, "drafter")  # the one KV cache (and graphs) of this process
        self.max_request_context = max_request_context  # the largest cache a Hello may ask for, in slots
        self.persist = persist  # after a Shutdown, wait for the next target instead of exiting
        self.exit_with_target = exit_with_target  # a private drafter: stop once its target left, however
        self.threads = threads  # CPU threads (while the target works, while it waits for a pool); None: keep
        self.served = False  # whether a target was accepted yet (exit_with_target waits for the first)
        self.peer: bytes | None = None  # the routing id of the target being served
        self.idle_timeout = idle_timeout  # seconds the served target may be silent before another is served
        self.heard = 0.0  # when the served target's last message was answered (time.monotonic)
        self.last_served: bytes | None = None  # the tag of the last served target whose connection closed
        self.session: DrafterSession | None = None  # the served target's, from its Hello
        self.handlers: dict[type[Message], Handler] = {
            Hello: self._hello, Error: self._peer_error, Start: self._in_session(DrafterSession.start),
            Commit: self._in_session(DrafterSession.commit), Ahead: self._in_session(DrafterSession.ahead),
            Waiting: self._in_session(DrafterSession.waiting), End: self._in_session(DrafterSession.end)}

    def serve(self) -> None:
        """Serve until the served target sends Shutdown (with `persist`, forever)."""
        while True:
            event = self.peers.next()
            if isinstance(event, Left):
                self._left(event)
                if self.exit_with_target and self.served and self.peer is None:
                    log.info("the target closed its connection; this drafter served it alone and exits")
                    return
            elif isinstance(event, Farewell):
                # The Shutdown a target sent just before it closed still ends a drafter that exits on one.
                if event.peer == self.last_served and not self.persist:
                    log.info("the target asked to shut down as it left")
                    return
            elif self._busy_for(event):
                self._refuse_busy(event)
            elif self._answer(event):
                return
            if isinstance(event, Received) and self.peer is not None and event.peer == self.peer:
                self.heard = time.monotonic()  # after its answer: the drafter's own work is not the peer's silence

    # -- peers ------------------------------------------------------------------------------------------

    def _left(self, left: Left) -> None:
        if self.peer is not None and left.peer == tag(self.peer):
            self.last_served = left.peer
            log.info("the target closed its connection; ready for the next one")
            self._forget()

    def _busy_for(self, event: Received) -> bool:
        """Whether another target is being served; departures already reported are taken into account first."""
        if self.peer is None or self.peer == event.peer:
            return False
        for left in self.peers.gone_now():
            self._left(left)
        if self.peer is not None and (silent := time.monotonic() - self.heard) > self.idle_timeout:
            log.warning("let go of a target silent for %.1f s (--idle-timeout %g); serving the next one", silent,
                        self.idle_timeout)
            self.last_served = None  # its Shutdown, should one still come, ends nothing
            self._forget()
        return self.peer is not None

    def _refuse_busy(self, event: Received) -> None:
        if isinstance(peek(event), Error):  # never answer an Error: two peers could bounce refusals forever
            return
        self.peers.throttle.warning(log, "busy", "told a second peer that the drafter is busy: it serves a "
                                    "target already")
        self.peers.send(event.peer, Error(DrafterBusy.code, "the drafter serves another target; it serves one "
                                          "at a time (start another drafter, or wait for this one)"))

    def _forget(self) -> None:
        """Drop the served target and its session; the KV cache stays for the next one."""
        self.peer, self.session = None, None

    # -- messages ---------------------------------------------------------------------------------------

    def _answer(self, event: Received) -> bool:
        """Decode and answer one message of the served (or a new) peer -> whether to stop serving."""
        msg, request = None, self._request_id()  # what a refusal names, unless the message names its own
        try:
            if event.count > len(event.frames):  # the transport read no further than the protocol's maximum
                raise BadArray(f"a message has at most {MAX_FRAMES} frames, got {event.count}")
            msg = decode(event.frames)
            if isinstance(msg, Shutdown):  # it ends the serving, not a request: the loop's to answer
                return self._shutdown(event)
            reply = self.handlers.get(type(msg), self._unexpected)(msg, event.peer, event.at)
        except ProtocolError as e:
            self.peers.throttle.warning(log, f"refused {e.code}", "refused a message: %s", e)
            reply = Error(e.code, printable(str(e), MAX_TEXT), getattr(msg, "request", request))
        except CapacityError as e:  # a request this drafter cannot serve: beyond its KV cache or memory
            log.warning("cannot serve request %d: %s", getattr(msg, "request", request), e)
            reply = Error("drafter", str(e), getattr(msg, "request", request))
        except Exception as e:  # a model's or a pool's error: that message is dropped, never the process
            reply = self._failed(msg, e, getattr(msg, "request", request))
        if reply is not None and not self.peers.send(event.peer, reply) and event.peer == self.peer:
            self._forget()  # it left before its reply: serve the next one
            return self.exit_with_target
        return False

    def _failed(self, msg: Message | None, error: Exception, request: int) -> Error:
        """The Error reply to a message whose answer failed, logged with its traceback (a flood of them
        throttled). The session is as it was before the message (DrafterSession.start and commit)."""
        what = f"{type(msg).__name__} of request {request}" if msg is not None else "message"
        self.peers.throttle.log(log, logging.ERROR, "failed", "could not answer the %s: %s: %s", what,
                                type(error).__name__, printable(str(error)), exc_info=error)
        return Error("drafter", printable(f"the drafter could not answer the {what}: {type(error).__name__}: "
                                          f"{error}", MAX_TEXT), request)

    def _shutdown(self, event: Received) -> bool:
        if self.peer is None or self.peer != event.peer:
            raise UnexpectedMessage("Shutdown before the handshake (Hello)")
        if not self.persist:
            return True
        log.info("the target finished; ready for the next one")
        self._forget()
        return False

    def _hello(self, hello: Hello, peer: bytes, arrived: float) -> Ready:
        config = check_hello(hello, self.loaded, self.max_request_context)
        layers = feature_layers(hello, self.loaded)
        self.session = None  # a failed Hello leaves no session behind, and the old cache is freed with it
        runner = self.cache.at_least(hello.capacity + config.n_expanded)  # the context plus one pool's scratch
        drafter = HeadDrafter(runner, config) if layers else Drafter(runner, config)
        self.session = DrafterSession(drafter, self.loaded.vocab_size, self._between, self.use_threads,
                                      hello.feature_dtype if layers else "")
        self.peer, self.served = peer, True
        log.info("handshake with target %s: pool topk=%d depth=%d expand=%d%s", printable(repr(hello.model), 200),
                 config.topk, config.depth, config.expand,
                 f"; an EAGLE-3 head on the inputs of its layers {', '.join(map(str, layers))}" if layers else "")
        return ready(self.loaded, layers)

    def _peer_error(self, msg: Error, peer: bytes, arrived: float) -> None:
        if peer == self.peer:
            log.error("the target reported %s: %s", printable(msg.code, 40), printable(msg.message))
        else:  # a peer without a session may send any number: what it makes us log is bounded
            self.peers.throttle.log(log, logging.ERROR, "peer error", "a peer without a session reported %s: %s",
                                    printable(msg.code, 40), printable(msg.message))

    def _unexpected(self, msg: Message, peer: bytes, arrived: float) -> None:
        self._session(msg)
        raise UnexpectedMessage(f"the drafter does not take {type(msg).__name__} messages")

    def _in_session(self, handle: Callable[[DrafterSession, Message, float], Message | None]) -> Handler:
        """The handler of a request message: `handle` on the served target's session."""
        return lambda msg, peer, arrived: handle(self._session(msg), msg, arrived)

    def _session(self, msg: Message) -> DrafterSession:
        if self.session is None:
            raise UnexpectedMessage(f"{type(msg).__name__} before the handshake (Hello)")
        return self.session

    def _request_id(self) -> int:
        """The open request's id, -1 when none is."""
        return -1 if self.session is None else self.session.position()[0]

    # -- during a growth --------------------------------------------------------------------------------

    def _between(self, request: Request, drafter: Drafter, ahead: Ahead | None) -> Between:
        """The callback a growth calls after each of its passes."""
        return Between(self.peers, self.peer, request, drafter, self.use_threads, ahead)

    def use_threads(self, solo: bool) -> None:
        """The drafter's CPU threads: every core while the target waits for a pool (`solo`), else its own."""
        if self.threads is not None:
            n = self.threads[1] if solo else self.threads[0]
            if torch.get_num_threads() != n:
                torch.set_num_threads(n)
