"""ZeroMQ sockets carrying codec frames: the drafter's Listener (ROUTER) and the target's Channel (DEALER).

The drafter binds and hears every peer that connects, each tagged by its connection, so that it can serve one
target and tell any other that it is busy; the target connects. Both refuse a frame over MAX_FRAME_BYTES, queue
few messages per peer and exchange ZMTP heartbeats; the listener closes a connection whose handshake is not done
within HANDSHAKE_IVL_MS. With keys, CURVE encrypts every frame and authenticates both ends, the server admitting
the client keys its `trusted` test accepts (a ZAP handler, which also runs in clear: it makes libzmq refuse ZMTP
1.0 and 2.0 peers, whose departures could not be told). docs/security.md says what a peer cannot do. The
connecting side watches its socket's monitor (PeerDied, AccessDenied, NothingAnswers), every wait has a timeout
that names the setting to raise, and within `protocol.wakeup.woken_by_signals` a signal ends any wait at once.
Sockets close with linger 0 through `close`."""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import re
import shutil
import socket as pysocket
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import zmq
from zmq.utils.monitor import recv_monitor_message

from pipeline.config import InputError
from protocol import wakeup
from protocol.codec import MAX_FRAMES, decode, encode
from protocol.errors import AccessDenied, BadArray, PeerDied, PeerTimeout
from protocol.keys import Keypair
from protocol.limits import MAX_FEATURE_BYTES, MAX_FRAME_BYTES
from protocol.log_limit import Throttle
from protocol.messages import Message
from protocol.receive import hand_back_memory, recv_frames

log = logging.getLogger("transport")

MAX_IPC_PATH = 107  # bytes of a unix socket path (sun_path holds 108 with the terminating NUL)
QUEUED_MESSAGES = 8  # per peer and direction: a target sends at most two messages before a reply
CONNECT_TIMEOUT_S = 5.0  # how long a target waits for anything to answer at its drafter's address
SEND_TIMEOUT_MS = 5000  # a message the target cannot hand to any connection for this long: the drafter is gone
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 10_000  # a peer silent this long (its host gone, say) counts as disconnected
# A connection to the drafter that has not finished its handshake this long after it was made is closed (libzmq's
# default: 30 s), so that connections that never finish it hold the drafter's descriptors for seconds, not half a
# minute. A target's CURVE handshake takes a few ms at an idle drafter and up to about 1 s while the drafter imports
# torch and loads its model on a loaded two-core host (python -m bench.protocol --handshake); across a network it adds a few
# round trips.
HANDSHAKE_IVL_MS = 5000
PRIVATE_PREFIX = "specpair-"  # private socket directories: tempdir/specpair-XXXX/drafter.sock
OWNER_FILE = "launcher.pid"  # the process that made a private directory, for removal after it was killed
ZAP_DOMAIN = b"specpair"
_HANDSHAKE_FAILED = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the key was refused",
                     zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the peers' security settings do not match",
                     zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the peer's key is not the expected one"}
# What the listener logs: a failed handshake as what happened, not as a guess about keys
_REFUSED = {zmq.EVENT_HANDSHAKE_FAILED_AUTH: "a connection was refused: its key is not authorized",
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "a connection broke off its handshake: it speaks another protocol or "
                                                 "another ZeroMQ security mechanism (an older ZeroMQ, a port scanner, "
                                                 "a client without or with CURVE keys)",
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "a connection closed or failed during its handshake (a port probe, "
                                                  "a client of another protocol, or a CURVE key that does not match)"}


class EndpointError(InputError):
    """An endpoint that cannot be used: malformed, taken by another process, or not of this machine."""


class NothingAnswers(EndpointError):
    """No connection could be made to the endpoint: nothing listens there."""


@dataclass(frozen=True, slots=True)
class ClientKeys:
    own: Keypair
    server: bytes  # the drafter's public key, Z85


@dataclass(frozen=True, slots=True)
class ServerKeys:
    own: Keypair
    trusted: Callable[[bytes], bool]  # Z85 client key -> admit it


@dataclass(frozen=True, slots=True)
class Received:
    """A message from a connected peer: its routing id, its connection's descriptor and the frames (at most
    MAX_FRAMES kept; `count` is how many the message had), read at `at` (perf_counter seconds)."""

    peer: bytes
    fd: int
    frames: list[bytes]
    count: int = -1
    at: float = field(default_factory=time.perf_counter, compare=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            object.__setattr__(self, "count", len(self.frames))


@dataclass(frozen=True, slots=True)
class Closed:
    """A connection closed (its peer exited, was killed, or missed its heartbeats); protocol.peers names the peer."""

    fd: int


# -- endpoints ----------------------------------------------------------------------------------------------

def check_endpoint(endpoint: str) -> str:
    """Validate an endpoint named by the user; raises ValueError naming `endpoint`."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        if not path or not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ValueError(f"`endpoint` {endpoint!r}: the socket's directory does not exist")
        if len(path.encode()) > MAX_IPC_PATH:
            raise ValueError(f"`endpoint` {endpoint!r}: a socket path holds at most {MAX_IPC_PATH} bytes, this one "
                             f"{len(path.encode())}")
        return endpoint
    if endpoint.startswith("tcp://"):
        try:
            parts = urlsplit(endpoint)
            port = parts.port
        except ValueError:  # a bracketed host that is no IPv6 address, or a port that is no number
            raise ValueError(f"`endpoint` {endpoint!r} must look like tcp://HOST:PORT") from None
        if not parts.hostname or port is None or parts.path:
            raise ValueError(f"`endpoint` {endpoint!r} must look like tcp://HOST:PORT")
        if problem := _host_problem(parts.hostname):
            raise ValueError(f"`endpoint` {endpoint!r}: {problem}")
        if port == 0:  # the drafter would bind a port of the system's choice that its target cannot know
            raise ValueError(f"`endpoint` {endpoint!r}: port 0 names no port the other side could connect to; name "
                             f"a port, or tcp for a free loopback port")
        return endpoint
    raise ValueError(f"`endpoint` {endpoint!r} must be ipc://PATH, tcp://HOST:PORT or tcp (loopback)")


def _host_problem(host: str) -> str | None:
    """What is wrong with a tcp endpoint's host (an IP address, a host name, or * to bind every interface),
    or None; checked as written, without a lookup."""
    if host == "*":
        return None
    if ":" in host or re.fullmatch(r"[0-9.]+", host):  # written as an address: it must be one
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return f"{host} is not an IP address"
        return None
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(re.fullmatch(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?", label)
                                  for label in labels):
        return f"{host!r} is neither an IP address nor a host name"
    return None


def private_ipc_endpoint(owner: int | None = None) -> str:
    """An ipc endpoint in a fresh directory only this user can enter; `owner` (a pid) is written there, so
    that remove_stale_private_dirs can remove the directory once that process is gone."""
    directory = tempfile.mkdtemp(prefix=PRIVATE_PREFIX)
    if owner is not None:
        Path(directory, OWNER_FILE).write_text(f"{owner}\n")
    return f"ipc://{directory}/drafter.sock"


def remove_stale_private_dirs() -> list[str]:
    """Remove this user's private socket directories whose owner process is gone (a launcher killed with
    SIGKILL cannot remove its own) -> the directories removed. Directories without an owner are kept."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(PRIVATE_PREFIX + "*"):
        try:
            if path.lstat().st_uid != os.getuid() or not stat.S_ISDIR(path.lstat().st_mode):
                continue
            pid = int((path / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def endpoint_in_use(endpoint: str) -> str | None:
    """Why binding `endpoint` would fail or take it from another process, or None when it is free.
    ipc: a socket file some process listens on (binding would silently take it over), or a file that is not a socket; a
    socket file nobody listens on is free. tcp: a port bound on that address."""
    if endpoint.startswith("ipc://"):
        return _ipc_in_use(endpoint[len("ipc://"):])
    parts = urlsplit(endpoint)
    host = "" if parts.hostname == "*" else parts.hostname
    try:
        family, kind, proto, _, address = pysocket.getaddrinfo(host or None, parts.port, type=pysocket.SOCK_STREAM,
                                                               flags=pysocket.AI_PASSIVE)[0]
    except (pysocket.gaierror, UnicodeError):
        return None  # an interface name, say: the drafter's bind reports what is wrong with it
    with pysocket.socket(family, kind, proto) as s:
        s.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_REUSEADDR, 1)  # as ZeroMQ binds
        try:
            s.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return f"port {parts.port} on {parts.hostname} is taken by another process"
            if e.errno == errno.EADDRNOTAVAIL:
                return f"{parts.hostname} is not an address of this machine"
            return f"{e.strerror}"
    return None


def _ipc_in_use(path: str) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(mode):
        return f"{path} exists and is not a socket"
    with pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return None  # left behind by a process that is gone
        except OSError as e:
            return f"{path}: {e.strerror}"
    return f"another process listens on {path}"


# -- sockets ------------------------------------------------------------------------------------------------

def _bounded(sock: zmq.Socket, frame_bytes: int = MAX_FRAME_BYTES) -> zmq.Socket:
    """Socket options of both ends: linger 0, the frame limit (at most MAX_FRAME_BYTES, or MAX_FEATURE_BYTES
    for a drafter that takes features), short queues and heartbeats."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, min(frame_bytes, max(MAX_FRAME_BYTES, MAX_FEATURE_BYTES)))
    sock.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    return sock


class _Trust:
    """The ZAP credentials provider: admits the client keys `trusted` accepts, logs the others."""

    def __init__(self, trusted: Callable[[bytes], bool], throttle: Throttle) -> None:
        self.trusted, self.throttle = trusted, throttle

    def callback(self, domain: str, key: bytes) -> bool:
        if self.trusted(key):
            return True
        self.throttle.warning(log, "unknown key", "refused a connection with an unknown key %s (authorize a target "
                              "with launch/pair.sh keys --allow KEY)", key.decode("ascii", "replace"))
        return False


TRIM_DEPARTURES = 32  # closed connections after which the first idle second hands freed memory back
IDLE_S = 1.0


class Listener:
    """The drafter's ROUTER socket: messages from every connected peer, and word of peers that left.
    What libzmq held for a connection (its routing id, up to a frame, and its queues) is freed in small pieces that
    glibc keeps; after TRIM_DEPARTURES departures, the first second without messages hands them back."""

    def __init__(self, context: zmq.Context, sock: zmq.Socket, monitor: zmq.Socket, auth, endpoint: str,
                 throttle: Throttle) -> None:
        self.context, self.sock, self.monitor, self.auth, self.endpoint = context, sock, monitor, auth, endpoint
        self.throttle = throttle  # one budget of warnings for the ZAP thread's and this thread's
        self.poller = zmq.Poller()
        self.poller.register(monitor, zmq.POLLIN)
        self.poller.register(sock, zmq.POLLIN)
        self.wake = _wake_on_signals(self.poller)
        self.departed = 0  # connections closed since memory was last handed back

    @classmethod
    def bind(cls, endpoint: str, keys: ServerKeys | None = None, frame_bytes: int = MAX_FRAME_BYTES) -> Listener:
        """Bind `endpoint`; OSError naming it when it is taken (an ipc socket in use is never taken over).
        A peer that sends a frame over `frame_bytes` (at most MAX_FRAME_BYTES, or MAX_FEATURE_BYTES for a
        drafter that takes features) is disconnected."""
        if endpoint.startswith("ipc://") and (reason := endpoint_in_use(endpoint)):
            raise OSError(errno.EADDRINUSE, f"cannot bind {endpoint}: {reason}")
        context = zmq.Context()
        auth = None
        throttle = Throttle()
        try:
            from zmq.auth.thread import ThreadAuthenticator

            # In clear too: with a ZAP handler libzmq refuses ZMTP 1.0/2.0 peers (NULL peers are all admitted)
            auth = ThreadAuthenticator(context, log=logging.getLogger("transport.zap"))
            auth.start()
            if keys is not None:
                auth.configure_curve_callback(ZAP_DOMAIN.decode(),
                                              credentials_provider=_Trust(keys.trusted, throttle))
            sock = _bounded(context.socket(zmq.ROUTER), frame_bytes)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a peer that has gone fails, not vanishes
            sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
            sock.zap_domain = ZAP_DOMAIN
            if keys is not None:
                sock.curve_server = True
                sock.curve_publickey, sock.curve_secretkey = keys.own.public, keys.own.secret
            monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                              | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                              | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            _shut(context, auth)
            raise OSError(e.errno, f"cannot bind {endpoint}: {e}") from None
        return cls(context, sock, monitor, auth, endpoint, throttle)

    def recv(self, timeout: float | None = None) -> Received | Closed | None:
        """The next message or closed connection; None after `timeout` s. Closings come first when both wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            trim = self.departed >= TRIM_DEPARTURES and (left is None or left > IDLE_S)  # a whole idle second
            wait = IDLE_S if trim else left
            ready = dict(self.poller.poll(None if wait is None else 0 if timeout == 0 else int(wait * 1000) + 1))
            if not ready and trim:
                hand_back_memory()
                self.departed = 0
            if self.wake in ready:
                wakeup.drain()
            if self.monitor in ready:
                if (event := self._event()) is not None:
                    return event
                continue
            if self.sock in ready:
                if (received := self._message()) is not None:
                    return received
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _message(self) -> Received | None:
        """The message waiting, or None for one that cannot be told apart from others' (dropped)."""
        got = recv_frames(self.sock, 1 + MAX_FRAMES)  # the routing id, then the message's frames
        try:
            # The connection it came by, as the monitor names departures. libzmq attaches it to ZMTP 3 peers,
            # the only ones a ZAP handler admits; a message without it is dropped rather than misattributed.
            fd = got.first.get(zmq.SRCFD)
        except zmq.ZMQError:
            self.throttle.warning(log, "no descriptor", "dropped a message from a connection libzmq names no "
                                  "descriptor for")
            return None
        if got.excess:
            self.throttle.warning(log, "frames", "discarded a message of %d frames (at most %d are read)",
                                  got.count - 1, MAX_FRAMES)
        return Received(got.first.bytes, fd, got.rest, got.count - 1)

    def departures(self) -> list[int]:
        """Descriptors of connections that closed, from the events already queued (no waiting)."""
        gone = []
        while self.monitor.poll(0):
            if isinstance(event := self._event(), Closed):
                gone.append(event.fd)
        return gone

    def _event(self) -> Closed | None:
        event = recv_monitor_message(self.monitor)
        if event["event"] == zmq.EVENT_DISCONNECTED:
            self.departed += 1
            return Closed(int(event["value"]))
        if event["event"] in _REFUSED:
            self.throttle.warning(log, f"handshake {event['event']}", _REFUSED[event["event"]])
        return None

    def send(self, peer: bytes, msg: Message) -> bool:
        """Send to one peer without blocking -> whether it was queued: a peer that has left (or stopped
        reading) misses it."""
        try:
            self.sock.send_multipart([peer, *encode(msg)], copy=True, flags=zmq.NOBLOCK)
        except zmq.Again:
            self.throttle.warning(log, "unread", "dropped a %s reply to a peer that does not read its replies",
                                  type(msg).__name__)
            return False
        except zmq.ZMQError as e:
            if e.errno != errno.EHOSTUNREACH:
                raise
            log.debug("dropped a %s reply to a peer that has gone", type(msg).__name__)
            return False
        return True

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)
        _shut(self.context, self.auth)


def _wake_on_signals(*pollers: zmq.Poller) -> int | None:
    """Register the signal wake-up socket (protocol.wakeup) with each poller -> its file descriptor (what a
    poll names a non-ZeroMQ socket by), or None outside a block."""
    wake = wakeup.reader()
    if wake is None:
        return None
    for poller in pollers:
        poller.register(wake.fileno(), zmq.POLLIN)
    return wake.fileno()


def _shut(context: zmq.Context, auth) -> None:
    if auth is not None:
        auth.stop()
    context.destroy(0)


class Channel:
    """The target's DEALER socket to its drafter; `recv` decodes and validates, `send` encodes."""

    def __init__(self, context: zmq.Context, sock: zmq.Socket, monitor: zmq.Socket, peer: str, endpoint: str,
                 keys: ClientKeys | None) -> None:
        self.context, self.sock, self.monitor = context, sock, monitor
        self.peer = peer  # "drafter", for messages
        self.endpoint, self.keys = endpoint, keys
        self.answered = False  # a connection to the endpoint was made (something listens there)
        self.connected = False  # a connection completed its handshake
        self.poller = zmq.Poller()
        self.poller.register(sock, zmq.POLLIN)
        self.poller.register(monitor, zmq.POLLIN)
        self.send_poller = zmq.Poller()
        self.send_poller.register(sock, zmq.POLLOUT)
        self.send_poller.register(monitor, zmq.POLLIN)
        self.monitor_poller = zmq.Poller()  # waiting for an answer: the monitor alone
        self.monitor_poller.register(monitor, zmq.POLLIN)
        self.wake = _wake_on_signals(self.poller, self.send_poller, self.monitor_poller)

    @classmethod
    def connect(cls, endpoint: str, peer: str, keys: ClientKeys | None = None) -> Channel:
        context = zmq.Context()
        sock = _bounded(context.socket(zmq.DEALER))
        if keys is not None:
            sock.curve_serverkey = keys.server
            sock.curve_publickey, sock.curve_secretkey = keys.own.public, keys.own.secret
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
                                          | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as e:
            sock.disable_monitor()
            context.destroy(0)
            raise EndpointError(f"cannot connect to `endpoint` {endpoint}: {e}") from None
        return cls(context, sock, monitor, peer, endpoint, keys)

    def send(self, msg: Message) -> None:
        """Queue one message. A DEALER holds it while no connection can take it (a secure handshake failing, say): this
        waits for one, raising what the monitor reports (AccessDenied, PeerDied) or PeerDied after SEND_TIMEOUT_MS."""
        frames = encode(msg)
        deadline = time.monotonic() + SEND_TIMEOUT_MS / 1000
        while True:
            try:
                self.sock.send_multipart(frames, copy=True, flags=zmq.NOBLOCK)
                return
            except zmq.Again:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerDied(f"the {self.peer} at {self.endpoint} takes no messages: no connection to it has "
                               f"lasted {SEND_TIMEOUT_MS // 1000} s")
            ready = dict(self.send_poller.poll(int(left * 1000) + 1))
            if self.wake in ready:
                wakeup.drain()
            if self.monitor in ready:
                self._event(f"a chance to send {type(msg).__name__}")

    def wait_answer(self, timeout: float) -> None:
        """Return once something answers at the endpoint (a connection is made: a drafter answers from the
        moment it starts, while its model still loads); NothingAnswers after `timeout` s, what the monitor
        reports (AccessDenied) meanwhile."""
        deadline = time.monotonic() + timeout
        while not self.answered:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NothingAnswers(f"nothing answers at {self.endpoint} within {timeout:g} s: no {self.peer} "
                                     f"listens there (start it, or check the address; raise `connect_timeout` "
                                     f"for one that takes longer to start)")
            ready = dict(self.monitor_poller.poll(int(left * 1000) + 1))
            if self.wake in ready:
                wakeup.drain()
            if self.monitor in ready:
                self._event(f"an answer at {self.endpoint}")

    def pending(self) -> bool:
        """Whether a message is waiting (none should be, when this side has not asked for one)."""
        return bool(self.sock.poll(0, zmq.POLLIN))

    def recv_frames(self, timeout: float | None, setting: str, what: str) -> list[bytes]:
        """Raw frames of the next message; PeerTimeout after `timeout` s, PeerDied if the peer left,
        AccessDenied if the secure handshake failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = dict(self.poller.poll(None if left is None else int(left * 1000) + 1))
            if self.wake in events:
                wakeup.drain()
            if self.sock in events:
                got = recv_frames(self.sock, MAX_FRAMES)
                if got.excess:
                    raise BadArray(f"a message from the {self.peer} has {got.count} frames; a message has at most "
                                   f"{MAX_FRAMES}")
                return [got.first.bytes, *got.rest]
            if self.monitor in events:
                self._event(what)
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise PeerTimeout(f"no {what} from the {self.peer} within {timeout:g} s "
                                  f"(raise `{setting}` if it is only slow)")

    def _event(self, what: str) -> None:
        event = recv_monitor_message(self.monitor)["event"]
        if event == zmq.EVENT_CONNECTED:
            self.answered = True
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.answered = self.connected = True
        elif event == zmq.EVENT_DISCONNECTED and self.connected:
            raise PeerDied(f"the {self.peer} process closed its connection while this side waited for {what} "
                           f"(it exited or was killed, or missed its heartbeats for {HEARTBEAT_TIMEOUT_MS // 1000} "
                           f"s; see its log above)")
        elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH and self.keys is not None:
            raise AccessDenied(f"the {self.peer} at {self.endpoint} refused this side's key: on its host, run "
                               f"launch/pair.sh keys --allow '{self.keys.own.public.decode()}'")
        elif event in _HANDSHAKE_FAILED:
            if self.keys is not None:
                raise AccessDenied(f"the secure handshake with {self.endpoint} failed: the process there does not "
                                   f"hold the secret key of `drafter_key` {self.keys.server.decode()[:8]}..., or "
                                   f"does not use CURVE (a drafter started without keys, or another program)")
            raise AccessDenied(f"the handshake with {self.endpoint} failed: the process there expects CURVE keys "
                               f"(name the {self.peer}'s public key with `drafter_key`), or is not a {self.peer}")

    def recv(self, timeout: float | None, setting: str, what: str,
             expect: tuple[type[Message], ...] | None = None) -> Message:
        return decode(self.recv_frames(timeout, setting, what), expect)

    def close(self, linger: float = 0.0) -> None:
        """Close; with `linger` > 0, first let queued messages (a Shutdown) leave for up to that many s."""
        self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(int(linger * 1000))
        self.context.term()  # waits for the linger
