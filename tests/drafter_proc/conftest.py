"""Fixtures of the drafter's tests: a real DrafterServer on a thread, and a raw target peer connected to it."""

from __future__ import annotations

import threading

import pytest

from drafter_proc.server import DrafterServer
from models.load import load
from models.options import ModelOptions
from protocol.messages import Ready, Shutdown
from protocol.transport import Listener

from tests.protocol.wire_peers import WAIT_S, RawPeer, hello, raw_socket


@pytest.fixture
def serving(endpoint):
    """A real DrafterServer with the mock drafter model, serving `endpoint` on a thread; yields the server
    (its `thread` is the serving thread). It is stopped at the end through a fresh handshake."""
    listener = Listener.bind(endpoint)
    server = DrafterServer(listener, load(ModelOptions(model="mock"), "drafter"))
    server.thread = threading.Thread(target=server.serve, daemon=True)
    server.thread.start()
    yield server
    if server.thread.is_alive():  # a test that crashed the server has already failed on its missing reply
        server.peer = None  # whoever was served, the closing peer below may stop it
        stopper = RawPeer(raw_socket())
        stopper.sock.connect(endpoint)
        stopper.send(hello())
        assert isinstance(stopper.recv(), Ready)
        stopper.send(Shutdown())
        server.thread.join(WAIT_S)
        stopper.close()
    listener.close()
    assert not server.thread.is_alive(), "the server did not stop on Shutdown"


@pytest.fixture
def drafter_server(serving, endpoint):
    """A RawPeer target connected to a real DrafterServer (its `server_thread` is the serving thread)."""
    sock = raw_socket()
    sock.connect(endpoint)
    peer = RawPeer(sock)
    peer.server_thread = serving.thread
    yield peer
    peer.close()
