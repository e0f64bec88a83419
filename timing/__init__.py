"""Timing harness: sweeps and their records, reports and plots, the values program's command (the study is
study's) and the round model."""

import os

PROG_ENV = "SPECPAIR_PROG"  # the command that runs these programs, when a launcher runs them (launch/pair.sh)


def prog(command: str) -> str:
    """A timing program's name in its usage lines: as the user typed it (`launch/pair.sh report`)."""
    return f"{os.environ.get(PROG_ENV) or 'python -m timing'} {command}"
