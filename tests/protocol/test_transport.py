"""Endpoints named by the user are checked with a message naming `--endpoint`; a taken endpoint is an
OSError naming it, not a hang."""

from __future__ import annotations

import os

import pytest

from protocol.transport import Channel, check_endpoint, is_loopback, loopback_tcp_endpoint, private_ipc_endpoint


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
    ("udp://127.0.0.1:5555", r"`endpoint` 'udp://127.0.0.1:5555' must be ipc://PATH, tcp://HOST:PORT or tcp"),
    ("drafter.sock", r"must be ipc://PATH, tcp://HOST:PORT or tcp \(loopback\)"),
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
    Channel.bind(endpoint, peer="target").close()


def test_binding_a_taken_endpoint_is_an_os_error_naming_it():
    # The drafter process turns this into a logged error and exit status 2.
    endpoint = loopback_tcp_endpoint()
    first = Channel.bind(endpoint, peer="target")
    try:
        with pytest.raises(OSError, match=rf"cannot bind {endpoint}: Address already in use"):
            Channel.bind(endpoint, peer="target")
    finally:
        first.close()
