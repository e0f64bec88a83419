"""`python -m programs.drafter_program` and `python -m programs.target_program` started by hand, as a user
would meet a mismatch, a dead drafter or a stuck one: the target exits non-zero in bounded time with a message that says why."""

from __future__ import annotations

import signal
import time

import pytest

from tests.processes.proc_tools import LONG_RUN, START_S, Running, python_m



@pytest.fixture
def started(tmp_path):
    """Start processes through this; each is killed at the end if the test left it running."""
    procs: list[Running] = []

    def start(name: str, argv: list[str]) -> Running:
        procs.append(Running(argv, tmp_path, name))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()


def drafter(started, endpoint: str, *extra: str) -> Running:
    return started("drafter", python_m("programs.drafter_program", "--model", "mock", "--endpoint", endpoint, *extra))


def target(started, endpoint: str, *extra: str) -> Running:
    return started("target", python_m("programs.target_program", "--model", "mock", "--endpoint", endpoint, "--json",
                                      "--ready-timeout", str(START_S), *extra))


@pytest.mark.slow
def test_vocabulary_mismatch_stops_the_target_naming_both_models(started, endpoint):
    d = drafter(started, endpoint, "--mock-vocab", "65")
    t = target(started, endpoint, "--mock-vocab", "64", "--prompt", "hi")
    assert t.wait(START_S) == 3
    assert "HandshakeMismatch: target 'mock' (vocabulary 64, tokenizer " in t.stderr
    assert "and drafter 'mock' (vocabulary 65, tokenizer " in t.stderr
    assert "do not share a tokenizer" in t.stderr
    assert t.stdout == ""  # no decode ran
    # The drafter refused the Hello and goes on serving; it said why in its own log.
    d.wait_for_log("refused a message: target 'mock' (vocabulary 64")
    assert d.proc.poll() is None


@pytest.mark.slow
def test_killed_drafter_is_peer_died_in_bounded_time(started, endpoint):
    d = drafter(started, endpoint)
    t = target(started, endpoint, *LONG_RUN)
    t.wait_for_log("drafter 'mock' ready")
    d.proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    assert t.wait(10.0) == 3
    assert time.monotonic() - t0 < 5.0  # a closed connection is noticed at once, not after --drafter-timeout
    assert "PeerDied: the drafter process closed its connection while this side waited for pool" in t.stderr


@pytest.mark.slow
def test_stopped_drafter_is_peer_timeout_naming_the_option(started, endpoint):
    d = drafter(started, endpoint)
    t = target(started, endpoint, *LONG_RUN, "--drafter-timeout", "1")
    t.wait_for_log("drafter 'mock' ready")
    d.proc.send_signal(signal.SIGSTOP)  # alive and connected, but silent
    t0 = time.monotonic()
    assert t.wait(15.0) == 3
    waited = time.monotonic() - t0
    assert waited < 6.0, waited
    assert "PeerTimeout: no pool from the drafter within 1 s (raise --drafter-timeout if it is only slow)" in t.stderr
