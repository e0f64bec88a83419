"""The values program's options (`python -m timing values`): the budgets reported, the bootstrap, the sections
added on request and where the report goes; each value is checked here, where it enters."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.config import ConfigError, check_int
from study.values import BUDGETS


@dataclass(frozen=True, slots=True)
class ValuesOptions:
    """Values"""

    budgets: str = field(default=",".join(map(str, BUDGETS)), metadata={
        "help": "budgets to report, capped by the pool", "metavar": "LIST"})
    out: str = field(default="", metadata={
        "help": "directory for values.md and its figures; empty: the first RUN (refused where they exist already, "
                "unless --overwrite)", "metavar": "DIR"})
    overwrite: bool = field(default=False, metadata={
        "help": "write over the values.md and figures the output directory holds already"})
    json: bool = field(default=False, metadata={"help": "print JSON lines instead of the Markdown report"})
    resamples: int = field(default=2000, metadata={"help": "paired bootstrap resamples of prompts"})
    confidence: float = field(default=0.95, metadata={"help": "interval coverage", "metavar": "P"})
    bootstrap_seed: int = field(default=0, metadata={"help": "seed of the resampled prompt indices", "metavar": "S"})
    by_category: bool = field(default=False, metadata={"help": "add the main figures per prompt group"})
    cut_levels: bool = field(default=False, metadata={
        "help": "add each rule's value from the pools cut after 1, 2, ... levels (what --cut-pools costs; "
                "several times the work)"})
    short: str = field(default="", metadata={
        "help": "a run of the same prompts recorded with the same command at --max-new-tokens 256: Table 20 "
                "compares the whole outputs' gains with its, paired by prompt", "metavar": "RUN"})
    plots: bool = field(default=True, metadata={"help": "do not draw the figures"})
    check: bool = field(default=False, metadata={
        "help": "list every damaged, impossible or set-aside chunk of the rounds files, every file cut short, "
                "every decode whose record has no readable rounds and every one whose rounds have no record, "
                "then exit (status 1 when there is any; --json: JSON lines)"})

    def __post_init__(self) -> None:
        self.budget_list  # checks the list
        if self.out and os.path.exists(self.out) and not os.path.isdir(self.out):  # said before any work
            raise ConfigError("out", f"{self.out} is not a directory")
        check_int("resamples", self.resamples, 1)
        if not (isinstance(self.confidence, float) and 0 < self.confidence < 1):
            raise ConfigError("confidence", f"must be in (0, 1), got {self.confidence!r}")
        check_int("bootstrap_seed", self.bootstrap_seed, 0)

    @property
    def budget_list(self) -> tuple[int, ...]:
        try:
            budgets = tuple(int(b) for b in self.budgets.split(","))
        except ValueError:
            raise ConfigError("budgets", f"must be a comma-separated list of positive integers, got "
                                         f"{self.budgets!r}") from None
        if not budgets or min(budgets) < 1:
            raise ConfigError("budgets", f"must be positive integers, got {self.budgets!r}")
        return budgets
