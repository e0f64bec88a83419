"""Endpoints named by the user are checked with a message naming `--endpoint`; a taken endpoint is an
OSError naming it, not a hang, and an ipc socket in use is never taken over; private socket directories
left by a killed launcher are removed by the next one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.transport import (MAX_IPC_PATH, OWNER_FILE, Listener, check_endpoint, endpoint_in_use, is_loopback,
                                loopback_tcp_endpoint, private_ipc_endpoint, remove_stale_private_dirs)


@pytest.mark.parametrize("endpoint", ["ipc:///tmp/drafter.sock", "tcp://127.0.0.1:5555", "tcp://[::1]:5555",
                                      "tcp://example.org:80"])
def test_well_formed_endpoints_pass(endpoint):
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize("endpoint, match", [
    ("ipc:///no/such/dir/drafter.sock", r"`endpoint` 'ipc:///no/such/dir/drafter.sock': the socket's "
                                        r"directory does not exist"),
    ("ipc://", r"`endpoint` 'ipc://': the socket's directory does not exist"),
    ("tcp://127.0.0.1", r"`endpoint` 'tcp://127.0.0.1' must look like tcp://HOST:PORT"),
    ("tcp://127.0.0.1:99999", r"must look like tcp://HOST:PORT"),
    ("tcp://127.0.0.1:55/x", r"must look like tcp://HOST:PORT"),
    ("tcp://:5555", r"must look like tcp://HOST:PORT"),
    ("tcp://127.0.0.1:0", r"`endpoint` 'tcp://127.0.0.1:0': port 0 names no port the other side could connect to"),
    ("udp://127.0.0.1:5555", r"`endpoint` 'udp://127.0.0.1:5555' must be ipc://PATH, tcp://HOST:PORT or tcp"),
    ("drafter.sock", r"must be ipc://PATH, tcp://HOST:PORT or tcp \(loopback\)"),
    ("ipc:///tmp/" + "d" * 100 + ".sock", rf"a socket path holds at most {MAX_IPC_PATH} bytes, this one 110"),
])
def test_malformed_endpoint_names_the_option(endpoint, match):
    with pytest.raises(ValueError, match=match):
        check_endpoint(endpoint)


@pytest.mark.parametrize("endpoint, loopback", [
    ("ipc:///tmp/x.sock", True), ("tcp://127.0.0.1:1", True), ("tcp://[::1]:1", True),
    ("tcp://localhost:1", True), ("tcp://0.0.0.0:1", False), ("tcp://10.1.2.3:1", False),
    ("tcp://example.org:1", False),
])
def test_loopback_detection(endpoint, loopback):
    # The launcher warns when the drafter binds an address reachable beyond this machine.
    assert is_loopback(endpoint) is loopback


def test_private_ipc_endpoint_is_in_a_fresh_directory_only_this_user_enters():
    a, b = private_ipc_endpoint(), private_ipc_endpoint()
    dirs = [os.path.dirname(e[len("ipc://"):]) for e in (a, b)]
    try:
        assert dirs[0] != dirs[1]
        assert all(os.stat(d).st_mode & 0o077 == 0 for d in dirs)
        assert all(len(e) < 100 for e in (a, b))  # unix socket paths stop at 107 bytes
    finally:
        for d in dirs:
            os.rmdir(d)


def test_loopback_tcp_endpoint_can_be_bound():
    endpoint = loopback_tcp_endpoint()
    assert check_endpoint(endpoint) == endpoint and is_loopback(endpoint)
    Listener.bind(endpoint).close()


def test_binding_a_taken_endpoint_is_an_os_error_naming_it():
    # The drafter process turns this into a logged error and exit status 2.
    endpoint = loopback_tcp_endpoint()
    first = Listener.bind(endpoint)
    try:
        assert endpoint_in_use(endpoint) == f"port {endpoint.rsplit(':', 1)[1]} on 127.0.0.1 is taken by another process"
        with pytest.raises(OSError, match=rf"cannot bind {endpoint}: Address already in use"):
            Listener.bind(endpoint)
    finally:
        first.close()
    assert endpoint_in_use(endpoint) is None


def test_an_ipc_socket_in_use_is_never_taken_over(endpoint):
    # ZeroMQ would unlink a live socket file and bind in its place, cutting the first drafter off.
    first = Listener.bind(endpoint)
    try:
        path = endpoint[len("ipc://"):]
        assert endpoint_in_use(endpoint) == f"another process listens on {path}"
        with pytest.raises(OSError, match=rf"cannot bind {endpoint}: another process listens on {path}"):
            Listener.bind(endpoint)
    finally:
        first.close()


def test_a_socket_file_nobody_listens_on_is_free(endpoint):
    path = endpoint[len("ipc://"):]
    with socket.socket(socket.AF_UNIX) as s:  # a socket file left behind by a process that is gone
        s.bind(path)
    assert endpoint_in_use(endpoint) is None
    Listener.bind(endpoint).close()


def test_a_file_that_is_not_a_socket_is_not_replaced(endpoint):
    path = endpoint[len("ipc://"):]
    Path(path).write_text("data")
    assert endpoint_in_use(endpoint) == f"{path} exists and is not a socket"
    with pytest.raises(OSError, match=r"exists and is not a socket"):
        Listener.bind(endpoint)
    assert Path(path).read_text() == "data"


def test_private_directories_of_dead_launchers_are_removed_and_others_kept():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    stale = Path(private_ipc_endpoint(owner=int(dead.stdout))[len("ipc://"):]).parent
    live = Path(private_ipc_endpoint(owner=os.getpid())[len("ipc://"):]).parent
    unowned = Path(private_ipc_endpoint()[len("ipc://"):]).parent  # a test's or a benchmark's: not ours to judge
    try:
        assert (stale / OWNER_FILE).exists()
        assert str(stale) in remove_stale_private_dirs()
        assert not stale.exists() and live.is_dir() and unowned.is_dir()
    finally:
        for d in (stale, live, unowned):
            for f in d.glob("*"):
                f.unlink()
            if d.exists():
                d.rmdir()


def test_both_ends_bound_frames_queues_and_silence(endpoint):
    import zmq

    from protocol.limits import MAX_FRAME_BYTES
    from protocol.transport import HEARTBEAT_TIMEOUT_MS, QUEUED_MESSAGES, Channel

    listener = Listener.bind(endpoint)
    channel = Channel.connect(endpoint, peer="drafter")
    try:
        for sock in (listener.sock, channel.sock):
            assert sock.getsockopt(zmq.MAXMSGSIZE) == MAX_FRAME_BYTES  # a larger frame disconnects its sender
            assert sock.getsockopt(zmq.RCVHWM) == QUEUED_MESSAGES
            assert sock.getsockopt(zmq.HEARTBEAT_TIMEOUT) == HEARTBEAT_TIMEOUT_MS  # a vanished host is noticed
            assert sock.getsockopt(zmq.LINGER) == 0
        assert listener.sock.getsockopt(zmq.TYPE) == zmq.ROUTER and channel.sock.getsockopt(zmq.TYPE) == zmq.DEALER
    finally:
        channel.close()
        listener.close()


@pytest.mark.slow
def test_a_connection_that_never_begins_its_handshake_is_closed_within_the_handshake_interval():
    import time

    from protocol.transport import HANDSHAKE_IVL_MS

    endpoint = loopback_tcp_endpoint()
    listener = Listener.bind(endpoint)
    try:
        host, port = endpoint[len("tcp://"):].rsplit(":", 1)
        with socket.create_connection((host, int(port))) as silent:  # says nothing, not even a greeting
            silent.settimeout(HANDSHAKE_IVL_MS / 1000 + 10)  # libzmq's default interval is 30 s
            t0 = time.monotonic()
            while silent.recv(4096):  # the listener's greeting, then its close
                pass
            assert time.monotonic() - t0 < HANDSHAKE_IVL_MS / 1000 + 10
    finally:
        listener.close()


def test_an_endpoint_that_cannot_be_connected_to_is_a_usage_error():
    from protocol.transport import Channel, EndpointError

    with pytest.raises(EndpointError, match=r"cannot connect to `endpoint` tcp://no such host:5555: "):
        Channel.connect("tcp://no such host:5555", peer="drafter")


@pytest.mark.parametrize("where", ["tcp", "ipc"])
def test_an_address_where_nothing_listens_is_said_within_the_connect_timeout(where, endpoint):
    import time

    from protocol.transport import Channel, NothingAnswers

    address = loopback_tcp_endpoint() if where == "tcp" else endpoint  # a free port; a socket file never made
    channel = Channel.connect(address, peer="drafter")
    t0 = time.monotonic()
    try:
        with pytest.raises(NothingAnswers, match=rf"^nothing answers at {address} within 0.5 s: no drafter listens "
                                                 rf"there \(start it, or check the address; raise `connect_timeout`"):
            channel.wait_answer(0.5)
    finally:
        channel.close()
    assert time.monotonic() - t0 < 2


def test_a_listening_address_answers_before_anything_is_sent(endpoint):
    from protocol.transport import Channel

    listener = Listener.bind(endpoint)  # a drafter still loading its model: bound, not yet reading
    channel = Channel.connect(endpoint, peer="drafter")
    try:
        channel.wait_answer(5.0)
        assert channel.answered
    finally:
        channel.close()
        listener.close()


def test_many_departures_hand_memory_back_once_the_listener_is_idle(endpoint, monkeypatch):
    import protocol.transport as transport
    from protocol.messages import Error
    from protocol.transport import Channel, Closed

    handed = []
    monkeypatch.setattr(transport, "hand_back_memory", lambda: handed.append(1))
    monkeypatch.setattr(transport, "TRIM_DEPARTURES", 2)
    monkeypatch.setattr(transport, "IDLE_S", 0.05)
    listener = Listener.bind(endpoint)
    try:
        for _ in range(2):
            channel = Channel.connect(endpoint, peer="drafter")
            channel.send(Error("x", "y"))
            assert listener.recv(timeout=10) is not None  # the message
            channel.close()
            while not isinstance(listener.recv(timeout=10), Closed):
                pass
        assert handed == [] and listener.departed == 2  # not while departures come in
        assert listener.recv(timeout=0) is None and handed == []  # a poll that does not wait is not idle
        assert listener.recv(timeout=0.5) is None and handed == [1] and listener.departed == 0
        assert listener.recv(timeout=0.2) is None and handed == [1]  # once per batch of departures
    finally:
        listener.close()
