"""Typed errors of the wire protocol; each carries a short `code` that travels in Error messages."""

from __future__ import annotations


class ProtocolError(Exception):
    """A message could not be accepted. The receiver answers with an Error message where it can."""

    code = "protocol"


class MalformedMessage(ProtocolError):
    code = "malformed"


class UnknownMessage(ProtocolError):
    code = "unknown-kind"


class UnexpectedMessage(ProtocolError):
    code = "unexpected"


class BadArray(ProtocolError):
    code = "bad-array"


class VersionMismatch(ProtocolError):
    code = "version"


class HandshakeMismatch(ProtocolError):
    code = "mismatch"


class InvalidPoolMessage(ProtocolError):
    code = "invalid-pool"


class TokenOutOfRange(ProtocolError):
    code = "token-range"


class StaleMessage(ProtocolError):
    code = "stale"


class PeerError(ProtocolError):
    """The peer answered with an Error message."""

    code = "peer"

    def __init__(self, peer_code: str, message: str) -> None:
        super().__init__(f"peer reported {peer_code}: {message}")
        self.peer_code = peer_code


class PeerDied(RuntimeError):
    """The peer process closed its connection (it exited or was killed)."""


class PeerTimeout(TimeoutError):
    """The peer sent nothing within the configured time."""
