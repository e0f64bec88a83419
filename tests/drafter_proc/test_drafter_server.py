"""A real DrafterServer (mock drafter model) answers every refused message with an Error naming the problem,
keeps serving, and leaves its state as it was: the next valid exchange gets a valid pool."""

from __future__ import annotations

import re
import time

import msgpack
import numpy as np
import pytest
import zmq

from drafter_proc.drafter import Drafter
from models.mock import MockModel, MockRunner
from models.options import ModelOptions
from pipeline.pool import Pool
from protocol.errors import (BadArray, HandshakeMismatch, LimitExceeded, MalformedMessage, StaleMessage,
                             TokenOutOfRange, UnexpectedMessage, UnknownMessage, VersionMismatch)
from protocol.limits import MAX_CONTEXT, REQUEST_CONTEXT
from protocol.messages import PROTOCOL_VERSION, Commit, End, Error, Kind, PoolMsg, Ready, Shutdown, Start

from tests.protocol.wire_peers import CAPACITY, FINGERPRINT, POOL, VOCAB, WAIT_S, RawPeer, hello

PROMPT = np.array([5, 17, 3, 42], np.int32)


def assert_valid_pool(reply, request: int, round_: int) -> Pool:
    assert isinstance(reply, PoolMsg), reply
    assert (reply.request, reply.round) == (request, round_)
    pool = Pool.from_edges(reply.token, reply.parent, reply.logp, reply.expanded, vocab_size=VOCAB,
                           max_depth=POOL.depth)
    assert len(pool) == POOL.size
    return pool


def assert_error(reply, error_type, match: str, request: int = -1) -> None:
    assert isinstance(reply, Error), reply
    assert reply.code == error_type.code
    assert reply.request == request
    assert re.search(match, reply.message), reply.message  # re.search, as pytest.raises(match=...) uses


def assert_still_serving(peer) -> None:
    """A fresh handshake and request still get a valid pool."""
    peer.send(hello())
    assert isinstance(peer.recv(), Ready)
    peer.send(Start(99, PROMPT))
    assert_valid_pool(peer.recv(), 99, 0)


def open_request(peer, request: int = 1) -> None:
    peer.send(hello())
    assert isinstance(peer.recv(), Ready)
    peer.send(Start(request, PROMPT))
    assert_valid_pool(peer.recv(), request, 0)


def test_handshake_then_pool_of_the_configured_shape(drafter_server):
    drafter_server.send(hello())
    ready = drafter_server.recv()
    assert isinstance(ready, Ready)
    assert (ready.version, ready.vocab_size, ready.fingerprint, ready.model) == (PROTOCOL_VERSION, VOCAB,
                                                                                 FINGERPRINT, "mock")
    drafter_server.send(Start(1, PROMPT))
    pool = assert_valid_pool(drafter_server.recv(), 1, 0)
    assert pool.depth.max() == POOL.depth


def test_pools_equal_an_in_process_drafter_fed_the_same_tokens(drafter_server):
    # Round numbering and context bookkeeping over the wire change nothing in what the drafter grows.
    options = ModelOptions(model="mock")
    local = Drafter(MockRunner(MockModel(VOCAB, options.mock_seed, options.mock_noise), CAPACITY + 64), POOL)
    open_request(drafter_server)
    steps = [np.array([9, 1], np.int32), np.array([33], np.int32), np.array([2, 60, 8], np.int32)]
    want = [local.start(PROMPT).pool] + [local.commit(tokens).pool for tokens in steps]
    drafter_server.send(Start(2, PROMPT))
    got = [assert_valid_pool(drafter_server.recv(), 2, 0)]
    for round_, tokens in enumerate(steps, start=1):
        drafter_server.send(Commit(2, round_, tokens))
        got.append(assert_valid_pool(drafter_server.recv(), 2, round_))
    for a, b in zip(got, want):
        for name in ("token", "parent", "logp", "expanded"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def raw_start(spec, data: bytes) -> list[bytes]:
    return [msgpack.packb({"k": int(Kind.START), "f": {"request": 4, "feature_dtype": "", "feature_width": 0},
                           "a": [spec, ["|u1", [0]]]}), data, b""]


GARBAGE = [
    ([b"\xc1"], MalformedMessage, r"header is not valid msgpack"),
    ([b"not msgpack at all"], MalformedMessage, r"header is not valid msgpack"),
    ([msgpack.packb("hello")], MalformedMessage, r"header must be a map with keys k, f, a; got 'hello'"),
    ([msgpack.packb({"k": 42, "f": {}, "a": []})], UnknownMessage, r"unknown message kind 42"),
    ([msgpack.packb({"k": int(Kind.HELLO), "f": {"version": PROTOCOL_VERSION}, "a": []})], MalformedMessage,
     r"Hello needs fields \[.*'capacity'.*\], got \['version'\]"),
    ([msgpack.packb({"k": int(Kind.END), "f": {"request": "1"}, "a": []})], MalformedMessage,
     r"End.request must be int, got str"),
    (raw_start(["<i8", [2]], np.array([1, 2], np.int64).tobytes()), BadArray,
     r"Start.prompt must have dtype int32 \(<i4\), got '<i8'"),
    (raw_start(["<i4", [2, 1]], np.array([1, 2], np.int32).tobytes()), BadArray,
     r"Start.prompt must be 1-D .*got shape \[2, 1\]"),
    (raw_start(["<i4", [3]], np.array([1, 2], np.int32).tobytes()), BadArray, r"Start.prompt: 8 bytes for 3 x int32"),
    ([], MalformedMessage, r"empty message: no header frame"),
]


@pytest.mark.parametrize("frames, error_type, match", GARBAGE,
                         ids=["reserved-byte", "text", "not-a-map", "unknown-kind", "missing-fields",
                              "wrong-field-type", "wrong-dtype", "wrong-shape", "wrong-byte-length", "no-frames"])
def test_garbage_gets_an_error_reply_and_the_server_survives(drafter_server, frames, error_type, match):
    if not frames:  # zmq cannot send a message of no frames; the nearest is one empty frame
        frames, match = [b""], r"header is not valid msgpack"
    drafter_server.send_frames(frames)
    assert_error(drafter_server.recv(), error_type, match)
    assert_still_serving(drafter_server)


def test_garbage_mid_request_keeps_the_request_going(drafter_server):
    open_request(drafter_server, 1)
    drafter_server.send_frames([b"\xc1"])
    assert_error(drafter_server.recv(), MalformedMessage, r"not valid msgpack", request=1)
    drafter_server.send(Commit(1, 1, np.array([7], np.int32)))
    assert_valid_pool(drafter_server.recv(), 1, 1)


def test_other_protocol_version_is_refused(drafter_server):
    drafter_server.send(hello(version=PROTOCOL_VERSION + 1))
    assert_error(drafter_server.recv(), VersionMismatch,
                 rf"target speaks protocol {PROTOCOL_VERSION + 1}, drafter {PROTOCOL_VERSION}")
    assert_still_serving(drafter_server)


@pytest.mark.parametrize("change, shown", [
    (dict(vocab_size=VOCAB + 1), rf"vocabulary {VOCAB + 1}, tokenizer {FINGERPRINT}"),
    (dict(fingerprint="feedfacefeedface"), rf"vocabulary {VOCAB}, tokenizer feedfacefeedface"),
], ids=["vocabulary", "tokenizer"])
def test_handshake_mismatch_names_both_models(drafter_server, change, shown):
    drafter_server.send(hello(model="org/big-target", **change))
    assert_error(drafter_server.recv(), HandshakeMismatch,
                 rf"target 'org/big-target' \({shown}\) and drafter 'mock' \(vocabulary {VOCAB}, tokenizer "
                 rf"{FINGERPRINT}\) do not share a tokenizer")
    assert_still_serving(drafter_server)


@pytest.mark.parametrize("change, match", [
    (dict(topk=4, expand=5), r"Hello carries an invalid pool configuration: `expand` \(5\) must not exceed"),
    (dict(depth=0), r"Hello carries an invalid pool configuration: `depth` must be a positive integer"),
    (dict(capacity=1), r"Hello.capacity must be at least 2, got 1"),
], ids=["expand-above-topk", "zero-depth", "tiny-capacity"])
def test_hello_with_an_impossible_pool_is_refused(drafter_server, change, match):
    drafter_server.send(hello(**change))
    assert_error(drafter_server.recv(), MalformedMessage, match)
    assert_still_serving(drafter_server)


def test_request_before_handshake_is_refused(drafter_server):
    drafter_server.send(Start(3, PROMPT))
    assert_error(drafter_server.recv(), UnexpectedMessage, r"Start before the handshake \(Hello\)", request=3)
    assert_still_serving(drafter_server)


def test_message_only_a_drafter_sends_is_refused(drafter_server):
    open_request(drafter_server, 1)
    drafter_server.send(Ready(PROTOCOL_VERSION, VOCAB, FINGERPRINT, "mock"))
    assert_error(drafter_server.recv(), UnexpectedMessage, r"the drafter does not take Ready messages", request=1)
    drafter_server.send(Commit(1, 1, np.array([7], np.int32)))
    assert_valid_pool(drafter_server.recv(), 1, 1)


@pytest.mark.parametrize("prompt, match", [
    ([5, VOCAB, 3], rf"prompt\[1\] = {VOCAB} is outside the vocabulary \[0, {VOCAB}\)"),
    ([-1, 5], rf"prompt\[0\] = -1 is outside the vocabulary \[0, {VOCAB}\)"),
])
def test_start_with_a_token_outside_the_vocabulary_is_refused(drafter_server, prompt, match):
    drafter_server.send(hello())
    assert isinstance(drafter_server.recv(), Ready)
    drafter_server.send(Start(8, np.array(prompt, np.int32)))
    assert_error(drafter_server.recv(), TokenOutOfRange, match, request=8)
    assert_still_serving(drafter_server)


def test_commit_with_a_token_outside_the_vocabulary_is_refused_and_changes_nothing(drafter_server):
    # The refused commit must leave the context alone: the next round's pool equals the pool of a drafter
    # that never saw it.
    options = ModelOptions(model="mock")
    local = Drafter(MockRunner(MockModel(VOCAB, options.mock_seed, options.mock_noise), CAPACITY + 64), POOL)
    local.start(PROMPT)
    want = local.commit([11, 12]).pool
    open_request(drafter_server, 1)
    drafter_server.send(Commit(1, 1, np.array([11, 12, 2**31 - 1], np.int32)))
    assert_error(drafter_server.recv(), TokenOutOfRange,
                 rf"tokens\[2\] = 2147483647 is outside the vocabulary \[0, {VOCAB}\)", request=1)
    drafter_server.send(Commit(1, 1, np.array([11, 12], np.int32)))
    got = assert_valid_pool(drafter_server.recv(), 1, 1)
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.logp, want.logp)


@pytest.mark.parametrize("request_, round_, match", [
    (1, 2, r"commit for request 1 round 2, but the drafter expects request 1 round 1"),
    (1, 0, r"commit for request 1 round 0, but the drafter expects request 1 round 1"),
    (0, 1, r"commit for request 0 round 1, but the drafter expects request 1 round 1"),
], ids=["skips-a-round", "repeats-round-0", "old-request"])
def test_commit_for_a_stale_round_is_refused(drafter_server, request_, round_, match):
    open_request(drafter_server, 1)
    drafter_server.send(Commit(request_, round_, np.array([7], np.int32)))
    assert_error(drafter_server.recv(), StaleMessage, match, request=request_)
    drafter_server.send(Commit(1, 1, np.array([7], np.int32)))  # the expected round is still open
    assert_valid_pool(drafter_server.recv(), 1, 1)


@pytest.mark.parametrize("after_end", [False, True], ids=["before-start", "after-end"])
def test_commit_without_an_open_request_is_refused(drafter_server, after_end):
    # (-1, 0) is what the drafter holds when no request is open; it must not pass as "the next round".
    drafter_server.send(hello())
    assert isinstance(drafter_server.recv(), Ready)
    if after_end:
        drafter_server.send(Start(1, PROMPT))
        assert_valid_pool(drafter_server.recv(), 1, 0)
        drafter_server.send(End(1))
    drafter_server.send(Commit(-1, 0, np.array([7], np.int32)))
    assert_error(drafter_server.recv(), StaleMessage,
                 r"commit for request -1 round 0, but no request is open \(Start begins one\)", request=-1)
    assert_still_serving(drafter_server)


def test_request_beyond_the_kv_cache_gets_an_error_naming_the_option(drafter_server):
    drafter_server.send(hello(capacity=16))
    assert isinstance(drafter_server.recv(), Ready)
    drafter_server.send(Start(5, np.arange(1, 18, dtype=np.int32)))
    reply = drafter_server.recv()
    assert isinstance(reply, Error) and reply.code == "drafter" and reply.request == 5
    assert "cannot hold 17 committed tokens and a pool's 4 scratch slots (raise `max_context`)" in reply.message
    assert_still_serving(drafter_server)


def test_hello_asking_for_an_impossible_cache_gets_an_error_and_the_server_survives(drafter_server):
    # The cache size comes off the wire; it is bounded before anything is allocated.
    drafter_server.send(hello(capacity=2**50))
    assert_error(drafter_server.recv(), LimitExceeded,
                 rf"`capacity` {2**50} is beyond the protocol's {MAX_CONTEXT} KV slots")
    assert_still_serving(drafter_server)


def test_hellos_beyond_the_request_limit_are_refused_naming_it_and_allocate_nothing(serving, drafter_server):
    for capacity in (REQUEST_CONTEXT + 1, MAX_CONTEXT, MAX_CONTEXT):
        drafter_server.send(hello(capacity=capacity))
        assert_error(drafter_server.recv(), LimitExceeded,
                     rf"`capacity` {capacity} is beyond this drafter's {REQUEST_CONTEXT} KV slots \(its "
                     rf"--max-request-context\): lower the target's --max-context, or start the drafter with a "
                     rf"larger --max-request-context")
    assert serving.cache.runner is None  # refused before any cache was made
    drafter_server.send(hello(capacity=REQUEST_CONTEXT))  # the limit itself is granted
    assert isinstance(drafter_server.recv(), Ready)
    assert_still_serving(drafter_server)


def test_remembered_routing_ids_cost_sixteen_bytes_however_long(serving, endpoint):
    from protocol.peers import DEPARTED_KEPT
    from tests.protocol.wire_peers import raw_socket

    for i in range(12):
        sock = raw_socket()
        sock.setsockopt(zmq.ROUTING_ID, bytes([i + 1]) * 255)  # the longest id libzmq lets a socket name
        sock.connect(endpoint)
        peer = RawPeer(sock)
        peer.send(Error("x", "y"))  # speaks (an Error gets no reply), then leaves
        assert peer.silent(0.05)
        peer.close()
    deadline = time.monotonic() + WAIT_S
    while len(serving.peers.departed) < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(serving.peers.departed) == 12 and serving.peers.departed.maxlen == DEPARTED_KEPT
    assert {len(tag) for tag in serving.peers.departed} == {16}
    assert all(len(tag) == 16 for tag in list(serving.peers.connections.values()))


def test_error_from_the_target_gets_no_reply(drafter_server):
    # An Error answering an Error would let two peers bounce refusals forever.
    drafter_server.send(Error("invalid-pool", "pool for round 0: candidate 2 has parent 3", 1))
    assert drafter_server.silent(0.3)
    assert_still_serving(drafter_server)


def test_shutdown_stops_the_server_without_a_reply(drafter_server):
    open_request(drafter_server, 1)
    drafter_server.send(Shutdown())
    drafter_server.server_thread.join(WAIT_S)
    assert not drafter_server.server_thread.is_alive()
    assert drafter_server.silent(0.1)
