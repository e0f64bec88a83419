"""A signal ends a socket wait at once, even when it lands on another thread (the kernel may deliver a
process's signal to any thread that does not block it: the ZAP handler's, torch's) or just before the poll."""

from __future__ import annotations

import select
import signal
import sys
import threading
import time

import pytest

from protocol import wakeup
from protocol.errors import PeerTimeout
from protocol.transport import Channel, Listener
from protocol.wakeup import woken_by_signals

WAIT_S = 5.0  # each wait's timeout: a handler that ran only when it ended shows as a wait this long


class Stopped(Exception):
    pass


def _stop(signum, frame):
    raise Stopped


@pytest.fixture
def usr1_stops():
    previous = signal.signal(signal.SIGUSR1, _stop)
    yield
    signal.signal(signal.SIGUSR1, previous)


def signal_on_another_thread(after: float = 0.2) -> threading.Thread:
    """SIGUSR1, delivered to a helper thread: its C handler runs there, and the main thread's wait must wake."""
    def fire() -> None:
        time.sleep(after)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    return thread


def stops_early(wait) -> float:
    start = time.monotonic()
    with pytest.raises(Stopped):
        wait()
    return time.monotonic() - start


def test_a_signal_on_another_thread_ends_the_listeners_wait(endpoint, usr1_stops):
    with woken_by_signals():
        listener = Listener.bind(endpoint)
        try:
            signal_on_another_thread()
            assert stops_early(lambda: listener.recv(WAIT_S)) < WAIT_S / 2
        finally:
            listener.close()


def test_a_signal_on_another_thread_ends_the_channels_wait(endpoint, usr1_stops):
    with woken_by_signals():
        listener = Listener.bind(endpoint)
        channel = Channel.connect(endpoint, peer="drafter")
        try:
            signal_on_another_thread()
            assert stops_early(lambda: channel.recv_frames(WAIT_S, "drafter_timeout", "a reply")) < WAIT_S / 2
        finally:
            channel.close()
            listener.close()


def test_a_signal_on_another_thread_ends_the_wait_for_an_answer(endpoint, usr1_stops):
    """Nothing listens at the endpoint: the target's first wait, before it loads its model."""
    with woken_by_signals():
        channel = Channel.connect(endpoint, peer="drafter")
        try:
            signal_on_another_thread()
            assert stops_early(lambda: channel.wait_answer(WAIT_S)) < WAIT_S / 2
        finally:
            channel.close()


def test_a_stop_that_a_finalizer_dropped_ends_the_next_wait(endpoint, monkeypatch):
    """A signal landing while a __del__ runs: the interpreter drops its SystemExit, and the program would
    serve on; `stop` has the next socket wait raise it again."""
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: dropped.append(unraisable.exc_type))

    class Slow:
        def __del__(self):
            end = time.monotonic() + 1.0
            while time.monotonic() < end:  # the signal's handler runs here, between bytecodes
                pass

    previous = signal.signal(signal.SIGUSR1, wakeup.stop)
    try:
        with woken_by_signals():
            listener = Listener.bind(endpoint)
            try:
                signal_on_another_thread(after=0.2)
                slow = Slow()
                del slow
                assert dropped == [wakeup.Stopped]
                start = time.monotonic()
                with pytest.raises(SystemExit) as stopped:
                    listener.recv(WAIT_S)
                assert stopped.value.code == 128 + signal.SIGUSR1 and time.monotonic() - start < WAIT_S / 2
            finally:
                listener.close()
        assert wakeup.reader() is None
        listener = Listener.bind(endpoint)  # outside the block the stop is forgotten
        try:
            assert listener.recv(0.1) is None
        finally:
            listener.close()
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_signal_that_does_not_stop_leaves_the_wait_to_its_timeout(endpoint):
    """A handler that only notes the signal (as a block run whole does) wakes the wait, which goes on."""
    arrived = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: arrived.append(signum))
    try:
        with woken_by_signals():
            channel = Channel.connect(endpoint, peer="drafter")
            try:
                signal_on_another_thread(after=0.1)
                start = time.monotonic()
                with pytest.raises(PeerTimeout):
                    channel.recv_frames(1.0, "drafter_timeout", "a reply")
                assert time.monotonic() - start >= 1.0
                # the wait emptied the wake-up socket: left full, every later poll would return at once
                assert select.select([wakeup.reader()], [], [], 0)[0] == []
            finally:
                channel.close()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert arrived == [signal.SIGUSR1]


def test_the_wakeup_socket_exists_only_within_the_block_and_the_previous_one_is_restored():
    assert wakeup.reader() is None
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    with woken_by_signals():
        assert wakeup.reader() is not None
        with woken_by_signals():  # nested: the outer block's socket serves
            assert wakeup.reader() is not None
    assert wakeup.reader() is None
    assert signal.set_wakeup_fd(before) == before


def test_off_the_main_thread_the_block_changes_nothing():
    seen = []

    def body() -> None:
        with woken_by_signals():
            seen.append(wakeup.reader())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [None]


QUIET = """
import atexit, os, signal, sys, time
from protocol import wakeup

def spin():
    end = time.monotonic() + 1.0
    while time.monotonic() < end:  # the handler runs here, between bytecodes
        pass

class Slow:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        spin()

wakeup.install_stop(signal.SIGTERM)
if sys.argv[1] == "finalizer":
    slow = Slow()
    del slow  # the stop lands in __del__, which drops it
    print("served on", flush=True)
else:
    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), spin()))  # as the program ends
    print("ending", flush=True)
"""


@pytest.mark.parametrize("where", ["finalizer", "atexit"])
def test_a_stop_python_had_to_drop_prints_nothing(where):
    import subprocess

    from tests.processes.proc_tools import ROOT

    done = subprocess.run([sys.executable, "-c", QUIET, where], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.stderr == "" and done.returncode == 0, done.stderr
    assert done.stdout == ("served on\n" if where == "finalizer" else "ending\n")


def test_other_unraisable_errors_still_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_type))
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        wakeup.install_stop(signal.SIGUSR1)

        class Broken:
            def __del__(self):
                raise ValueError("a real problem")
        broken = Broken()
        del broken
        assert seen == [ValueError]
    finally:
        signal.signal(signal.SIGUSR1, previous)


ENDING = """
import logging, os, signal, sys
from programs.cli import Flags, run_program, setup_logging
from protocol import wakeup

class Handler(logging.StreamHandler):
    def acquire(self):  # logging's atexit shutdown takes this lock, and releases it in a `finally`
        if stopping:
            os.kill(os.getpid(), signal.SIGTERM)  # the stop lands before the lock is taken
        super().acquire()

stopping = False
setup_logging("ending")
logging.getLogger().handlers[:] = [Handler()]
wakeup.install_stop(signal.SIGTERM)
status = run_program(lambda: 0, Flags())
stopping = True
print("ending", status, flush=True)
"""


def test_a_stop_that_lands_in_the_teardown_after_the_body_returned_ends_the_program_quietly():
    import subprocess

    from tests.processes.proc_tools import ROOT

    done = subprocess.run([sys.executable, "-c", ENDING], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stderr == "" and done.stdout == "ending 0\n", done.stderr  # no "cannot release un-acquired lock"
    assert done.returncode == -signal.SIGTERM  # as a stop signal's default action ends a process
