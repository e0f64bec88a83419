"""Wire-level test peers: bare PAIR sockets that play either side, and a Hello the mock drafter accepts.

A bare socket sends whatever frames a test crafts, which the project's own Channel never would. Every
wait has a timeout, so a peer that stays silent fails a test instead of hanging it.
"""

from __future__ import annotations

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
    """A bare PAIR socket: sends any frames, receives with a timeout."""

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock

    def send(self, msg: Message) -> None:
        self.send_frames(encode(msg))

    def send_frames(self, frames: list[bytes]) -> None:
        # A bound PAIR socket blocks on send until a peer connects; wait for that with a bound.
        assert self.sock.poll(int(WAIT_S * 1000), zmq.POLLOUT), "no peer connected"
        self.sock.send_multipart(frames)

    def recv(self, timeout: float = WAIT_S) -> Message:
        assert self.sock.poll(int(timeout * 1000), zmq.POLLIN), f"no message within {timeout} s"
        return decode(self.sock.recv_multipart())

    def silent(self, seconds: float) -> bool:
        """True when nothing arrives for `seconds`."""
        return not self.sock.poll(int(seconds * 1000), zmq.POLLIN)

    def close(self) -> None:
        self.sock.close(0)


def raw_socket() -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    return sock
