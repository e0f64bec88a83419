"""The peers of a server's Listener: messages from peers whose connections are open, and Left once one closed.

The Listener speaks of connections, a server of peers. Peers remembers which connection each speaking peer came by
(a fixed-size tag of its routing id, `tag`) and which peers have gone, so that what a closed connection left
queued is not taken for a live peer's: of it, a Shutdown comes as Farewell, the rest is dropped. What a server
takes early (`arrivals`, between the passes of a growth) it `hold`s, and `next` hands held events out first."""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from protocol.codec import decode
from protocol.errors import ProtocolError
from protocol.log_limit import Throttle
from protocol.messages import Message, Shutdown
from protocol.transport import Closed, Listener, Received

log = logging.getLogger("transport")

DEPARTED_KEPT = 256  # tags of closed connections remembered, to drop the messages they left queued
HELD_MAX = 64  # events held for the loop, at most: the rest wait in the socket's bounded queues, holding back senders


def tag(peer: bytes) -> bytes:
    """A fixed-size stand-in for a routing id, which a peer may make as long as a frame: what is remembered of a
    connection costs 16 bytes however long its id."""
    return hashlib.blake2b(peer, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Left:
    """A peer's connection closed; `peer` is its routing id's tag."""

    peer: bytes


@dataclass(frozen=True, slots=True)
class Farewell:
    """A Shutdown that a peer sent just before its connection closed, read after its Left; `peer` is its tag."""

    peer: bytes


Event = Received | Left | Farewell


class Peers:
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.connections: dict[int, bytes] = {}  # descriptor -> tag, of open connections that spoke
        self.departed: deque[bytes] = deque(maxlen=DEPARTED_KEPT)  # tags; ZeroMQ never reuses a routing id
        self.held: deque[Event] = deque()  # taken early, for `next` to hand out first

    @property
    def throttle(self) -> Throttle:
        return self.listener.throttle

    def next(self) -> Event:
        """The next event: a held one, else the next from the socket (waiting for it)."""
        while not self.held:
            if (event := self._peer_event(self.listener.recv())) is not None:
                return event
        return self.held.popleft()

    def arrivals(self) -> Iterator[Event]:
        """The events that came since the last look, without waiting, while fewer than HELD_MAX are held."""
        while len(self.held) < HELD_MAX and (raw := self.listener.recv(timeout=0)) is not None:
            if (event := self._peer_event(raw)) is not None:
                yield event

    def hold(self, event: Event) -> None:
        """Keep `event`, taken from `arrivals`, for `next`."""
        self.held.append(event)

    def gone_now(self) -> list[Left]:
        """The departures the transport has already reported, at once (ahead of any events held)."""
        return [left for fd in self.listener.departures() if (left := self._closed(fd)) is not None]

    def send(self, peer: bytes, msg: Message) -> bool:
        """Send to one peer without blocking -> whether it was queued (see Listener.send)."""
        return self.listener.send(peer, msg)

    def _peer_event(self, raw: Received | Closed) -> Event | None:
        if isinstance(raw, Closed):
            return self._closed(raw.fd)
        peer = tag(raw.peer)
        if peer in self.departed:
            if raw.count == len(raw.frames) and isinstance(peek(raw), Shutdown):
                return Farewell(peer)
            log.debug("ignored a message a closed connection left queued")
            return None
        # A descriptor is reused only after its connection closed, and the monitor reports that first.
        self.connections[raw.fd] = peer
        return raw

    def _closed(self, fd: int) -> Left | None:
        peer = self.connections.pop(fd, None)
        if peer is None:
            return None  # a connection that never spoke (a failed secure handshake, say)
        self.departed.append(peer)
        return Left(peer)


def peek(received: Received) -> Message | None:
    """The message `received` carries, or None when it does not decode (whoever answers it refuses it then)."""
    try:
        return decode(received.frames)
    except ProtocolError:
        return None
