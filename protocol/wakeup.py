"""Socket waits that a signal ends at once, however it lands.

CPython runs a signal's Python handler in the main thread, between bytecodes. A signal that lands while
the main thread is inside a poll's system call interrupts it; one that lands a moment before the call (or
on another thread: the ZAP handler's, torch's) only marks the handler pending, and the poll then sleeps
until the next message, which may never come (a drafter told to stop as its target left waited forever).
Within `woken_by_signals`, every signal also writes a byte to a socket pair (`signal.set_wakeup_fd`); the
transport's waits poll its reading end beside their sockets, so the poll returns and the handler runs.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_reader: socket.socket | None = None  # the reading end while a block is active; pollers register it


def reader() -> socket.socket | None:
    """The socket a wait polls to wake on signals, or None outside `woken_by_signals`."""
    return _reader


def drain() -> None:
    """Empty the reading end (the signals' handlers have run, or run as the wait returns)."""
    if _reader is None:
        return
    try:
        while _reader.recv(512):
            pass
    except (BlockingIOError, InterruptedError):
        pass


@contextmanager
def woken_by_signals() -> Iterator[None]:
    """Within the block, a signal wakes the transport's waits (main thread only; elsewhere, no change)."""
    global _reader
    if threading.current_thread() is not threading.main_thread() or _reader is not None:
        yield
        return
    read, write = socket.socketpair()
    read.setblocking(False)
    write.setblocking(False)
    previous = signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
    _reader = read
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        _reader = None
        read.close()
        write.close()
