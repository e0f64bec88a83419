"""What a section of the GPU check is handed: its plan, its time, its folder, the results before it, and
where its figures go as it measures them (so that a crash, a hang or the end of the time keeps them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class OutOfTime(Exception):
    """A section used up its share of the check's time."""


class Budget:
    """Seconds left to a section: its own share, capped by the check's overall deadline."""

    def __init__(self, seconds: float, deadline: float) -> None:
        self.end = min(time.monotonic() + seconds, deadline)

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, doing: str) -> None:
        if self.left() <= 0:
            raise OutOfTime(f"out of time before {doing}")


@dataclass(slots=True)
class Section:
    """One section's run. `save` is called with the figures kept so far (status "running") each time
    `keep` adds some; the section's function returns its whole result, which the kept figures underlie."""

    name: str
    plan: Any  # tests.gpu.check.Plan
    budget: Budget
    out: Path  # the check's --out folder: files a section writes there come back with the report
    earlier: dict = field(default_factory=dict)  # results of the sections run before, by name
    save: Callable[[dict], None] = lambda figures: None
    kept: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("`name`: a section needs one")

    def keep(self, **figures) -> None:
        """Figures measured so far, saved at once."""
        self.kept.update(figures)
        self.save({"status": "running", **self.kept})
