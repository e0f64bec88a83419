"""Builders shared by the timing tests: an in-process mock sweep and sweep options.

Test modules receive these through fixtures (each returns the builder itself); only tests/study's conftest
imports this file by name, for the same fixtures.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from models.options import ModelOptions
from programs.cli import build
from target_proc.session import TargetSession
from timing import run_config
from timing.options import SweepOptions
from timing.record_store import RecordStore
from timing.sweep import gather_prompts, run_shard


def sweep_in_process(session: TargetSession, options: SweepOptions) -> RecordStore:
    """What `python -m timing sweep` does, with an in-process session and mock models in config.json."""
    mock = ModelOptions(model="mock")
    prompts = gather_prompts(options)
    config = run_config.describe(mock, mock, session.pool, options, prompts)
    return run_shard(options, prompts, config, None, lambda: nullcontext(session), progress=False)


def sweep_options(out, **overrides) -> SweepOptions:
    """Quick sweep options: four of the built-in prompts (where no prompts are given), 24-token outputs, the
    paper's grid."""
    values = dict(out=str(out), max_new_tokens=24) | ({} if "prompts" in overrides else {"limit_prompts": 4})
    values.update(overrides)
    return build(SweepOptions, **values)


@pytest.fixture(scope="session")
def sweep():
    return sweep_in_process


@pytest.fixture(scope="session")
def make_options():
    return sweep_options
