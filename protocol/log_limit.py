"""Rate-limited warnings: what a peer can make a process log is bounded, so that a flood of refused
connections or messages cannot fill a disk or bury the lines that matter.

Each kind of event may log `burst` lines per `window` seconds; the lines beyond are counted, and the next
line of that kind that is logged says how many were left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class Throttle:
    def __init__(self, burst: int = 5, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.window, self.clock = burst, window, clock
        self.kinds: dict[str, tuple[float, int, int]] = {}  # kind -> (window start, logged in it, left out)

    def log(self, logger: logging.Logger, level: int, kind: str, text: str, *args, exc_info=None) -> bool:
        """Log `text % args` unless `kind` has had its burst in this window -> whether it was logged."""
        now = self.clock()
        start, logged, left_out = self.kinds.get(kind, (now, 0, 0))
        if now - start >= self.window:
            start, logged = now, 0
        if logged >= self.burst:
            self.kinds[kind] = (start, logged, left_out + 1)
            return False
        if left_out:
            text += f" ({left_out} more like this were not logged)"
        logger.log(level, text, *args, exc_info=exc_info)
        self.kinds[kind] = (start, logged + 1, 0)
        return True

    def warning(self, logger: logging.Logger, kind: str, text: str, *args) -> bool:
        return self.log(logger, logging.WARNING, kind, text, *args)
