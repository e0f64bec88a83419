"""The study's tests read the rounds of the timing tests' in-process mock sweeps: the same fixtures, and one
recorded mock sweep per test module (`recorded`) that the values program reads."""

from __future__ import annotations

import json

import pytest

from tests.timing.conftest import make_options, sweep  # noqa: F401  (pytest finds fixtures by their names)
from timing.values import main

GRID = dict(decoders="draft,root-draw", temperatures="0,1", budgets="4", warmup=1, record_rounds=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, mock_session, make_options, sweep):
    """A mock sweep of GRID with its rounds recorded, once per test module."""
    out = tmp_path_factory.mktemp("recorded")
    sweep(mock_session(), make_options(out, **GRID))
    return out


def json_lines(capsys, *argv) -> list[dict]:
    """The values program's JSON lines for `argv` (200 resamples)."""
    assert main([*argv, "--json", "--resamples", "200"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]
