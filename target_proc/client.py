"""The target's side of the wire: a DrafterClient that talks to the drafter process."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from pipeline.config import PoolConfig
from pipeline.pool import InvalidPool, Pool, out_of_vocab
from protocol.errors import (HandshakeMismatch, InvalidPoolMessage, PeerError, ProtocolError, StaleMessage,
                             TokenOutOfRange, VersionMismatch)
from protocol.messages import (PROTOCOL_VERSION, Commit, End, Error, Hello, PoolMsg, Ready, Shutdown,
                               Start)
from protocol.transport import Channel

log = logging.getLogger("target")


class RemoteDrafter:
    """DrafterClient over a Channel. Every received message is checked before it is used."""

    def __init__(self, channel: Channel, vocab_size: int, pool: PoolConfig, timeout: float) -> None:
        self.channel = channel
        self.vocab_size = vocab_size
        self.pool_config = pool
        self.timeout = timeout
        self.request = 0
        self.round = 0

    def handshake(self, model: str, fingerprint: str, capacity: int, timeout: float) -> Ready:
        """Hello -> Ready; raises VersionMismatch or HandshakeMismatch naming both models."""
        c = self.pool_config
        self.channel.send(Hello(PROTOCOL_VERSION, self.vocab_size, fingerprint, model, c.topk, c.depth,
                                c.expand, capacity))
        reply = self._recv(timeout, "ready_timeout", "handshake", (Ready, Error))
        if isinstance(reply, Error):
            kind = {"version": VersionMismatch, "mismatch": HandshakeMismatch}.get(reply.code)
            raise kind(reply.message) if kind else PeerError(reply.code, reply.message)
        try:
            if reply.version != PROTOCOL_VERSION:
                raise VersionMismatch(f"drafter speaks protocol {reply.version}, target {PROTOCOL_VERSION}")
            if reply.vocab_size != self.vocab_size or reply.fingerprint != fingerprint:
                raise HandshakeMismatch(
                    f"target {model!r} (vocabulary {self.vocab_size}, tokenizer {fingerprint}) and drafter "
                    f"{reply.model!r} (vocabulary {reply.vocab_size}, tokenizer {reply.fingerprint}) do not "
                    f"share a tokenizer")
        except ProtocolError as e:
            self._refuse(e)
            raise
        return reply

    def start(self, prompt: Sequence[int]) -> None:
        self.request += 1
        self.round = 0
        self.channel.send(Start(self.request, np.asarray(prompt, np.int32)))

    def commit(self, tokens: Sequence[int]) -> None:
        self.round += 1
        self.channel.send(Commit(self.request, self.round, np.asarray(tokens, np.int32)))

    def pool(self) -> tuple[Pool, float]:
        msg = self._recv(self.timeout, "drafter_timeout", "pool", (PoolMsg, Error))
        try:
            if isinstance(msg, Error):
                raise PeerError(msg.code, msg.message)
            if (msg.request, msg.round) != (self.request, self.round):
                raise StaleMessage(f"pool for request {msg.request} round {msg.round}, but the target waits "
                                   f"for request {self.request} round {self.round}")
            if problem := out_of_vocab(msg.token, self.vocab_size, "pool token"):
                raise TokenOutOfRange(problem)
            try:
                pool = Pool.from_edges(msg.token, msg.parent, msg.logp, msg.expanded,
                                       max_depth=self.pool_config.depth)
            except InvalidPool as e:
                raise InvalidPoolMessage(f"pool for round {msg.round}: {e}") from None
        except ProtocolError as e:
            self._refuse(e)
            raise
        return pool, msg.seconds

    def end(self) -> None:
        self.channel.send(End(self.request))

    def shutdown(self) -> None:
        self.channel.send(Shutdown())

    def _recv(self, timeout, setting, what, expect):
        try:
            return self.channel.recv(timeout, setting, what, expect)
        except ProtocolError as e:
            self._refuse(e)
            raise

    def _refuse(self, error: ProtocolError) -> None:
        """Tell the drafter why its message was refused (it logs it); never let this mask the error."""
        if not isinstance(error, PeerError):
            try:
                self.channel.send(Error(error.code, str(error), self.request))
            except Exception as e:  # the peer may be gone; the original error is what matters
                log.debug("could not send the error reply: %s", e)
