"""What every section of the values program reads (the recorded decodes by temperature, the run's provenance,
the options) and the way its Markdown writes figures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from evaluation.rounds import RecordedDecode
from study.values import Estimate
from study.options import ValuesOptions


@dataclass(slots=True)
class ValuesInput:
    """The runs a values report is made of."""

    runs: list[str]
    options: ValuesOptions
    provenance: dict = field(default_factory=dict)
    recording: dict = field(default_factory=dict)  # how the rounds were recorded (the run chunk's)
    decodes: list[RecordedDecode] = field(default_factory=list)
    damage: list = field(default_factory=list)  # evaluation.rounds_file.Damage of every file
    short: list[RecordedDecode] = field(default_factory=list)  # the decodes of --short's run, limited to 256 tokens

    @property
    def resampling(self) -> dict:
        """Averages' keywords: the options' resamples, confidence and seed."""
        o = self.options
        return dict(n_resamples=o.resamples, confidence=o.confidence, seed=o.bootstrap_seed)

    @property
    def level(self) -> str:
        return f"{self.options.confidence:.0%}"


class Section(Protocol):
    """A part of the values report: its tables in Markdown, its JSON lines and its figures."""

    def json_lines(self) -> list[dict]: ...

    def markdown(self) -> list[str]: ...

    def plots(self, out: Path) -> list[str]:
        """Draw the section's figures into `out` -> their file names."""


def number(x: float) -> float | None:
    """A figure for a JSON line: None where it is not finite (JSON has no NaN)."""
    return float(x) if math.isfinite(x) else None


def est(e: Estimate) -> str:
    return f"{pct(e.value)} [{pct(e.low)}, {pct(e.high)}]"


def plain(e: Estimate, digits: int) -> str:
    """An estimate in plain numbers with its interval: 1.99 [1.83, 2.16]."""
    return f"{e.value:.{digits}f} [{e.low:.{digits}f}, {e.high:.{digits}f}]"


def interval(e: Estimate, show) -> str:
    """An estimate and its interval, each number by `show` (a format spec, or a function); "—" where not finite."""
    cell = show if callable(show) else (lambda x: format(x, show))
    return "—" if not math.isfinite(e.value) else f"{cell(e.value)} [{cell(e.low)}, {cell(e.high)}]"


def share(e: Estimate) -> str:
    return interval(e, lambda x: pct(x, 0, sign=False))


def share1(e: Estimate) -> str:
    """A share with one decimal and its interval."""
    return interval(e, lambda x: pct(x, 1, sign=False))


def pct(x: float, digits: int = 1, sign: bool = True) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{100 * x:+.{digits}f}%" if sign else f"{100 * x:.{digits}f}%"
