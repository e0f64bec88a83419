"""The drafter's serving loop: answer each Start or Commit with the round's pool, refuse bad input.

A refused message gets an Error reply naming the problem, and the loop goes on serving; nothing the
drafter holds changes on a refused message.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from drafter_proc.drafter import Drafter
from models.load import Loaded
from pipeline.config import CapacityError, PoolConfig
from pipeline.pool import out_of_vocab
from protocol.codec import decode
from protocol.errors import (HandshakeMismatch, MalformedMessage, ProtocolError, StaleMessage, TokenOutOfRange,
                             UnexpectedMessage, VersionMismatch)
from protocol.messages import (PROTOCOL_VERSION, Commit, End, Error, Hello, Message, PoolMsg, Ready, Shutdown,
                               Start)
from protocol.transport import Channel

log = logging.getLogger("drafter")


class DrafterServer:
    def __init__(self, channel: Channel, loaded: Loaded) -> None:
        self.channel = channel
        self.loaded = loaded
        self.drafter: Drafter | None = None
        self._runners: dict[int, object] = {}  # capacity -> runner (KV cache, graphs), made once each
        self.request = -1
        self.round = -1

    def serve(self) -> None:
        """Serve until a Shutdown message arrives."""
        while True:
            frames = self.channel.recv_frames(None, "", "a message")
            msg = None
            try:
                msg = decode(frames)
                if isinstance(msg, Shutdown):
                    return
                reply = self.handle(msg)
            except ProtocolError as e:
                log.warning("refused a message: %s", e)
                reply = Error(e.code, str(e), getattr(msg, "request", self.request))
            except CapacityError as e:  # a request this drafter cannot serve: beyond its KV cache
                log.warning("cannot serve request %d: %s", getattr(msg, "request", self.request), e)
                reply = Error("drafter", str(e), getattr(msg, "request", self.request))
            if reply is not None:
                self.channel.send(reply)

    def handle(self, msg: Message) -> Message | None:
        if isinstance(msg, Hello):
            return self._hello(msg)
        if isinstance(msg, Error):
            log.error("the target reported %s: %s", msg.code, msg.message)
            return None
        if self.drafter is None:
            raise UnexpectedMessage(f"{type(msg).__name__} before the handshake (Hello)")
        if isinstance(msg, Start):
            self._check_tokens(msg.prompt, "prompt")
            pool, seconds = self.drafter.start(msg.prompt)
            self.request, self.round = msg.request, 0
            return self._pool_msg(pool, seconds)
        if isinstance(msg, Commit):
            if self.request < 0:  # before any Start or after End: (-1, 0) would otherwise match
                raise StaleMessage(f"commit for request {msg.request} round {msg.round}, but no request is "
                                   f"open (Start begins one)")
            if (msg.request, msg.round) != (self.request, self.round + 1):
                raise StaleMessage(f"commit for request {msg.request} round {msg.round}, but the drafter "
                                   f"expects request {self.request} round {self.round + 1}")
            self._check_tokens(msg.tokens, "tokens")
            pool, seconds = self.drafter.commit(msg.tokens)
            self.round = msg.round
            return self._pool_msg(pool, seconds)
        if isinstance(msg, End):
            self.request, self.round = -1, -1
            return None
        raise UnexpectedMessage(f"the drafter does not take {type(msg).__name__} messages")

    def _hello(self, hello: Hello) -> Ready:
        if hello.version != PROTOCOL_VERSION:
            raise VersionMismatch(f"target speaks protocol {hello.version}, drafter {PROTOCOL_VERSION}")
        tok = self.loaded.tokenizer
        if hello.vocab_size != self.loaded.vocab_size or hello.fingerprint != tok.fingerprint:
            raise HandshakeMismatch(
                f"target {hello.model!r} (vocabulary {hello.vocab_size}, tokenizer {hello.fingerprint}) and "
                f"drafter {self.loaded.name!r} (vocabulary {self.loaded.vocab_size}, tokenizer "
                f"{tok.fingerprint}) do not share a tokenizer")
        try:
            config = PoolConfig(hello.topk, hello.depth, hello.expand)
        except ValueError as e:
            raise MalformedMessage(f"Hello carries an invalid pool configuration: {e}") from None
        if hello.capacity < 2:
            raise MalformedMessage(f"Hello.capacity must be at least 2, got {hello.capacity}")
        capacity = hello.capacity + config.n_expanded  # committed context plus one pool's scratch
        if capacity not in self._runners:
            try:
                self._runners[capacity] = self.loaded.runner(capacity)
            except (MemoryError, RuntimeError) as e:
                if not out_of_memory(e):  # graph capture and the like fail with their own message
                    raise
                raise CapacityError(f"the drafter cannot allocate a KV cache of {capacity} slots (lower "
                                    f"`max_context`): {type(e).__name__}: {e}") from None
        self.drafter = Drafter(self._runners[capacity], config)
        self.request, self.round = -1, -1
        log.info("handshake with target %r: pool topk=%d depth=%d expand=%d", hello.model, config.topk,
                 config.depth, config.expand)
        who = self.loaded.identity
        return Ready(PROTOCOL_VERSION, self.loaded.vocab_size, tok.fingerprint, self.loaded.name, who["revision"],
                     who["dtype"], who["device"])

    def _check_tokens(self, tokens: np.ndarray, name: str) -> None:
        if problem := out_of_vocab(tokens, self.loaded.vocab_size, name):
            raise TokenOutOfRange(problem)

    def _pool_msg(self, pool, seconds: float) -> PoolMsg:
        return PoolMsg(self.request, self.round, seconds, pool.token.astype(np.int32),
                       pool.parent.astype(np.int32), pool.logp, pool.expanded)


def out_of_memory(error: BaseException) -> bool:
    """Whether an allocation failed for lack of memory: torch raises OutOfMemoryError on CUDA and a plain
    RuntimeError from its CPU allocator."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "memory" in str(error) and "alloc" in str(error).lower())
