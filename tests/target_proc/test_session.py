"""Opening a target's session: nothing answering at the drafter's address stops it within its connect timeout,
and a drafter that answers but is still loading its model is waited for, up to the ready timeout."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from models.options import ModelOptions
from protocol.messages import PROTOCOL_VERSION, Hello, Ready
from protocol.transport import NothingAnswers, loopback_tcp_endpoint
from target_proc.session import open_session
from tests.conftest import MOCK_POOL
from tests.protocol.wire_peers import FINGERPRINT, VOCAB, FakeDrafter, raw_socket

MOCK = ModelOptions(model="mock")


def test_a_session_stops_within_its_connect_timeout_when_nothing_listens():
    address = loopback_tcp_endpoint()
    t0 = time.monotonic()
    with pytest.raises(NothingAnswers, match=rf"nothing answers at {address} within 0.5 s"):
        with open_session(MOCK, address, MOCK_POOL, 5.0, ready_timeout=600.0, connect_timeout=0.5):
            pass
    assert time.monotonic() - t0 < 5  # not the ready timeout


def test_a_drafter_that_answers_but_is_still_loading_is_waited_for(endpoint):
    sock = raw_socket(zmq.ROUTER)
    sock.bind(endpoint)
    drafter = FakeDrafter(sock)
    said = {}

    def load_then_answer() -> None:  # longer than the connect timeout, within the ready timeout
        said["hello"] = drafter.recv()
        time.sleep(1.5)
        drafter.send(Ready(PROTOCOL_VERSION, VOCAB, FINGERPRINT, "slow"))

    helper = threading.Thread(target=load_then_answer, daemon=True)
    helper.start()
    try:
        with open_session(MOCK, endpoint, MOCK_POOL, 5.0, ready_timeout=30.0, connect_timeout=0.5) as session:
            assert session.models["drafter"]["model"] == "slow"
        assert isinstance(said["hello"], Hello)
    finally:
        helper.join(5)
        drafter.close()
