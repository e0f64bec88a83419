"""Fixtures of the wire tests: a fake drafter peer and a channel to it."""

from __future__ import annotations

import pytest
import zmq

from protocol.transport import Channel

from tests.protocol.wire_peers import FakeDrafter, raw_socket


@pytest.fixture
def fake_drafter(endpoint):
    """A FakeDrafter bound where the target expects its drafter, and a Channel connected to it."""
    sock = raw_socket(zmq.ROUTER)
    sock.bind(endpoint)
    peer = FakeDrafter(sock)
    channel = Channel.connect(endpoint, peer="drafter")
    yield peer, channel
    channel.close()
    peer.close()
