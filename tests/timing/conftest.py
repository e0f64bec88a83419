"""Builders shared by the timing tests: an in-process mock session and sweep, sweep options and synthetic
records.

Test modules receive these through fixtures (each returns the builder itself), so nothing imports this
file by name.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from drafter_proc.drafter import Drafter
from drafter_proc.local import LocalDrafter
from models.mock import MockModel, MockRunner
from models.tokenizers import MockTokenizer
from pipeline.config import PoolConfig
from target_proc.session import Session
from target_proc.target import Target
from launch.cli import build
from launch.options import SweepOptions
from models.options import ModelOptions
from timing import run_config
from timing.records import RecordStore
from timing.sweep import gather_prompts, run_shard

POOL = PoolConfig(topk=4, depth=3, expand=2)  # small pools: a mock decode takes a few milliseconds
VOCAB = 64


def build_session(capacity: int = 1024) -> Session:
    """A Session over a mock target and an in-process mock drafter (no sockets, no second process)."""
    target = Target(MockRunner(MockModel(VOCAB, 0), capacity))
    drafter = LocalDrafter(Drafter(MockRunner(MockModel(VOCAB, 0, 1.0), capacity), POOL))
    return Session(target, MockTokenizer(VOCAB), drafter, POOL)


def sweep_in_process(session: Session, options: SweepOptions) -> RecordStore:
    """What `python -m timing sweep` does, with an in-process session and mock models in config.json."""
    mock = ModelOptions(model="mock")
    prompts = gather_prompts(options)
    config = run_config.describe(mock, mock, session.pool, options, prompts)
    return run_shard(options, prompts, config, None, lambda: nullcontext(session), progress=False)


def sweep_options(out, **overrides) -> SweepOptions:
    """Quick sweep options: the four built-in prompts, 24-token outputs, the paper's grid."""
    values = dict(out=str(out), max_new_tokens=24)
    values.update(overrides)
    return build(SweepOptions, **values)


def record(prompt_id: str, decoder: str, temperature: float = 0.0, budget: int = 8, seed: int = 0, *,
           tokens: int = 10, seconds: float = 1.0, warmup: bool = False, category: str = "c",
           tree_sizes=(3, 4), accepted=(1, 2), available=None) -> dict:
    """A synthetic record with the fields reports read."""
    n = len(tree_sizes)
    return {"prompt_id": prompt_id, "category": category, "decoder": decoder, "temperature": temperature,
            "budget": budget, "cap": budget, "seed": seed, "warmup": warmup, "tokens": tokens,
            "seconds": seconds, "rounds": n, "tree_sizes": list(tree_sizes), "accepted": list(accepted),
            "available": None if available is None else list(available),
            "phases": {p: [0.001] * n for p in ("draft", "root", "wait", "select", "tree", "commit")}}


@pytest.fixture(scope="session")
def mock_session():
    return build_session


@pytest.fixture(scope="session")
def sweep():
    return sweep_in_process


@pytest.fixture(scope="session")
def make_options():
    return sweep_options


@pytest.fixture(scope="session")
def make_record():
    return record
