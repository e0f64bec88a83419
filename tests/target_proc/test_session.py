"""Opening a target's session: nothing answering at the drafter's address stops it within its connect timeout,
and a drafter that answers but is still loading its model is waited for, up to the ready timeout; what the
drafter says of itself in Ready stands in the session's provenance."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
import zmq

from drafter_proc.server import DrafterServer
from models.load import load
from models.options import ModelOptions
from protocol.messages import PROTOCOL_VERSION, Hello, Ready
from protocol.transport import Listener, NothingAnswers, loopback_tcp_endpoint
from target_proc.session import open_session
from tests.conftest import MOCK_POOL
from tests.protocol.wire_peers import FINGERPRINT, VOCAB, WAIT_S, FakeDrafter, raw_socket

MOCK = ModelOptions(model="mock")


def test_a_session_stops_within_its_connect_timeout_when_nothing_listens():
    address = loopback_tcp_endpoint()
    t0 = time.monotonic()
    with pytest.raises(NothingAnswers, match=rf"nothing answers at {address} within 0.5 s"):
        with open_session(MOCK, address, MOCK_POOL, 5.0, ready_timeout=600.0, connect_timeout=0.5):
            pass
    assert time.monotonic() - t0 < 5  # not the ready timeout


def test_nothing_answering_is_said_before_the_target_loads(monkeypatch):
    # An 8B target loads for a minute: a wrong --drafter-at is said within the connect timeout, not after it.
    loads = []
    monkeypatch.setattr("target_proc.session.load", lambda *args: loads.append(args))
    with pytest.raises(NothingAnswers):
        with open_session(MOCK, loopback_tcp_endpoint(), MOCK_POOL, 5.0, ready_timeout=600.0, connect_timeout=0.3):
            pass
    assert loads == []


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


def test_the_drafters_linear_kernels_reach_the_sessions_provenance(endpoint):
    # What the drafter chose at load travels in Ready and stands beside the target's own choice.
    tiny = ModelOptions(model="random:tiny", tune_linears=False)
    kernels = {"64x32": ["transposed", "packed", "packed"], "32x64 with bias": ["stock", "packed", "stock"]}
    server = DrafterServer(Listener.bind(endpoint), dataclasses.replace(load(tiny, "drafter"), linear_kernels=kernels))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        with open_session(tiny, endpoint, MOCK_POOL, 5.0, ready_timeout=30.0) as session:
            assert session.models["drafter"]["linear_kernels"] == kernels
            assert "linear_kernels" not in session.models["target"]  # tuned off: none chosen
    finally:
        thread.join(WAIT_S)
    assert not thread.is_alive()  # the session's shutdown ended it
