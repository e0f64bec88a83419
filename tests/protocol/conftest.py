"""Fixtures of the wire tests: an ipc endpoint, a real DrafterServer on a thread, a fake drafter peer."""

from __future__ import annotations

import threading

import pytest

from drafter_proc.server import DrafterServer
from models.load import load
from models.options import ModelOptions
from protocol.messages import Shutdown
from protocol.transport import Channel

from tests.protocol.wire_peers import WAIT_S, RawPeer, raw_socket


@pytest.fixture
def drafter_server(endpoint):
    """A real DrafterServer with the mock drafter model, serving on a thread; yields a RawPeer target
    (its `server_thread` is the serving thread)."""
    channel = Channel.bind(endpoint, peer="target")
    server = DrafterServer(channel, load(ModelOptions(model="mock"), "drafter"))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    sock = raw_socket()
    sock.connect(endpoint)
    peer = RawPeer(sock)
    peer.server_thread = thread
    yield peer
    if thread.is_alive():  # a test that crashed the server has already failed on its missing reply
        peer.send(Shutdown())
        thread.join(WAIT_S)
    peer.close()
    channel.close()
    assert not thread.is_alive(), "the server did not stop on Shutdown"


@pytest.fixture
def fake_drafter(endpoint):
    """A RawPeer bound where the target expects its drafter, and a Channel connected to it."""
    sock = raw_socket()
    sock.bind(endpoint)
    peer = RawPeer(sock)
    channel = Channel.connect(endpoint, peer="drafter")
    yield peer, channel
    channel.close()
    peer.close()
