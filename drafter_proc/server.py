"""The drafter's serving loop: one target at a time, each Start or Commit answered with the round's pool.

A target becomes the one served when its Hello is accepted; any other peer that speaks meanwhile is told
that the drafter is busy. The served target leaves by Shutdown (the drafter then exits, or with `persist`
waits for the next target) or by closing its connection (the drafter serves the next one). A refused
message gets an Error reply naming the problem, and the loop goes on serving; nothing the drafter holds
changes on a refused message. The drafter keeps one KV cache, replaced only by a Hello that needs a larger
one; it never allocates one beyond `max_request_context` slots, whatever a peer asks, nor one that its
device cannot hold.

Each message type has its handler (`DrafterServer.handlers`): the Hello makes the target's Session, whose
handlers answer the request messages (drafter_proc.session). Between the passes of a pool's growth the
drafter takes what came meanwhile (drafter_proc.between): a Waiting may lend it the target's cores or ask
for the pool now, and a growth ahead lasts until a message other than the Commit it predicts comes; the
rest waits, in order, in `stashed`, and is handled next.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable

import torch

from drafter_proc.between import Between, Stash, peek
from drafter_proc.drafter import Drafter
from drafter_proc.request import Request
from drafter_proc.session import Session
from models.load import Loaded
from models.memory import free_bytes, gib
from models.runner import ModelRunner
from pipeline.config import CapacityError, PoolConfig
from protocol.codec import MAX_FRAMES, decode
from protocol.errors import (BadArray, DrafterBusy, HandshakeMismatch, LimitExceeded, MalformedMessage,
                             ProtocolError, UnexpectedMessage, VersionMismatch, printable)
from protocol.limits import MAX_TEXT, REQUEST_CONTEXT
from protocol.messages import (PROTOCOL_VERSION, Ahead, Commit, End, Error, Hello, Message, Ready, Shutdown, Start,
                               Waiting)
from protocol.transport import Left, Listener, Received

log = logging.getLogger("drafter")

DEPARTED_KEPT = 256  # routing ids of closed connections remembered, to ignore messages they left queued

Handler = Callable[[Message, bytes, float], Message | None]  # (message, its sender, its arrival) -> the reply


def tag(peer: bytes) -> bytes:
    """A fixed-size stand-in for a routing id, which a peer may make as long as a frame: what the drafter
    remembers of a connection costs 16 bytes however long its id."""
    return hashlib.blake2b(peer, digest_size=16).digest()


class DrafterServer:
    def __init__(self, listener: Listener, loaded: Loaded, *, persist: bool = False,
                 exit_with_target: bool = False, max_request_context: int = REQUEST_CONTEXT,
                 threads: tuple[int, int] | None = None) -> None:
        self.listener = listener
        self.loaded = loaded
        self.max_request_context = max_request_context  # the largest cache a Hello may ask for, in slots
        self.persist = persist  # after a Shutdown, wait for the next target instead of exiting
        self.exit_with_target = exit_with_target  # a private drafter: stop once its target left, however
        self.threads = threads  # CPU threads (while the target works, while it waits for a pool); None: keep
        self.served = False  # whether a target was accepted yet (exit_with_target waits for the first)
        self.peer: bytes | None = None  # the routing id of the target being served
        self.connections: dict[int, bytes] = {}  # descriptor -> tag of the routing id, of connections that spoke
        self.departed: deque[bytes] = deque(maxlen=DEPARTED_KEPT)  # tags; ids are never reused in ZeroMQ
        self.last_served: bytes | None = None  # the tag of the last served target whose connection closed
        self.runner: ModelRunner | None = None  # the one KV cache (and graphs) of this process
        self.session: Session | None = None  # the served target's, from its Hello
        self.stashed: Stash = deque()  # what came during a growth, with its arrival (perf_counter), to handle next
        self.handlers: dict[type[Message], Handler] = {
            Hello: self._hello, Error: self._peer_error, Start: self._in_session(Session.start),
            Commit: self._in_session(Session.commit), Ahead: self._in_session(Session.ahead),
            Waiting: self._in_session(Session.waiting), End: self._in_session(Session.end)}

    def serve(self) -> None:
        """Serve until the served target sends Shutdown (with `persist`, forever)."""
        while True:
            event, arrived = self.stashed.popleft() if self.stashed else (self.listener.recv(), time.perf_counter())
            if isinstance(event, Left):
                self._departed(event.fd)
                if self.exit_with_target and self.served and self.peer is None:
                    log.info("the target closed its connection; this drafter served it alone and exits")
                    return
                continue
            if (peer := tag(event.peer)) in self.departed:
                # The transport reports a departure before the messages still queued from that connection:
                # the Shutdown a target sent just before it closed still ends a drafter that exits on one.
                if peer == self.last_served and not self.persist and _is_shutdown(event):
                    log.info("the target asked to shut down as it left")
                    return
                log.debug("ignored a message a closed connection left queued")
                continue
            # A descriptor is reused only after its connection closed, and the monitor reports that first.
            self.connections[event.fd] = peer
            if self._busy_for(event):
                self._refuse_busy(event)
            elif self._answer(event, arrived):
                return

    def _departed(self, fd: int) -> None:
        peer = self.connections.pop(fd, None)
        if peer is None:
            return  # a connection that never spoke (a failed secure handshake, say)
        self.departed.append(peer)
        if self.peer is not None and peer == tag(self.peer):
            self.last_served = peer
            log.info("the target closed its connection; ready for the next one")
            self._forget()

    def _busy_for(self, event: Received) -> bool:
        """Whether another target is being served; departures already queued are taken into account first."""
        if self.peer is None or self.peer == event.peer:
            return False
        for fd in self.listener.departures():
            self._departed(fd)
        return self.peer is not None

    def _refuse_busy(self, event: Received) -> None:
        if isinstance(peek(event), Error):  # never answer an Error: two peers could bounce refusals forever
            return
        self.listener.throttle.warning(log, "busy", "told a second peer that the drafter is busy: it serves a "
                                       "target already")
        self.listener.send(event.peer, Error(DrafterBusy.code, "the drafter serves another target; it serves one "
                                             "at a time (start another drafter, or wait for this one)"))

    def _answer(self, event: Received, arrived: float) -> bool:
        """Decode and answer one message of the served (or a new) peer -> whether to stop serving."""
        msg, request = None, self._request_id()  # what a refusal names, unless the message names its own
        try:
            if event.count > len(event.frames):  # the transport read no further than the protocol's maximum
                raise BadArray(f"a message has at most {MAX_FRAMES} frames, got {event.count}")
            msg = decode(event.frames)
            if isinstance(msg, Shutdown):  # it ends the serving, not a request: the loop's to answer
                return self._shutdown(event)
            reply = self.handlers.get(type(msg), self._unexpected)(msg, event.peer, arrived)
        except ProtocolError as e:
            self.listener.throttle.warning(log, f"refused {e.code}", "refused a message: %s", e)
            reply = Error(e.code, printable(str(e), MAX_TEXT), getattr(msg, "request", request))
        except CapacityError as e:  # a request this drafter cannot serve: beyond its KV cache or memory
            log.warning("cannot serve request %d: %s", getattr(msg, "request", request), e)
            reply = Error("drafter", str(e), getattr(msg, "request", request))
        if reply is not None and not self.listener.send(event.peer, reply) and event.peer == self.peer:
            self._forget()  # it left before its reply: serve the next one
            return self.exit_with_target
        return False

    def _shutdown(self, event: Received) -> bool:
        if self.peer is None or self.peer != event.peer:
            raise UnexpectedMessage("Shutdown before the handshake (Hello)")
        if not self.persist:
            return True
        log.info("the target finished; ready for the next one")
        self._forget()
        return False

    def _forget(self) -> None:
        """Drop the served target and its session; the KV cache stays for the next one."""
        self.peer, self.session = None, None

    def _request_id(self) -> int:
        """The open request's id, -1 when none is."""
        return -1 if self.session is None else self.session.position()[0]

    def _in_session(self, handle: Callable[[Session, Message, float], Message | None]) -> Handler:
        """The handler of a request message: `handle` on the served target's session."""
        return lambda msg, peer, arrived: handle(self._session(msg), msg, arrived)

    def _session(self, msg: Message) -> Session:
        if self.session is None:
            raise UnexpectedMessage(f"{type(msg).__name__} before the handshake (Hello)")
        return self.session

    def _hello(self, hello: Hello, peer: bytes, arrived: float) -> Ready:
        config = check_hello(hello, self.loaded, self.max_request_context)
        self.session = None  # a failed Hello leaves no session behind
        runner = self._runner(hello.capacity + config.n_expanded)  # committed context plus one pool's scratch
        self.session = Session(Drafter(runner, config), self.loaded.vocab_size, self._between, self.use_threads)
        self.peer, self.served = peer, True
        log.info("handshake with target %s: pool topk=%d depth=%d expand=%d", printable(repr(hello.model), 200),
                 config.topk, config.depth, config.expand)
        who, tok = self.loaded.identity, self.loaded.tokenizer
        kernels = json.dumps(who["linear_kernels"], sort_keys=True) if "linear_kernels" in who else ""
        return Ready(PROTOCOL_VERSION, self.loaded.vocab_size, tok.fingerprint, self.loaded.name, who["revision"],
                     who["dtype"], who["device"], kernels)

    def _peer_error(self, msg: Error, peer: bytes, arrived: float) -> None:
        log.error("the target reported %s: %s", printable(msg.code, 40), printable(msg.message))

    def _unexpected(self, msg: Message, peer: bytes, arrived: float) -> None:
        self._session(msg)
        raise UnexpectedMessage(f"the drafter does not take {type(msg).__name__} messages")

    def _between(self, request: Request, drafter: Drafter, ahead: Ahead | None) -> Between:
        """The callback a growth calls after each of its passes."""
        return Between(self.listener, self.stashed, self.peer, request, drafter, self.use_threads, ahead)

    def use_threads(self, solo: bool) -> None:
        """The drafter's CPU threads: every core while the target waits for a pool (`solo`), else its own."""
        if self.threads is not None:
            n = self.threads[1] if solo else self.threads[0]
            if torch.get_num_threads() != n:
                torch.set_num_threads(n)

    def _runner(self, capacity: int) -> ModelRunner:
        """The KV cache: the one held when it is large enough, else a larger one in its place (the old one is
        freed first). CapacityError when the device cannot hold it."""
        if self.runner is not None and self.runner.capacity >= capacity:
            return self.runner
        device = self.loaded.device
        held = 0 if self.runner is None else self.loaded.kv_bytes(self.runner.capacity)
        need, free = self.loaded.kv_bytes(capacity), free_bytes(device) + held
        if need > free:
            raise CapacityError(f"the drafter cannot allocate a KV cache of {capacity} slots: it needs {gib(need)} "
                                f"and {device} has {gib(free)} free (lower `max_context`)")
        self.runner = None
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        try:
            self.runner = self.loaded.runner(capacity)
        except (MemoryError, RuntimeError) as e:
            if not out_of_memory(e):  # graph capture and the like fail with their own message
                raise
            raise CapacityError(f"the drafter cannot allocate a KV cache of {capacity} slots (lower "
                                f"`max_context`): {type(e).__name__}: {e}") from None
        return self.runner


def check_hello(hello: Hello, loaded: Loaded, max_request_context: int) -> PoolConfig:
    """The pool configuration of a Hello this drafter accepts; the ProtocolError naming what it cannot."""
    if hello.version != PROTOCOL_VERSION:
        raise VersionMismatch(f"target speaks protocol {hello.version}, drafter {PROTOCOL_VERSION}")
    tok = loaded.tokenizer
    if hello.vocab_size != loaded.vocab_size or hello.fingerprint != tok.fingerprint:
        raise HandshakeMismatch(
            f"target {printable(repr(hello.model), 200)} (vocabulary {hello.vocab_size}, tokenizer "
            f"{printable(hello.fingerprint, 100)}) and drafter {loaded.name!r} (vocabulary "
            f"{loaded.vocab_size}, tokenizer {tok.fingerprint}) do not share a tokenizer")
    try:
        config = PoolConfig(hello.topk, hello.depth, hello.expand)
    except ValueError as e:
        raise MalformedMessage(f"Hello carries an invalid pool configuration: {e}") from None
    if config.topk > loaded.vocab_size:
        raise LimitExceeded(f"`topk` {config.topk} is beyond the drafter's vocabulary of {loaded.vocab_size}")
    if hello.capacity < 2:
        raise MalformedMessage(f"Hello.capacity must be at least 2, got {hello.capacity}")
    if hello.capacity > max_request_context:  # what any authorized peer may make this process take
        raise LimitExceeded(f"`capacity` {hello.capacity} is beyond this drafter's {max_request_context} KV "
                            f"slots (its --max-request-context): lower the target's --max-context, or start "
                            f"the drafter with a larger --max-request-context")
    return config


def _is_shutdown(event: Received) -> bool:
    return event.count == len(event.frames) and isinstance(peek(event), Shutdown)


def out_of_memory(error: BaseException) -> bool:
    """Whether an allocation failed for lack of memory: torch raises OutOfMemoryError on CUDA and a plain
    RuntimeError from its CPU allocator."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "memory" in str(error) and "alloc" in str(error).lower())
