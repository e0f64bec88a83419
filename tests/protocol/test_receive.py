"""Messages are read frame by frame: beyond the protocol's number of frames nothing is kept, the message is
refused whole and the next one arrives intact; warnings a peer can cause are rate-limited."""

from __future__ import annotations

import logging
import time

import pytest
import zmq

from protocol.codec import MAX_FRAMES
from protocol.errors import BadArray
from protocol.log_limit import Throttle
from protocol.transport import Channel, Listener, Received


def _received(listener: Listener) -> Received:
    got = listener.recv(timeout=10.0)
    while not isinstance(got, Received):
        assert got is not None, "no message within 10 s"
        got = listener.recv(timeout=10.0)
    return got


def _messages_within(listener: Listener, seconds: float) -> list[Received]:
    """The messages that arrive within `seconds` (departures skipped)."""
    deadline, got = time.monotonic() + seconds, []
    while (left := deadline - time.monotonic()) > 0:
        if isinstance(event := listener.recv(timeout=left), Received):
            got.append(event)
    return got


def test_a_message_of_too_many_frames_keeps_at_most_the_limit_and_the_next_arrives_whole(endpoint):
    listener = Listener.bind(endpoint)
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart([b"h"] + [b""] * 9_999)
        sock.send_multipart([b"next", b"a"])
        first, second = _received(listener), _received(listener)
        assert first.count == 10_000 and len(first.frames) == MAX_FRAMES
        assert second.frames == [b"next", b"a"] and second.count == 2
    finally:
        sock.close(0)
        context.term()
        listener.close()


def test_a_peer_whose_routing_id_is_longer_than_a_frame_may_be_is_disconnected_at_its_handshake(endpoint):
    """libzmq keeps a peer's routing id while it stays connected: the drafter's frame limit bounds it too."""
    listener = Listener.bind(endpoint, frame_bytes=128)  # a READY command carries the id with 41 bytes more
    context = zmq.Context()
    peers = []
    try:
        for routing_id in (b"L" * 200, b"s" * 32):
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, routing_id)
            sock.connect(endpoint)
            sock.send_multipart([routing_id[:1], b"x" * 64])
            peers.append(sock)
        # the short id's message; the long id's never arrives ...
        assert [got.frames for got in _messages_within(listener, 1.0)] == [[b"s", b"x" * 64]]
        peers[1].send_multipart([b"s", b"y" * 129])  # ... and a frame over the limit is not read either
        assert _messages_within(listener, 0.5) == []
    finally:
        for sock in peers:
            sock.close(0)
        context.term()
        listener.close()


def test_the_target_refuses_a_message_of_too_many_frames_with_bad_array(endpoint):
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(endpoint)
    channel = Channel.connect(endpoint, peer="drafter")
    try:
        channel.sock.send(b"hello")
        assert router.poll(10_000)
        peer, _ = router.recv_multipart()
        router.send_multipart([peer, b"h", *[b""] * 1000])
        with pytest.raises(BadArray, match=rf"a message from the drafter has 1001 frames; a message has at most "
                                           rf"{MAX_FRAMES}"):
            channel.recv_frames(10.0, "drafter_timeout", "a pool")
    finally:
        channel.close()
        router.close(0)
        context.term()


def test_a_throttle_logs_a_burst_per_window_then_says_how_many_it_left_out(caplog):
    now = [0.0]
    throttle = Throttle(burst=2, window=10.0, clock=lambda: now[0])
    log = logging.getLogger("test.throttle")
    logged = [throttle.warning(log, "probe", "probe %d", i) for i in range(5)]
    assert logged == [True, True, False, False, False]
    assert throttle.warning(log, "other", "another kind")  # each kind has its own budget
    now[0] = 10.0
    assert throttle.warning(log, "probe", "probe %d", 5)
    assert [r.getMessage() for r in caplog.records] == [
        "probe 0", "probe 1", "another kind", "probe 5 (3 more like this were not logged)"]
