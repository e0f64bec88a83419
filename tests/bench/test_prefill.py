"""The prefill benchmark: its in-process drafter feed keeps pipeline.decode's DrafterClient contract, and its
command line refuses bad values before loading a model."""

from __future__ import annotations

import pytest

from bench.prefill import LocalFeed
from drafter_proc.drafter import Drafter
from models.mock import MockModel, MockRunner
from pipeline.config import PoolConfig

POOL = PoolConfig(topk=3, depth=2, expand=2)


def test_a_pool_is_handed_out_once_and_commit_times_are_kept():
    feed = LocalFeed(Drafter(MockRunner(MockModel(32, 0, 1.0), 128), POOL))
    feed.start([1, 2, 3])
    assert feed.has_pool()
    drafted = feed.pool()
    pool, seconds = drafted.pool, drafted.seconds
    assert len(pool.token) == POOL.size and seconds >= 0 and not feed.has_pool()
    feed.commit([4, 5])
    assert feed.has_pool() and len(feed.seconds) == 1
    feed.end()
    assert not feed.has_pool()


@pytest.mark.parametrize("argv, flag", [(["--windows", "0,x"], "--windows"), (["--windows", "-1"], "--windows"),
                                        (["--reps", "0"], "--reps"), (["--limit", "0"], "--limit"),
                                        (["--budget", "0"], "--budget"), (["--prompts", "nope"], "--prompts")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    from bench.prefill import main

    with pytest.raises(SystemExit) as stop:  # before any model loads
        main(["--prompts", "builtin", *argv])
    assert stop.value.code == 2
    assert f"error: {flag}" in capsys.readouterr().err.strip().splitlines()[-1]
