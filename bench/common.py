"""What every benchmark shares: its command line from a dataclass, the spread of a sample, the load average,
and the closing JSON line.

A benchmark's options are a frozen dataclass whose fields are its flags (programs.cli), checked in
`__post_init__`; `command_line` refuses a bad value in one line naming the flag (status 2). This module and the
options import neither torch nor transformers, so that a bad flag is refused before either loads."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import numpy as np

from evaluation.prompts import STRATA
from pipeline.config import ConfigError, split_list
from programs.cli import add_options, from_options


def bench_parser(cls: type, module: str, doc: str, extra: Sequence[tuple[str, dict]] = ()) -> argparse.ArgumentParser:
    """The command line of the benchmark `module`: an option per field of `cls` (its options dataclass), and the `extra`
    arguments ((flag, argparse keywords) pairs). `doc`: the module's docstring, whose first line describes it."""
    parser = argparse.ArgumentParser(prog=prog(module), description=summary(doc))
    add_options(parser, cls)
    for flag, keywords in extra:
        parser.add_argument(flag, **keywords)
    parser.options = cls  # what command_line builds
    return parser


def command_line(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> tuple[Any, argparse.Namespace]:
    """A benchmark's options from `argv` (or the command line), checked -> (options, the parsed namespace,
    which holds the extra arguments); a refused value ends in one line naming its flag (status 2)."""
    ns = parser.parse_args(argv)
    return from_options(parser, ns, parser.options), ns


def prog(module: str) -> str:
    """How a benchmark is run: python -m bench.NAME."""
    return f"python -m {module}"


def summary(doc: str) -> str:
    """A benchmark's one line: its docstring's first, without the command that runs it."""
    first = doc.strip().splitlines()[0]
    return first.split(": ", 1)[1] if first.startswith("python -m ") else first


def refuse(module: str, message: str) -> NoReturn:
    """A value found wrong after parsing (a prompt source, say): one line naming it, status 2."""
    print(f"{prog(module)}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# -- checks of option values: each raises ConfigError naming the field ---------------------------------------

def ints(name: str, value, least: int, most: int | None = None) -> tuple[int, ...]:
    """A comma-separated list of integers (programs.cli's "ints"), each from `least` to `most`."""
    if not (isinstance(value, tuple) and value and min(value) >= least and (most is None or max(value) <= most)):
        shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
        bound = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise ConfigError(name, f"takes comma-separated integers {bound}, got {shown!r}")
    return value


def names(name: str, text: str, known: Sequence[str]) -> list[str]:
    """The items of a comma-separated list, each one of `known`."""
    items = split_list(text)
    if not items or any(item not in known for item in items):
        raise ConfigError(name, f"takes names from {', '.join(known)}, comma-separated, got {text!r}")
    return items


# -- measurement ------------------------------------------------------------------------------------------

def check_stratify(name: str, value: str) -> None:
    """A benchmark's --stratify: none (""), or one of evaluation.prompts.STRATA."""
    if value not in ("", *STRATA):
        raise ConfigError(name, f"must be {' or '.join(STRATA)}, got {value!r}")


def spread(values) -> dict:
    """Median and quartiles of a sample (linear interpolation between order statistics)."""
    q1, med, q3 = np.percentile(np.asarray(values, float), [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3)}


def paired_ratios(first: Sequence[float], last: Sequence[float]) -> dict:
    """Spread of last[i] / first[i]: timings taken in the same repetition, so shared drift cancels."""
    return spread(np.asarray(last, float) / np.asarray(first, float))


def load_average() -> list[float]:
    """The host's load average over 1, 5 and 15 minutes: how busy the machine was beside the benchmark."""
    return [float(x) for x in os.getloadavg()]


@contextmanager
def load_bracket() -> Iterator[dict[str, list[float]]]:
    """The load average before and after the work in the block, as every benchmark's JSON document gives it
    (`load_average`): {"before": [1, 5, 15 min], "after": [1, 5, 15 min]}, "after" taken as the block ends."""
    bracket = {"before": load_average()}
    yield bracket
    bracket["after"] = load_average()


def close(doc: dict) -> None:
    """The benchmark's last line of output: one JSON document."""
    print(json.dumps(doc), flush=True)
