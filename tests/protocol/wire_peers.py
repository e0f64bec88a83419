"""Wire-level test peers: bare sockets that play either side, and a Hello the mock drafter accepts.

A bare socket sends whatever frames a test crafts, which the project's own Channel never would. RawPeer
is a target's DEALER; FakeDrafter a drafter's ROUTER, which learns the target's routing id from the first
message it receives (`answer` receives and replies on a thread, for a reply the target waits for). Every
wait has a timeout, so a peer that stays silent fails a test instead of hanging it.
"""

from __future__ import annotations

import threading

import zmq

from models.options import ModelOptions
from models.tokenizers import MockTokenizer
from pipeline.config import PoolConfig
from protocol.codec import decode, encode
from protocol.messages import PROTOCOL_VERSION, Hello, Message

VOCAB = ModelOptions().mock_vocab  # what the mock drafter loads with default options
FINGERPRINT = MockTokenizer(VOCAB).fingerprint
POOL = PoolConfig(topk=4, depth=3, expand=2)  # 20 candidates: small, still three levels deep
CAPACITY = 256
WAIT_S = 10.0  # generous: a reply normally takes milliseconds; this only bounds a failing test


def hello(**change) -> Hello:
    """A Hello the mock drafter accepts, with `change` applied."""
    fields = dict(version=PROTOCOL_VERSION, vocab_size=VOCAB, fingerprint=FINGERPRINT, model="mock",
                  topk=POOL.topk, depth=POOL.depth, expand=POOL.expand, capacity=CAPACITY)
    fields.update(change)
    return Hello(**fields)


class RawPeer:
    """A bare DEALER socket, as a target: sends any frames, receives with a timeout."""

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock

    def send(self, msg: Message) -> None:
        self.send_frames(encode(msg))

    def send_frames(self, frames: list[bytes]) -> None:
        assert self.sock.poll(int(WAIT_S * 1000), zmq.POLLOUT), "cannot send"
        self.sock.send_multipart(frames)

    def recv(self, timeout: float = WAIT_S) -> Message:
        assert self.sock.poll(int(timeout * 1000), zmq.POLLIN), f"no message within {timeout} s"
        return decode(self.sock.recv_multipart())

    def silent(self, seconds: float) -> bool:
        """True when nothing arrives for `seconds`."""
        return not self.sock.poll(int(seconds * 1000), zmq.POLLIN)

    def close(self) -> None:
        self.sock.close(0)


class FakeDrafter(RawPeer):
    """A bare ROUTER socket, as a drafter: replies go to the peer that spoke last."""

    def __init__(self, sock: zmq.Socket) -> None:
        super().__init__(sock)
        self.peer: bytes | None = None

    def send_frames(self, frames: list[bytes]) -> None:
        assert self.peer is not None, "no target has spoken yet"
        self.sock.send_multipart([self.peer, *frames])

    def recv(self, timeout: float = WAIT_S) -> Message:
        assert self.sock.poll(int(timeout * 1000), zmq.POLLIN), f"no message within {timeout} s"
        self.peer, *frames = self.sock.recv_multipart()
        return decode(frames)

    def answer(self, reply: Message | list[bytes]) -> Answer:
        """On a thread: receive the next message, then send `reply` (a message or raw frames) to its sender."""
        return Answer(self, reply)


class Answer(threading.Thread):
    def __init__(self, peer: FakeDrafter, reply) -> None:
        super().__init__(daemon=True)
        self.peer, self.reply, self.got = peer, reply, None
        self.start()

    def run(self) -> None:
        self.got = self.peer.recv()
        self.peer.send_frames(self.reply if isinstance(self.reply, list) else encode(self.reply))

    def result(self) -> Message:
        """The message the reply answered."""
        self.join(WAIT_S)
        assert self.got is not None, "the fake drafter received nothing"
        return self.got


def raw_socket(kind: int = zmq.DEALER) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    return sock
