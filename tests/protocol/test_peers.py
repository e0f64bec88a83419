"""Peers turns a listener's connections into peers: messages of open connections, Left once one closed, and of
what a closed connection left queued only its Shutdown (as Farewell)."""

from __future__ import annotations

import numpy as np

from protocol.codec import encode
from protocol.log_limit import Throttle
from protocol.messages import Commit, Error, Shutdown
from protocol.peers import DEPARTED_KEPT, HELD_MAX, Farewell, Left, Peers, tag
from protocol.transport import Closed, Received


class Script:
    """A listener delivering `events` in order (None once they are spent, as a poll that does not wait)."""

    def __init__(self, events: list, gone: list[int] | None = None) -> None:
        self.events, self.gone, self.throttle = list(events), list(gone or []), Throttle()

    def recv(self, timeout: float | None = None):
        return self.events.pop(0) if self.events else None

    def departures(self) -> list[int]:
        gone, self.gone = self.gone, []
        return gone


def said(peer: bytes, fd: int, msg=None) -> Received:
    return Received(peer, fd, encode(msg or Error("x", "y")))


def test_a_closed_connection_is_its_peer_leaving_and_what_it_left_queued_is_dropped_but_its_shutdown():
    a, b = said(b"a", 3), said(b"b", 4)
    peers = Peers(Script([a, b, Closed(3), said(b"a", 3, Commit(1, 1, np.array([2], np.int32))),
                          said(b"a", 3, Shutdown()), Closed(9), said(b"b", 4)]))
    got = [peers.next() for _ in range(5)]
    assert got[:3] == [a, b, Left(tag(b"a"))]
    assert got[3] == Farewell(tag(b"a"))  # the Commit it left queued was dropped
    assert got[4].peer == b"b"  # a connection that never spoke leaves no Left
    assert list(peers.departed) == [tag(b"a")] and peers.connections == {4: tag(b"b")}


def test_held_events_come_first_and_in_order():
    first, second, third = said(b"a", 3), said(b"a", 3, Shutdown()), said(b"a", 3, Commit(1, 1, np.zeros(1, np.int32)))
    peers = Peers(Script([first, second, third]))
    for event in peers.arrivals():
        if event is not second:
            peers.hold(event)
    assert peers.next() is first and peers.next() is third


def test_arrivals_stop_while_the_held_events_fill_their_room():
    peers = Peers(Script([said(b"a", 3) for _ in range(HELD_MAX + 5)]))
    for event in peers.arrivals():
        peers.hold(event)
    assert len(peers.held) == HELD_MAX and len(peers.listener.events) == 5  # the rest wait in the socket


def test_departures_already_reported_are_told_at_once():
    peers = Peers(Script([said(b"a", 3), said(b"b", 4)], gone=[3, 8]))
    peers.next()
    assert peers.gone_now() == [Left(tag(b"a"))]  # descriptor 8 never spoke


def test_remembered_peers_are_bounded():
    assert Peers(Script([])).departed.maxlen == DEPARTED_KEPT
