"""The target's side of the wire (RemoteDrafter): a crafted bad reply from a fake drafter raises the typed
error, and the refusal goes back to the drafter as an Error; silence and a closed peer are bounded."""

from __future__ import annotations

import threading
import time

import msgpack
import numpy as np
import pytest
import zmq

from drafter_proc.server import DrafterServer
from models.load import load
from models.options import ModelOptions
from pipeline.config import PoolConfig
from pipeline.cut import NOW
from pipeline.pool import Pool
from protocol.codec import encode
from protocol.errors import (BadArray, DrafterBusy, HandshakeMismatch, InvalidPoolMessage, MalformedMessage, PeerDied,
                             PeerError, PeerTimeout, StaleMessage, TokenOutOfRange, UnexpectedMessage,
                             UnknownMessage, VersionMismatch)
from protocol.messages import PROTOCOL_VERSION, Commit, End, Error, Hello, PoolMsg, Ready, Shutdown, Start, Waiting
from protocol.transport import Channel, Listener
from target_proc.client import RemoteDrafter

from tests.protocol.wire_peers import CAPACITY, FINGERPRINT, POOL, VOCAB, WAIT_S

TARGET = "org/target-model"
PROMPT = [5, 17, 3]
SMALL = PoolConfig(topk=2, depth=2, expand=1)  # the handshake's pool of the crafted pools below


def ready(**change) -> Ready:
    fields = dict(version=PROTOCOL_VERSION, vocab_size=VOCAB, fingerprint=FINGERPRINT, model="org/drafter")
    fields.update(change)
    return Ready(**fields)


def pool_msg(request: int = 1, round_: int = 0, **change) -> PoolMsg:
    """A valid pool: tokens 3 and 9 at the first level, 4 and 5 under the expanded 3."""
    edges = dict(token=[3, 9, 4, 5], parent=[-1, -1, 0, 0], logp=[-0.1, -2.0, -0.3, -0.5],
                 expanded=[True, False, False, False])
    edges.update(change)
    return PoolMsg(request, round_, 0.002, -1, 0.0, np.array(edges["token"], np.int32), np.array(edges["parent"], np.int32),
                   np.array(edges["logp"], np.float32), np.array(edges["expanded"], bool))


def remote(channel, timeout: float = WAIT_S, pool: PoolConfig = SMALL) -> RemoteDrafter:
    return RemoteDrafter(channel, VOCAB, pool, timeout)


def shake(peer, client: RemoteDrafter) -> Hello:
    """Complete the handshake: the fake drafter answers the Hello with a valid Ready."""
    answer = peer.answer(ready())
    client.handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S)
    sent = answer.result()
    assert isinstance(sent, Hello)
    return sent


def test_hello_carries_the_target_and_pool_settings(fake_drafter):
    peer, channel = fake_drafter
    sent = shake(peer, remote(channel))
    assert (sent.version, sent.vocab_size, sent.fingerprint, sent.model) == (PROTOCOL_VERSION, VOCAB,
                                                                            FINGERPRINT, TARGET)
    assert (sent.topk, sent.depth, sent.expand, sent.capacity) == (SMALL.topk, SMALL.depth, SMALL.expand, CAPACITY)


def test_valid_pool_is_accepted_and_rounds_advance(fake_drafter):
    peer, channel = fake_drafter
    client = remote(channel)
    shake(peer, client)
    client.start(PROMPT)
    start = peer.recv()
    assert isinstance(start, Start) and start.request == 1 and start.prompt.tolist() == PROMPT
    peer.send(pool_msg(1, 0))
    drafted = client.pool()
    pool, seconds = drafted.pool, drafted.seconds
    assert pool.token.tolist() == [3, 9, 4, 5] and pool.depth.tolist() == [1, 1, 2, 2] and seconds == 0.002
    client.commit([3, 4, 60])
    commit = peer.recv()
    assert isinstance(commit, Commit) and (commit.request, commit.round) == (1, 1)
    assert commit.tokens.tolist() == [3, 4, 60]
    peer.send(pool_msg(1, 1))
    client.pool()
    client.end()
    assert isinstance(peer.recv(), End)
    client.start(PROMPT)  # the next request numbers its rounds from 0 again
    assert peer.recv().request == 2
    peer.send(pool_msg(2, 0))
    client.pool()


BAD_POOLS = [
    (pool_msg(parent=[-1, -1, 3, 0]), InvalidPoolMessage,
     r"pool for round 0: candidate 2 has parent 3: a parent must be the root \(-1\) or an earlier candidate"),
    (pool_msg(parent=[-1, -1, 2, 0]), InvalidPoolMessage, r"candidate 2 has parent 2: a parent must be"),
    (pool_msg(parent=[-2, -1, 0, 0]), InvalidPoolMessage, r"candidate 0 has parent -2: a parent must be"),
    (pool_msg(parent=[-1, -1, 1, 0]), InvalidPoolMessage, r"candidate 2 has parent 1, which is not expanded"),
    (pool_msg(token=[3, 3, 4, 5]), InvalidPoolMessage, r"candidate 1 repeats token 3 under parent -1"),
    (pool_msg(parent=[-1, 0, 1, 2], expanded=[True, True, True, False]), InvalidPoolMessage,
     rf"the pool reaches depth 4, beyond the configured {SMALL.depth}"),
    (pool_msg(logp=[-0.1, 0.5, -0.3, -0.5]), InvalidPoolMessage, r"candidate 1 has edge log-prob 0.5"),
    (pool_msg(logp=[-0.1, float("nan"), -0.3, -0.5]), InvalidPoolMessage, r"candidate 1 has edge log-prob nan"),
    (pool_msg(token=[], parent=[], logp=[], expanded=[]), InvalidPoolMessage, r"pool for round 0: the pool is empty"),
    (pool_msg(token=[3, VOCAB, 4, 5]), TokenOutOfRange,
     rf"pool token\[1\] = {VOCAB} is outside the vocabulary \[0, {VOCAB}\)"),
    (pool_msg(token=[3, 9, -5, 5]), TokenOutOfRange, rf"pool token\[2\] = -5 is outside the vocabulary"),
    (pool_msg(1, 1), StaleMessage, r"pool for request 1 round 1, but the target waits for request 1 round 0"),
    (pool_msg(0, 0), StaleMessage, r"pool for request 0 round 0, but the target waits for request 1 round 0"),
]


@pytest.mark.parametrize("reply, error_type, match", BAD_POOLS,
                         ids=["parent-ahead", "own-parent", "parent-below-root", "unexpanded-parent",
                              "twin-siblings", "too-deep", "positive-logp", "nan-logp", "empty",
                              "token-above-vocab", "negative-token", "stale-round", "stale-request"])
def test_bad_pool_raises_and_is_refused_back(fake_drafter, reply, error_type, match):
    peer, channel = fake_drafter
    client = remote(channel)
    shake(peer, client)
    client.start(PROMPT)
    peer.recv()
    peer.send(reply)
    with pytest.raises(error_type, match=match) as caught:
        client.pool()
    refusal = peer.recv()
    assert isinstance(refusal, Error)
    assert (refusal.code, refusal.message, refusal.request) == (error_type.code, str(caught.value), 1)


def raw_pool_frames(token_spec) -> list[bytes]:
    """Frames of pool_msg() with the `token` array spec and bytes replaced."""
    frames = encode(pool_msg())
    header = msgpack.unpackb(frames[0])
    header["a"][0] = token_spec[0]
    return [msgpack.packb(header), token_spec[1], *frames[2:]]


BAD_FRAMES = [
    (raw_pool_frames((["<i8", [4]], np.array([3, 9, 4, 5], np.int64).tobytes())), BadArray,
     r"PoolMsg.token must have dtype int32 \(<i4\), got '<i8'"),
    (raw_pool_frames((["<i4", [3]], np.array([3, 9, 4], np.int32).tobytes())), BadArray,
     r"`parent` has 4 entries, `token` has 3"),
    (raw_pool_frames((["<i4", [4]], np.array([3, 9, 4], np.int32).tobytes())), BadArray,
     r"PoolMsg.token: 12 bytes for 4 x int32"),
    ([msgpack.packb({"k": 42, "f": {}, "a": []})], UnknownMessage, r"unknown message kind 42"),
    (encode(ready()), UnexpectedMessage, r"got Ready where PoolMsg or Error was expected"),
    ([b"\xc1"], MalformedMessage, r"header is not valid msgpack"),
]


@pytest.mark.parametrize("frames, error_type, match", BAD_FRAMES,
                         ids=["wrong-dtype", "wrong-length", "wrong-bytes", "unknown-kind", "unexpected-kind",
                              "not-msgpack"])
def test_undecodable_reply_raises_and_is_refused_back(fake_drafter, frames, error_type, match):
    peer, channel = fake_drafter
    client = remote(channel)
    shake(peer, client)
    client.start(PROMPT)
    peer.recv()
    peer.send_frames(frames)
    with pytest.raises(error_type, match=match) as caught:
        client.pool()
    refusal = peer.recv()
    assert (refusal.code, refusal.message) == (error_type.code, str(caught.value))


def test_drafter_error_reply_raises_peer_error_without_an_echo(fake_drafter):
    peer, channel = fake_drafter
    client = remote(channel)
    shake(peer, client)
    client.start(PROMPT)
    peer.recv()
    peer.send(Error("drafter", "the drafter's KV cache of 20 slots cannot hold 30 committed tokens", 1))
    with pytest.raises(PeerError, match=r"peer reported drafter: the drafter's KV cache of 20 slots") as caught:
        client.pool()
    assert caught.value.peer_code == "drafter"
    assert peer.silent(0.2)  # answering an Error with an Error could ping-pong forever


@pytest.mark.parametrize("reply, error_type, match", [
    (ready(version=PROTOCOL_VERSION + 1), VersionMismatch,
     rf"drafter speaks protocol {PROTOCOL_VERSION + 1}, target {PROTOCOL_VERSION}"),
    (ready(vocab_size=VOCAB + 1), HandshakeMismatch,
     rf"target '{TARGET}' \(vocabulary {VOCAB}, tokenizer {FINGERPRINT}\) and drafter 'org/drafter' "
     rf"\(vocabulary {VOCAB + 1}, tokenizer {FINGERPRINT}\) do not share a tokenizer"),
    (ready(fingerprint="feedfacefeedface"), HandshakeMismatch,
     rf"target '{TARGET}' \(vocabulary {VOCAB}, tokenizer {FINGERPRINT}\) and drafter 'org/drafter' "
     rf"\(vocabulary {VOCAB}, tokenizer feedfacefeedface\)"),
    (pool_msg(), UnexpectedMessage, r"got PoolMsg where Ready or Error was expected"),
], ids=["version", "vocabulary", "tokenizer", "pool-instead-of-ready"])
def test_bad_ready_raises_and_is_refused_back(fake_drafter, reply, error_type, match):
    peer, channel = fake_drafter
    client = remote(channel)
    answer = peer.answer(reply)
    with pytest.raises(error_type, match=match) as caught:
        client.handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S)
    assert isinstance(answer.result(), Hello)
    refusal = peer.recv()
    assert (refusal.code, refusal.message) == (error_type.code, str(caught.value))


@pytest.mark.parametrize("code, error_type, match", [
    ("version", VersionMismatch, r"^target speaks protocol 2, drafter 1$"),
    ("mismatch", HandshakeMismatch, r"^target speaks protocol 2, drafter 1$"),
    ("malformed", PeerError, r"^peer reported malformed: target speaks protocol 2, drafter 1$"),
])
def test_drafter_refusing_the_hello_raises_its_typed_error(fake_drafter, code, error_type, match):
    # The drafter's own words reach the user unchanged; its code picks the exception type.
    peer, channel = fake_drafter
    answer = peer.answer(Error(code, "target speaks protocol 2, drafter 1"))
    with pytest.raises(error_type, match=match):
        remote(channel).handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S)
    answer.result()


def test_a_drafter_of_protocol_7_refusing_the_hellos_fields_is_said_to_speak_another_version(fake_drafter):
    # Before version 8 a drafter read the Hello's fields before its version: it refuses the new field as malformed.
    peer, channel = fake_drafter
    said = "Hello needs fields ['capacity', 'depth', 'expand', 'fingerprint', ...], got [..., 'feature_dtype', ...]"
    answer = peer.answer(Error("malformed", said))
    with pytest.raises(VersionMismatch, match=rf"^the drafter cannot read this target's Hello, of protocol "
                                              rf"{PROTOCOL_VERSION}: it speaks another version \(it said: Hello needs"):
        remote(channel).handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S)
    assert answer.result().feature_dtype == "float32"


class Refusing(threading.Thread):
    """The fake drafter answers each Hello with `busy`, the first `times` of them (None: all), then with Ready."""

    def __init__(self, peer, times: int | None) -> None:
        super().__init__(daemon=True)
        self.peer, self.times, self.hellos, self.done = peer, times, 0, threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.is_set():
            if not self.peer.sock.poll(20, zmq.POLLIN):
                continue
            assert isinstance(self.peer.recv(), Hello)
            self.hellos += 1
            busy = self.times is None or self.hellos <= self.times
            self.peer.send(Error(DrafterBusy.code, "the drafter serves another target") if busy else ready())

    def stop(self) -> int:
        """Hellos received."""
        self.done.set()
        self.join(WAIT_S)
        return self.hellos


def test_a_hello_told_busy_is_sent_again_briefly(fake_drafter):
    # A drafter learns that its last target left a moment after the connection closed.
    peer, channel = fake_drafter
    refusing = Refusing(peer, times=2)
    assert remote(channel).handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S, busy_retry=WAIT_S).model == "org/drafter"
    assert refusing.stop() == 3


def test_a_drafter_still_busy_after_the_retry_window_raises_drafter_busy(fake_drafter):
    peer, channel = fake_drafter
    refusing = Refusing(peer, times=None)
    t0 = time.monotonic()
    with pytest.raises(DrafterBusy, match=r"^the drafter serves another target$"):
        remote(channel).handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S, busy_retry=0.3)
    assert 0.3 <= time.monotonic() - t0 < 2.0
    assert refusing.stop() >= 2
    assert peer.silent(0.2)  # no refusal of the refusal is sent back


def test_silent_drafter_times_out_naming_the_option(fake_drafter):
    peer, channel = fake_drafter
    client = remote(channel, timeout=0.3)
    shake(peer, client)
    client.start(PROMPT)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeout, match=r"no pool from the drafter within 0.3 s \(raise `drafter_timeout` if it "
                                          r"is only slow\)"):
        client.pool()
    assert 0.3 <= time.monotonic() - t0 < 2.0


def test_absent_drafter_times_out_naming_the_ready_option(endpoint):
    # Nothing ever binds the endpoint: no connection is made, so this is a timeout, not a death.
    channel = Channel.connect(endpoint, peer="drafter")
    try:
        t0 = time.monotonic()
        with pytest.raises(PeerTimeout, match=r"no handshake from the drafter within 0.3 s \(raise `ready_timeout`"):
            remote(channel).handshake(TARGET, FINGERPRINT, CAPACITY, 0.3)
        assert time.monotonic() - t0 < 2.0
    finally:
        channel.close()


def test_closed_drafter_is_peer_died_long_before_the_timeout(fake_drafter):
    peer, channel = fake_drafter
    client = remote(channel, timeout=60.0)
    shake(peer, client)
    client.start(PROMPT)
    peer.recv()
    peer.close()
    t0 = time.monotonic()
    with pytest.raises(PeerDied, match=r"the drafter process closed its connection while this side waited for "
                                       r"pool \(it exited or was killed"):
        client.pool()
    assert time.monotonic() - t0 < 5.0


def test_remote_drafter_against_the_real_server(endpoint):
    # The client and server of the project, with nothing crafted: a full request, then a clean shutdown.
    listener = Listener.bind(endpoint)
    thread = threading.Thread(target=DrafterServer(listener, load(ModelOptions(model="mock"), "drafter")).serve,
                              daemon=True)
    thread.start()
    channel = Channel.connect(endpoint, peer="drafter")
    try:
        client = remote(channel, pool=POOL)
        assert client.handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S).model == "mock"
        client.start(PROMPT)
        first = client.pool().pool
        client.commit([int(first.token[0]), 7])
        drafted = client.pool()
        second, seconds = drafted.pool, drafted.seconds
        for pool in (first, second):
            assert isinstance(pool, Pool) and len(pool) == POOL.size
        assert seconds > 0
        client.end()
        client.shutdown()
        thread.join(WAIT_S)
        assert not thread.is_alive()
    finally:
        channel.close()
        if thread.is_alive():  # only after a failure above: a fresh target may stop it once the first left
            channel = Channel.connect(endpoint, peer="drafter")
            remote(channel, pool=POOL).handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S)
            channel.send(Shutdown())
            thread.join(WAIT_S)
            channel.close()
        listener.close()


def test_a_cut_pool_is_taken_only_when_it_was_asked_for(fake_drafter):
    peer, channel = fake_drafter
    client = remote(channel)
    shake(peer, client)
    client.start(PROMPT)
    assert isinstance(peer.recv(), Start)
    first_level = pool_msg(token=[3, 9], parent=[-1, -1], logp=[-0.1, -2.0], expanded=[False, False])
    client.waiting(cut=NOW)
    waiting = peer.recv()
    assert isinstance(waiting, Waiting) and (waiting.request, waiting.round, waiting.cut) == (1, 0, 1)
    peer.send(first_level)
    assert client.pool().pool.depth.tolist() == [1, 1]
    client.commit([9, 1])
    assert isinstance(peer.recv(), Commit)
    peer.send(pool_msg(1, 1, token=[3, 9], parent=[-1, -1], logp=[-0.1, -2.0], expanded=[False, False]))
    with pytest.raises(InvalidPoolMessage, match=r"2 candidates on levels of \[2\]; the handshake's pool"):
        client.pool()  # not asked for early this round: only a whole pool is taken


def test_an_error_from_the_drafter_before_start_is_raised_at_start(fake_drafter):
    peer, channel = fake_drafter
    client = RemoteDrafter(channel, VOCAB, POOL, WAIT_S)
    answer = peer.answer(Ready(PROTOCOL_VERSION, VOCAB, FINGERPRINT, "fake"))
    client.handshake("mock", FINGERPRINT, CAPACITY, WAIT_S)
    answer.result()
    peer.send(Error("stale", "end of request 3, but no request is open"))
    time.sleep(0.2)
    with pytest.raises(PeerError, match=r"peer reported stale: end of request 3, but no request is open"):
        client.start(PROMPT)


def test_a_ready_that_asks_for_layers_the_target_lacks_is_refused(fake_drafter):
    peer, channel = fake_drafter
    client = remote(channel)
    answer = peer.answer(ready(feature_layers="2,16,40"))
    with pytest.raises(MalformedMessage, match=r"the drafter asks for the inputs of layers \[2, 16, 40\]; the "
                                               r"target has 32"):
        client.handshake(TARGET, FINGERPRINT, CAPACITY, WAIT_S, shape=(4096, 32))
    answer.result()
    assert isinstance(peer.recv(), Error) and not client.wants_features
