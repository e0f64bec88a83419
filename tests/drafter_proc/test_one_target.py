"""The drafter serves one target at a time: any other is told it is busy, the next is served once the first
has left (closed its connection, or shut its session down with `persist`), and one KV cache is kept or
replaced, never piled up, nor made larger than the machine holds."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

from drafter_proc.server import DrafterServer
from models.load import load
from models.options import ModelOptions
from pipeline.config import PoolConfig
from protocol.errors import DrafterBusy, InvalidPoolMessage
from protocol.messages import Commit, End, Error, PoolMsg, Ready, Shutdown, Start
from protocol.codec import encode
from protocol.log_limit import Throttle
from protocol.transport import Channel, Closed, Listener, Received
from target_proc.client import RemoteDrafter

from tests.protocol.wire_peers import CAPACITY, FINGERPRINT, POOL, VOCAB, WAIT_S, RawPeer, hello, raw_socket

PROMPT = np.array([5, 17, 3], np.int32)


def target(endpoint) -> tuple[Channel, RemoteDrafter]:
    channel = Channel.connect(endpoint, peer="drafter")
    return channel, RemoteDrafter(channel, VOCAB, POOL, WAIT_S)


def released(server, timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while server.peer is not None and time.monotonic() < deadline:
        time.sleep(0.005)
    return server.peer is None


def test_a_second_target_is_told_the_drafter_is_busy_within_a_second(serving, endpoint):
    first, first_client = target(endpoint)
    second, second_client = target(endpoint)
    try:
        first_client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        t0 = time.monotonic()
        with pytest.raises(DrafterBusy, match=r"^the drafter serves another target; it serves one at a time "
                                              r"\(start another drafter, or wait for this one\)$"):
            second_client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        assert time.monotonic() - t0 < 5.0  # after the target's brief retry, not after --ready-timeout
        first_client.start(PROMPT)  # the first target is served as before
        assert len(first_client.pool().pool) == POOL.size
    finally:
        first.close()
        second.close()


def test_the_next_target_is_served_once_the_first_closed_its_connection(serving, endpoint):
    first, first_client = target(endpoint)
    first_client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
    first_client.start(PROMPT)
    first_client.pool()
    first.close()  # gone mid-request, without a Shutdown (killed, say)
    assert released(serving)
    second, second_client = target(endpoint)
    try:
        assert second_client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S).model == "mock"
        second_client.start(PROMPT)
        assert len(second_client.pool().pool) == POOL.size
    finally:
        second.close()


@pytest.fixture
def persistent(endpoint):
    """A DrafterServer with `persist`, as `launch/pair.sh drafter` runs it."""
    listener = Listener.bind(endpoint)
    server = DrafterServer(listener, load(ModelOptions(model="mock"), "drafter"), persist=True)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server, thread
    server.persist = False
    if thread.is_alive():
        server.peer = None
        channel, client = target(endpoint)
        client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        client.shutdown()
        thread.join(WAIT_S)
        channel.close()
    listener.close()


def test_a_persistent_drafter_serves_target_after_target(persistent, endpoint):
    server, thread = persistent
    for _ in range(3):
        channel, client = target(endpoint)
        client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        client.start(PROMPT)
        client.pool()
        client.end()
        client.shutdown()  # ends this target's session, not the drafter
        assert released(server)
        channel.close(0.5)
        assert thread.is_alive()


def test_shutdown_from_a_target_that_never_shook_hands_is_refused(serving, endpoint):
    stranger = RawPeer(raw_socket())
    stranger.sock.connect(endpoint)
    try:
        stranger.send(Shutdown())
        reply = stranger.recv()
        assert isinstance(reply, Error) and reply.code == "unexpected"
        assert reply.message == "Shutdown before the handshake (Hello)"
        assert serving.thread.is_alive()
    finally:
        stranger.close()


def test_a_stranger_cannot_shut_down_a_drafter_serving_a_target(serving, endpoint):
    channel, client = target(endpoint)
    stranger = RawPeer(raw_socket())
    stranger.sock.connect(endpoint)
    try:
        client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        stranger.send(Shutdown())
        reply = stranger.recv()
        assert isinstance(reply, Error) and reply.code == DrafterBusy.code
        client.start(PROMPT)
        assert len(client.pool().pool) == POOL.size
    finally:
        stranger.close()
        channel.close()


def test_hellos_keep_one_kv_cache_replaced_only_by_a_larger_one(drafter_server, serving):
    caches = []
    for capacity in (512, 256, 4096, 1024, 8192):
        drafter_server.send(hello(capacity=capacity))
        assert isinstance(drafter_server.recv(), Ready)
        caches.append(serving.cache.runner)
    need = [c + POOL.n_expanded for c in (512, 512, 4096, 4096, 8192)]
    assert [c.capacity for c in caches] == need  # a smaller request reuses the larger cache
    assert caches[0] is caches[1] and caches[2] is caches[3]
    refs = [weakref.ref(c) for c in caches]
    del caches
    gc.collect()
    assert [r() is not None for r in refs] == [False, False, False, False, True]  # the replaced ones are freed


def test_a_cache_beyond_the_free_memory_is_refused_before_it_is_made(drafter_server, monkeypatch):
    monkeypatch.setattr("models.memory.free_bytes", lambda device: 1 << 16)
    drafter_server.send(hello(capacity=10_000))  # within the request limit, beyond the memory
    reply = drafter_server.recv()
    assert isinstance(reply, Error) and reply.code == "drafter"
    assert reply.message == (f"the drafter cannot allocate a KV cache of {10_000 + POOL.n_expanded} slots: it "
                             f"needs 0.00 GiB and cpu has 0.00 GiB free (lower `max_context`)")


def test_a_refused_end_leaves_the_open_request_open(drafter_server):
    drafter_server.send(hello())
    assert isinstance(drafter_server.recv(), Ready)
    drafter_server.send(Start(1, PROMPT))
    drafter_server.recv()
    drafter_server.send(End(2))
    reply = drafter_server.recv()
    assert isinstance(reply, Error) and reply.code == "stale"
    assert reply.message == "end of request 2, but request 1 is open"
    drafter_server.send(Commit(1, 1, np.array([4], np.int32)))
    assert isinstance(drafter_server.recv(), PoolMsg)


def test_the_target_refuses_a_pool_of_another_shape_than_the_handshake_said(serving, endpoint):
    channel = Channel.connect(endpoint, peer="drafter")
    try:  # the target announces one pool and expects another: the drafter grows the announced one
        client = RemoteDrafter(channel, VOCAB, PoolConfig(topk=4, depth=3, expand=2), WAIT_S)
        client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        client.pool_config = PoolConfig(topk=4, depth=3, expand=1)
        client.start(PROMPT)
        with pytest.raises(InvalidPoolMessage, match=r"pool for round 0: 20 candidates on levels of \[4, 8, 8\]; "
                                                     r"the handshake's pool \(topk 4, depth 3, expand 1\) has 12 on "
                                                     r"levels of \[4, 4, 4\]"):
            client.pool()
    finally:
        channel.close()


def test_a_private_drafter_exits_once_its_target_has_gone(endpoint):
    listener = Listener.bind(endpoint)
    server = DrafterServer(listener, load(ModelOptions(model="mock"), "drafter"), exit_with_target=True)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        channel, client = target(endpoint)
        client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
        client.start(PROMPT)
        client.pool()
        assert thread.is_alive()
        channel.close()  # gone without a Shutdown (its process killed, say)
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the private drafter kept serving after its target left"
    finally:
        listener.close()


class ScriptedListener:
    """The events of `script` in order, as a Listener would deliver them; raises Exhausted after the last."""

    class Exhausted(Exception):
        pass

    def __init__(self, script: list) -> None:
        self.script, self.sent, self.throttle = list(script), [], Throttle()

    def recv(self, timeout: float | None = None):
        if not self.script:
            raise self.Exhausted
        return self.script.pop(0)

    def send(self, peer: bytes, msg) -> bool:
        self.sent.append((peer, msg))
        return True

    def departures(self) -> list[int]:
        return []


@pytest.mark.parametrize("who, persist, ends", [("served", False, True), ("served", True, False),
                                                ("stranger", False, False)])
def test_a_shutdown_queued_behind_its_targets_departure(who, persist, ends):
    # The transport reports a departure before the messages its connection left queued: a target that sent
    # Shutdown and closed at once is seen to leave first. Its Shutdown still ends a drafter that exits on
    # one; a persistent drafter has already released it, and a stranger's queued Shutdown ends nothing.
    served, other = Received(b"target", 7, encode(hello())), Received(b"stranger", 8, encode(Commit(1, 1, PROMPT)))
    shutdown = Received(b"target" if who == "served" else b"stranger", 7 if who == "served" else 8,
                        encode(Shutdown()))
    script = [served, other, Closed(8), Closed(7), shutdown]
    listener = ScriptedListener(script)
    server = DrafterServer(listener, load(ModelOptions(model="mock"), "drafter"), persist=persist)
    if ends:
        server.serve()  # returns: the drafter exits
    else:
        with pytest.raises(ScriptedListener.Exhausted):  # still serving after the script's last event
            server.serve()
    assert isinstance(listener.sent[0][1], Ready) and server.peer is None
