"""Typed errors of the wire protocol; each carries a short `code` that travels in Error messages."""

from __future__ import annotations

from protocol.limits import MAX_TEXT


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """Peer-provided text made safe for a log line: control characters, terminal escapes and other
    non-printable characters escaped as repr escapes them, and at most `limit` characters kept."""
    text = str(text)
    cut = len(text) > limit
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return text + "..." if cut else text


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


class BadFeatures(ProtocolError):
    """Features a drafter cannot take: a value not finite or beyond the bound a hidden state keeps
    (protocol.messages.check_features), a row wider or narrower than its head takes, another dtype than its
    request's Start, or any features sent to a drafter that is not an EAGLE-3 head."""

    code = "features"


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


class LimitExceeded(ProtocolError):
    """A value beyond what the protocol carries or this machine can hold (protocol.limits)."""

    code = "limit"


class DrafterBusy(ProtocolError):
    """The drafter serves another target; it serves one at a time."""

    code = "busy"


class AccessDenied(ProtocolError):
    """The secure (CURVE) handshake failed: a key is not the expected one, or one side does not use CURVE."""

    code = "access"


class PeerError(ProtocolError):
    """The peer answered with an Error message."""

    code = "peer"

    def __init__(self, peer_code: str, message: str) -> None:
        super().__init__(f"peer reported {printable(peer_code, 40)}: {printable(message)}")
        self.peer_code = peer_code


class PeerDied(RuntimeError):
    """The peer process closed its connection (it exited or was killed)."""


class PeerTimeout(TimeoutError):
    """The peer sent nothing within the configured time."""
