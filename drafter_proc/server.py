"""The drafter's serving loop: one target at a time, each Start or Commit answered with the round's pool.

A target becomes the one served when its Hello is accepted; any other peer that speaks meanwhile is told
that the drafter is busy. The served target leaves by Shutdown (the drafter then exits, or with `persist`
waits for the next target) or by closing its connection (the drafter serves the next one). A refused
message gets an Error reply naming the problem, and the loop goes on serving; nothing the drafter holds
changes on a refused message. The drafter keeps one KV cache, replaced only by a Hello that needs a larger
one; it never allocates one beyond `max_request_context` slots, whatever a peer asks, nor one that its
device cannot hold.

Between the levels of a pool's growth the drafter looks for the next message. A Waiting (no reply) says the
target waits for this pool with nothing else to do: on a shared CPU the drafter then takes every core until it
sends the pool, and a Waiting with `cut` asks for the pool now: it ends at the level in progress, or with
`cut` WEIGH grows a further level only while what the level brings outweighs the wait it adds (pipeline.cut).
From the second round a request's target asked so in (it asks every round, once its root pass is done), the
drafter also ends a committed round's pool before a level that would end after the time the target asked at in
recent rounds, counted from their Commits, so that the pool is there when asked for (with WEIGH, unless the
level pays for the wait). An Ahead (no reply) has the drafter grow the next round's pool from the predicted
tokens at once; the Commit the prediction serves lets that growth go on (its reply is that pool), and any
other message ends it. Other messages wait until the growth is done and are then handled as ever.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import time
from collections import deque

import numpy as np
import torch

from drafter_proc.drafter import Abandoned, Drafter
from models.memory import device_of, free_bytes, gib, kv_bytes
from models.load import Loaded
from pipeline.config import CapacityError, PoolConfig
from pipeline.cut import NOW, WEIGH, LevelValues, reached
from pipeline.pool import Pool, out_of_vocab
from protocol.codec import MAX_FRAMES, decode
from protocol.errors import (BadArray, DrafterBusy, HandshakeMismatch, LimitExceeded, MalformedMessage,
                             ProtocolError, StaleMessage, TokenOutOfRange, UnexpectedMessage, VersionMismatch,
                             printable)
from pipeline.ahead import HIT, Drafted
from protocol.limits import MAX_TEXT, REQUEST_CONTEXT
from protocol.messages import (PROTOCOL_VERSION, Ahead, Commit, End, Error, Hello, Message, PoolMsg, Ready,
                               Shutdown, Start, Waiting)
from protocol.transport import Left, Listener, Received

log = logging.getLogger("drafter")


STASHED_MAX = 64  # messages taken during one growth, at most: the rest wait in the socket's bounded queue
TIMINGS_KEPT = 8  # recent rounds whose timings (when the target asked, a level's pass, a round) cuts weigh
DEPARTED_KEPT = 256  # routing ids of closed connections remembered, to ignore messages they left queued


def tag(peer: bytes) -> bytes:
    """A fixed-size stand-in for a routing id, which a peer may make as long as a frame: what the drafter
    remembers of a connection costs 16 bytes however long its id."""
    return hashlib.blake2b(peer, digest_size=16).digest()


def _is_shutdown(event: Received) -> bool:
    try:
        return event.count == len(event.frames) and isinstance(decode(event.frames), Shutdown)
    except ProtocolError:
        return False


class DrafterServer:
    def __init__(self, listener: Listener, loaded: Loaded, *, persist: bool = False,
                 exit_with_target: bool = False, max_request_context: int = REQUEST_CONTEXT,
                 threads: tuple[int, int] | None = None) -> None:
        self.listener = listener
        self.loaded = loaded
        self.max_request_context = max_request_context  # the largest cache a Hello may ask for, in slots
        self.persist = persist  # after a Shutdown, wait for the next target instead of exiting
        self.exit_with_target = exit_with_target  # a private drafter: stop once its target left, however
        self.served = False  # whether a target was accepted yet (exit_with_target waits for the first)
        self.peer: bytes | None = None  # the routing id of the target being served
        self.connections: dict[int, bytes] = {}  # descriptor -> tag of the routing id, of connections that spoke
        self.departed: deque[bytes] = deque(maxlen=DEPARTED_KEPT)  # tags; ids are never reused in ZeroMQ
        self.last_served: bytes | None = None  # the tag of the last served target whose connection closed
        self.runner = None  # the one KV cache (and graphs) of this process
        self.drafter: Drafter | None = None
        self.request = -1
        self.round = -1
        # What came while a pool was grown ahead, to handle next, and when (perf_counter); `arrived`: when the
        # event being handled came.
        self.stashed: deque[tuple[Received | Left, float]] = deque()
        self.arrived = 0.0
        self.threads = threads  # CPU threads (while the target works, while it waits for a pool); None: keep
        self.ahead_finished = 0.0  # when the last pool grown ahead was done (perf_counter)
        self.cut_asked = 0  # the `cut` of a Waiting that came for the pool being grown (0: none came)
        self.cut_weigh = False  # the target's last Waiting with `cut` said WEIGH: levels it waits for, weighed
        # Cut pools (pipeline.cut): when the growth being answered began (its Start's or Commit's arrival),
        # when its last level ended and how many it grew; when the target asked for the round's pool (None:
        # it did not, or not yet) and when and which pool was sent; of recent rounds of this request how
        # long after its Commit the target asked for the pool, how long a level's pass took and a round
        # took without its wait for the pool (seconds); and what each level brought in recent rounds.
        self.grown_from = 0.0
        self.level_ended: float | None = None
        self.levels = 0
        self.asked_at: float | None = None
        self.sent: tuple[Pool, float] | None = None
        self.asked_after: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self.pass_seconds: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self.round_seconds: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self.values = LevelValues()

    def serve(self) -> None:
        """Serve until the served target sends Shutdown (with `persist`, forever)."""
        while True:
            if self.stashed:
                event, self.arrived = self.stashed.popleft()
            else:
                event, self.arrived = self.listener.recv(), time.perf_counter()
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
            elif self._answer(event):
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
        try:
            msg = decode(event.frames)
        except ProtocolError:
            msg = None
        if isinstance(msg, Error):  # never answer an Error: two peers could bounce refusals forever
            return
        self.listener.throttle.warning(log, "busy", "told a second peer that the drafter is busy: it serves a "
                                       "target already")
        self.listener.send(event.peer, Error(DrafterBusy.code, "the drafter serves another target; it serves one "
                                             "at a time (start another drafter, or wait for this one)"))

    def _answer(self, event: Received) -> bool:
        """Decode and answer one message of the served (or a new) peer -> whether to stop serving."""
        msg = None
        try:
            if event.count > len(event.frames):  # the transport read no further than the protocol's maximum
                raise BadArray(f"a message has at most {MAX_FRAMES} frames, got {event.count}")
            msg = decode(event.frames)
            if isinstance(msg, Shutdown):
                return self._shutdown(event)
            reply = self.handle(msg)
            if isinstance(msg, Hello):
                self.peer = event.peer
                self.served = True
        except ProtocolError as e:
            self.listener.throttle.warning(log, f"refused {e.code}", "refused a message: %s", e)
            reply = Error(e.code, printable(str(e), MAX_TEXT), _request_of(msg, self.request))
        except CapacityError as e:  # a request this drafter cannot serve: beyond its KV cache or memory
            log.warning("cannot serve request %d: %s", _request_of(msg, self.request), e)
            reply = Error("drafter", str(e), _request_of(msg, self.request))
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
        """Drop the served target's session; the KV cache stays for the next one."""
        self.peer, self.drafter = None, None
        self.request, self.round = -1, -1

    def handle(self, msg: Message) -> Message | None:
        if isinstance(msg, Hello):
            return self._hello(msg)
        if isinstance(msg, Error):
            log.error("the target reported %s: %s", printable(msg.code, 40), printable(msg.message))
            return None
        if self.drafter is None:
            raise UnexpectedMessage(f"{type(msg).__name__} before the handshake (Hello)")
        if isinstance(msg, Start):
            self._check_tokens(msg.prompt, "prompt")
            self.request, self.round = msg.request, -1
            for timings in (self.asked_after, self.pass_seconds, self.round_seconds):
                timings.clear()
            self.asked_at, self.sent, self.cut_weigh = None, None, False
            self._growing()
            drafted = self.drafter.start(msg.prompt, lambda: self._between(None))
            self.round = 0
            return self._pool_msg(drafted)
        if isinstance(msg, (Commit, Ahead)):
            name = type(msg).__name__.lower()
            if self.request < 0:  # before any Start or after End: (-1, 0) would otherwise match
                raise StaleMessage(f"{name} for request {msg.request} round {msg.round}, but no request is "
                                   f"open (Start begins one)")
            if (msg.request, msg.round) != (self.request, self.round + 1):
                raise StaleMessage(f"{name} for request {msg.request} round {msg.round}, but the drafter "
                                   f"expects request {self.request} round {self.round + 1}")
            self._check_tokens(msg.tokens, "tokens")
            if isinstance(msg, Ahead):
                self._ahead(msg)
                return None
            self._round_ended(msg.tokens)
            self._growing()
            drafted = self.drafter.commit(msg.tokens, lambda: self._between(None))
            self.round = msg.round
            return self._pool_msg(drafted)
        if isinstance(msg, Waiting):  # its pool was sent before it came
            if msg.request != self.request or not 0 <= msg.round <= self.round:
                raise StaleMessage(f"waiting for request {msg.request} round {msg.round}, but the drafter "
                                   f"serves request {self.request} round {self.round}")
            if msg.cut and msg.round == self.round:
                self._asked(msg, self.arrived)
            return None
        if isinstance(msg, End):
            if msg.request != self.request or self.request < 0:
                raise StaleMessage(f"end of request {msg.request}, but "
                                   + (f"request {self.request} is open" if self.request >= 0 else "no request is open"))
            self.request, self.round = -1, -1
            self.asked_at, self.sent = None, None
            return None
        raise UnexpectedMessage(f"the drafter does not take {type(msg).__name__} messages")

    def _hello(self, hello: Hello) -> Ready:
        if hello.version != PROTOCOL_VERSION:
            raise VersionMismatch(f"target speaks protocol {hello.version}, drafter {PROTOCOL_VERSION}")
        tok = self.loaded.tokenizer
        if hello.vocab_size != self.loaded.vocab_size or hello.fingerprint != tok.fingerprint:
            raise HandshakeMismatch(
                f"target {printable(repr(hello.model), 200)} (vocabulary {hello.vocab_size}, tokenizer "
                f"{printable(hello.fingerprint, 100)}) and drafter {self.loaded.name!r} (vocabulary "
                f"{self.loaded.vocab_size}, tokenizer {tok.fingerprint}) do not share a tokenizer")
        try:
            config = PoolConfig(hello.topk, hello.depth, hello.expand)
        except ValueError as e:
            raise MalformedMessage(f"Hello carries an invalid pool configuration: {e}") from None
        if config.topk > self.loaded.vocab_size:
            raise LimitExceeded(f"`topk` {config.topk} is beyond the drafter's vocabulary of {self.loaded.vocab_size}")
        if hello.capacity < 2:
            raise MalformedMessage(f"Hello.capacity must be at least 2, got {hello.capacity}")
        if hello.capacity > self.max_request_context:  # what any authorized peer may make this process take
            raise LimitExceeded(f"`capacity` {hello.capacity} is beyond this drafter's {self.max_request_context} KV "
                                f"slots (its --max-request-context): lower the target's --max-context, or start "
                                f"the drafter with a larger --max-request-context")
        self.drafter = None  # a failed Hello leaves no session behind
        runner = self._runner(hello.capacity + config.n_expanded)  # committed context plus one pool's scratch
        self.drafter = Drafter(runner, config)
        self.request, self.round = -1, -1
        self.pass_seconds.clear()  # another pool shape, perhaps
        self.values.clear()
        log.info("handshake with target %s: pool topk=%d depth=%d expand=%d", printable(repr(hello.model), 200),
                 config.topk, config.depth, config.expand)
        who = self.loaded.identity
        kernels = json.dumps(who["linear_kernels"], sort_keys=True) if "linear_kernels" in who else ""
        return Ready(PROTOCOL_VERSION, self.loaded.vocab_size, tok.fingerprint, self.loaded.name, who["revision"],
                     who["dtype"], who["device"], kernels)

    def _runner(self, capacity: int):
        """The KV cache: the one held when it is large enough, else a larger one in its place (the old one is
        freed first). CapacityError when the device cannot hold it."""
        if self.runner is not None and self.runner.capacity >= capacity:
            return self.runner
        device = device_of(self.loaded)
        held = 0 if self.runner is None else kv_bytes(self.loaded, self.runner.capacity)
        need, free = kv_bytes(self.loaded, capacity), free_bytes(device) + held
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

    def _check_tokens(self, tokens: np.ndarray, name: str) -> None:
        if problem := out_of_vocab(tokens, self.loaded.vocab_size, name):
            raise TokenOutOfRange(problem)

    def _ahead(self, msg: Ahead) -> None:
        """Grow round `msg.round`'s pool from the predicted tokens, until a message other than the Commit they
        predict (or a Waiting) comes."""
        self.drafter.ahead(msg.tokens, lambda: self._between(msg))
        self.ahead_finished = time.perf_counter()

    def _between(self, ahead: Ahead | None) -> bool:
        """Between two levels of a growth: take what came meanwhile -> whether to end the pool at the levels
        grown. A pool grown ahead ends there when a Waiting with `cut` came for it. A committed round's pool
        ends there when the next level would make the target wait (it asked, with a Waiting with `cut`, or the
        level would end after the time it asked at in recent rounds) for more than that level brings
        (pipeline.cut), or at all unless it asks with WEIGH. A Waiting for the pool being grown without `cut`
        takes the solo threads; the rest is stashed for the serve loop, in order, and anything but its Commit
        abandons a growth ahead (Abandoned)."""
        while len(self.stashed) < STASHED_MAX and (event := self.listener.recv(timeout=0)) is not None:
            now = time.perf_counter()
            msg = _peek(event) if isinstance(event, Received) and event.peer == self.peer else None
            if isinstance(msg, Waiting) and msg.request == self.request and msg.round == self.round + 1:
                if msg.cut:
                    self.cut_asked = msg.cut
                    self._asked(msg, now)
                else:
                    self._use_threads(solo=True)
                continue
            self.stashed.append((event, now))
            if ahead is not None and not (isinstance(msg, Commit) and (msg.request, msg.round) ==
                                          (ahead.request, ahead.round)
                                          and np.array_equal(msg.tokens, self.drafter.written)):
                raise Abandoned
        if ahead is not None:
            return bool(self.cut_asked)
        now = time.perf_counter()  # a pass ended: the commit's prefill (the first call) or a level's
        if self.level_ended is not None or self.round >= 0:  # not a prompt's prefill
            self.pass_seconds.append(now - (self.grown_from if self.level_ended is None else self.level_ended))
        self.level_ended = now
        self.levels += 1
        if self.round < 0 or not self.pass_seconds:  # round 0's pool: the target is still in its prefill
            return bool(self.cut_asked)
        step = float(np.median(self.pass_seconds))
        if self.cut_asked:
            wait = step
        elif self.asked_after:
            wait = max(0.0, now + step - self.grown_from - float(np.median(self.asked_after)))
        else:
            return False
        if wait == 0.0:
            return False
        if self.cut_asked == NOW or (not self.cut_asked and not self.cut_weigh):
            return True
        if not self.round_seconds:  # no round timed yet: what a level is worth cannot be weighed
            return True
        return not self.values.worth(self.levels, wait, float(np.median(self.round_seconds)))

    def _growing(self) -> None:
        """A Start's or Commit's pool is grown from now (the event's arrival)."""
        self.grown_from, self.level_ended, self.levels = self.arrived, None, 0

    def _asked(self, waiting: Waiting, at: float) -> None:
        """The target asked for a round's pool at `at`, `waiting.after` seconds after its Commit: a timing for
        the cuts after it (not round 0's, whose target prefilled the prompt first)."""
        if self.asked_at is None:
            self.asked_at = at
        self.cut_weigh = waiting.cut == WEIGH
        if waiting.round > 0:
            self.asked_after.append(waiting.after)

    def _round_ended(self, tokens: np.ndarray) -> None:
        """A Commit came: the round before it ended. When the target asked for that round's pool (a round with
        a tree, in a decode that cuts pools), what the pool's levels brought and how long the round took
        without its wait for the pool count for the cuts after it."""
        if self.asked_at is not None and self.sent is not None:
            pool, sent_at = self.sent
            self.values.observe(int(pool.depth.max()), reached(pool, tokens))
            if self.round > 0:  # round 0 began with the target's prefill
                self.round_seconds.append(self.arrived - self.grown_from - max(0.0, sent_at - self.asked_at))
        self.asked_at, self.sent = None, None

    def _use_threads(self, solo: bool) -> None:
        if self.threads is not None:
            n = self.threads[1] if solo else self.threads[0]
            if torch.get_num_threads() != n:
                torch.set_num_threads(n)

    def _pool_msg(self, drafted: Drafted) -> PoolMsg:
        """The reply to a Start or Commit. Its seconds run from the message's arrival: the part of the drafting
        the target can have waited for; a pool grown ahead counts what it grew before that arrival apart."""
        self._use_threads(solo=False)  # the target works again once it has the pool
        self.cut_asked = 0
        now = time.perf_counter()
        ahead_seconds = 0.0
        if drafted.ahead == HIT:
            ahead_seconds = max(0.0, drafted.ahead_seconds - max(0.0, self.ahead_finished - self.arrived))
        pool = drafted.pool
        self.sent = (pool, now)
        return PoolMsg(self.request, self.round, now - self.arrived, drafted.ahead, ahead_seconds,
                       pool.token.astype(np.int32), pool.parent.astype(np.int32), pool.logp, pool.expanded)


def _peek(event: Received) -> Message | None:
    """The message an event carries, or None when it does not decode (the serve loop refuses it later)."""
    try:
        return decode(event.frames)
    except ProtocolError:
        return None


def _request_of(msg: Message | None, default: int) -> int:
    return getattr(msg, "request", default)


def out_of_memory(error: BaseException) -> bool:
    """Whether an allocation failed for lack of memory: torch raises OutOfMemoryError on CUDA and a plain
    RuntimeError from its CPU allocator."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "memory" in str(error) and "alloc" in str(error).lower())
