"""A ZeroMQ PAIR channel carrying codec frames, with timeouts and peer-death detection.

The drafter binds, the target connects. The connecting side watches the socket's monitor, so a drafter
that exits or is killed turns into PeerDied at the next wait instead of a hang; every wait also has a
timeout that names the setting to raise. Sockets close with linger=0 through `close`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket as pysocket
import tempfile
import time
from urllib.parse import urlsplit

import zmq
from zmq.utils.monitor import recv_monitor_message

from protocol.codec import decode, encode
from protocol.errors import PeerDied, PeerTimeout
from protocol.messages import Message

log = logging.getLogger("transport")


def check_endpoint(endpoint: str) -> str:
    """Validate an endpoint named by the user; raises ValueError naming `endpoint`."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        if not path or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"`endpoint` {endpoint!r}: the socket's directory does not exist")
        return endpoint
    if endpoint.startswith("tcp://"):
        parts = urlsplit(endpoint)
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or parts.path:
            raise ValueError(f"`endpoint` {endpoint!r} must look like tcp://HOST:PORT")
        return endpoint
    raise ValueError(f"`endpoint` {endpoint!r} must be ipc://PATH, tcp://HOST:PORT or tcp (loopback)")


def private_ipc_endpoint() -> str:
    """An ipc endpoint in a fresh directory only this user can enter."""
    return f"ipc://{tempfile.mkdtemp(prefix='specpair-')}/drafter.sock"


def loopback_tcp_endpoint() -> str:
    """tcp://127.0.0.1:PORT on a port that was free a moment ago."""
    with pysocket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def is_loopback(endpoint: str) -> bool:
    if endpoint.startswith("ipc://"):
        return True
    host = urlsplit(endpoint).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Channel:
    """One end of a PAIR socket; `recv` decodes and validates, `send` encodes."""

    def __init__(self, sock: zmq.Socket, monitor: zmq.Socket | None, peer: str) -> None:
        self.sock = sock
        self.monitor = monitor
        self.peer = peer  # "drafter" or "target", for messages
        self.connected = False
        self.poller = zmq.Poller()
        self.poller.register(sock, zmq.POLLIN)
        if monitor is not None:
            self.poller.register(monitor, zmq.POLLIN)

    @classmethod
    def bind(cls, endpoint: str, peer: str) -> Channel:
        sock = zmq.Context.instance().socket(zmq.PAIR)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            sock.close(0)
            raise OSError(f"cannot bind {endpoint}: {e}") from None
        return cls(sock, None, peer)

    @classmethod
    def connect(cls, endpoint: str, peer: str) -> Channel:
        sock = zmq.Context.instance().socket(zmq.PAIR)
        sock.setsockopt(zmq.LINGER, 0)
        monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        sock.connect(endpoint)
        return cls(sock, monitor, peer)

    def send(self, msg: Message) -> bool:
        """Send one message -> whether it was queued.

        The bound side (the drafter) never blocks: a PAIR socket with no peer would hold the reply until
        the next peer connects and hand it a stale message, so a reply to a peer that has left is dropped.
        """
        if self.monitor is not None:
            self.sock.send_multipart(encode(msg), copy=True)
            return True
        try:
            self.sock.send_multipart(encode(msg), copy=True, flags=zmq.NOBLOCK)
        except zmq.Again:
            log.warning("the %s is gone; dropped a %s reply", self.peer, type(msg).__name__)
            return False
        return True

    def wait_gone(self, timeout: float) -> None:
        """Wait up to `timeout` s for the peer to close its end (after asking it to shut down), so that
        closing with linger=0 does not discard the request before it left."""
        deadline = time.monotonic() + timeout
        while self.monitor is not None and time.monotonic() < deadline:
            if not self.monitor.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                return
            if recv_monitor_message(self.monitor)["event"] == zmq.EVENT_DISCONNECTED:
                return

    def recv_frames(self, timeout: float | None, setting: str, what: str) -> list[bytes]:
        """Raw frames of the next message; PeerTimeout after `timeout` s, PeerDied if the peer left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = dict(self.poller.poll(None if left is None else int(left * 1000) + 1))
            if self.sock in events:
                return self.sock.recv_multipart(copy=True)
            if self.monitor is not None and self.monitor in events:
                event = recv_monitor_message(self.monitor)["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self.connected = True
                elif event == zmq.EVENT_DISCONNECTED and self.connected:
                    raise PeerDied(f"the {self.peer} process closed its connection while this side waited "
                                   f"for {what} (it exited or was killed; see its log above)")
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise PeerTimeout(f"no {what} from the {self.peer} within {timeout:g} s "
                                  f"(raise `{setting}` if it is only slow)")

    def recv(self, timeout: float | None, setting: str, what: str,
             expect: tuple[type[Message], ...] | None = None) -> Message:
        return decode(self.recv_frames(timeout, setting, what), expect)

    def close(self) -> None:
        if self.monitor is not None:
            self.sock.disable_monitor()
            self.monitor.close(0)
            self.monitor = None
        self.sock.close(0)
