"""The count and time left of a run of several decodes: a tqdm bar on a terminal, and in a log (stderr not a
terminal) the same said at the end of each decode's line."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm


class Progress:
    """`with Progress(total) as progress:` then `progress.step()` as each decode ends -> its count and ETA as
    text ("3/10, about 25 s left"). `initial`: decodes done before (a resumed sweep's), counted but not timed.
    A bar is drawn when `bar` is True, or by default when `stream` is a terminal; log lines written meanwhile
    go above it. One decode alone gets neither bar nor count."""

    def __init__(self, total: int, *, initial: int = 0, bar: bool | None = None, stream: TextIO | None = None,
                 unit: str = "decode") -> None:
        self.total, self.done, self.initial, self.unit = total, initial, initial, unit
        self.stream = stream or sys.stderr
        self.wanted = total > 1 and (bar if bar is not None else _is_terminal(self.stream))
        self._bar: tqdm | None = None
        self._stack = contextlib.ExitStack()
        self._start = time.monotonic()

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        if self.wanted:
            self._bar = self._stack.enter_context(tqdm(total=self.total, initial=self.initial, unit=self.unit,
                                                       file=self.stream, dynamic_ncols=True))
            self._stack.enter_context(logging_redirect_tqdm())
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def aside(self):
        """`with progress.aside():` work that is no decode's (budget auto's timing of the passes) and that the
        time left, the bar's too, leaves out."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self._start += time.monotonic() - t0
            if self._bar is not None:
                self._bar.unpause()  # its clock restarts from its last update

    def step(self, note: str = "") -> str:
        """One more decode done (`note`: what the bar shows beside the count) -> the count and ETA as text,
        or "" for a run of one decode."""
        self.done += 1
        if self._bar is not None:
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(1)
        return self.text()

    def text(self) -> str:
        if self.total <= 1:
            return ""
        left = self.total - self.done
        if not self.done or not left:
            return f"{self.done}/{self.total}"
        timed = self.done - self.initial
        if not timed:
            return f"{self.done}/{self.total}"
        eta = (time.monotonic() - self._start) / timed * left
        return f"{self.done}/{self.total}, about {_duration(eta)} left"


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), or None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, clock ticks after boot
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started / os.sysconf("SC_CLK_TCK"))


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or a stand-in stream
        return False
