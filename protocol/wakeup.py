"""Socket waits that a signal ends at once, however it lands.

CPython runs a signal's Python handler in the main thread, between bytecodes: a signal that lands a moment before
a poll's system call (or on another thread) only marks the handler pending, and the poll sleeps until the next
message, which may never come. Within `woken_by_signals`, every signal also writes a byte to a socket pair
(`signal.set_wakeup_fd`) whose reading end the transport's waits poll beside their sockets.

A handler's exception raised while a finalizer runs is dropped by Python, so a program that stops on a signal
installs `stop` (`install_stop`): it raises Stopped (a SystemExit), and within the block the next socket wait
raises it again; a dropped Stopped is not printed as "Exception ignored". Once the program's body has returned
(`ending`), a stop signal takes its default action at once: raised inside the interpreter's teardown, a Stopped
can turn into another error (logging's atexit shutdown: "cannot release un-acquired lock")."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_reader: socket.socket | None = None  # the reading end while a block is active; pollers register it
_stopping: int | None = None  # the exit status `stop` raised within the block, raised again by each wait
_stop_signals: set[int] = set()  # the signals `install_stop` gave to `stop`


class Stopped(SystemExit):
    """A stop signal's exit: status 128 + the signal's number."""


def reader() -> socket.socket | None:
    """The socket a wait polls to wake on signals, or None outside `woken_by_signals`."""
    return _reader


def drain() -> None:
    """Empty the reading end (the signals' handlers have run, or run as the wait returns); SystemExit if a
    `stop` handler ran in the block (its own exception may have been dropped)."""
    if _reader is None:
        return
    try:
        while _reader.recv(512):
            pass
    except (BlockingIOError, InterruptedError):
        pass
    if _stopping is not None:
        raise Stopped(_stopping)


def stop(signum: int, frame) -> None:
    """A signal handler that ends the program with status 128 + signum (SystemExit), now and, within
    `woken_by_signals`, again at the next socket wait: the first may land in a finalizer, which drops it."""
    global _stopping
    _stopping = 128 + signum
    raise Stopped(_stopping)


def install_stop(*signums: int) -> None:
    """`stop` as the handler of `signums` (main thread only), with an unraisable hook that keeps quiet about a
    Stopped that Python had to drop, and hands anything else to the hook that was there."""
    for signum in signums:
        signal.signal(signum, stop)
    _stop_signals.update(signums)
    previous = sys.unraisablehook
    if getattr(previous, "quiet_stops", False):
        return

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Stopped):
            previous(unraisable)
    hook.quiet_stops = True
    sys.unraisablehook = hook


def ending() -> None:
    """The program's body has returned: from here on, a signal `install_stop` gave to `stop` ends the process
    as the signal's default does (main thread only; elsewhere, no change)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in list(_stop_signals):
        if signal.getsignal(signum) is stop:
            signal.signal(signum, signal.SIG_DFL)
        _stop_signals.discard(signum)


@contextmanager
def woken_by_signals() -> Iterator[None]:
    """Within the block, a signal wakes the transport's waits (main thread only; elsewhere, no change)."""
    global _reader, _stopping
    if threading.current_thread() is not threading.main_thread() or _reader is not None:
        yield
        return
    read, write = socket.socketpair()
    read.setblocking(False)
    write.setblocking(False)
    previous = signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
    _reader, _stopping = read, None
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        _reader, _stopping = None, None
        read.close()
        write.close()
