"""Budget auto's start-up timing: every cost the choice needs is measured, and the cache is left empty; what
was timed is kept per machine, reused by later sessions, timed again where the key changes or on --retime,
and a damaged or foreign file is named in one line and timed again."""

from __future__ import annotations

import re

import pytest

from models.mock import MockModel, MockRunner
from pipeline.budget import MeasuredPasses, candidate_sizes, costs_for
from target_proc import costs
from target_proc.target import Target


@pytest.mark.parametrize("capacity", [256, 24])  # 24: a cache too small for the usual scratch context
def test_measure_times_every_pass_the_choice_needs(capacity):
    target = Target(MockRunner(MockModel(32, 1), capacity))
    measured = costs.measure(target, 8, reps=1)
    sizes = [b for b in candidate_sizes(8) if b]
    assert sorted(measured.tree) == sorted(measured.tree_with_root) == sizes
    times = [measured.plain, measured.overlapped, measured.prefill, measured.prefill_shared]
    times += [*measured.tree.values(), *measured.tree_with_root.values()]
    assert all(t > 0 for t in times) and target.before_root == 0
    root_pass = costs_for(True, measured)  # root-draw's
    assert root_pass.front == measured.overlapped and root_pass.tree == measured.tree
    assert (root_pass.prefill, root_pass.prefill_shared, root_pass.catch_up) == (
        measured.prefill, measured.prefill_shared, 0.0)
    draft = costs_for(False, measured)
    assert draft.front == 0.0 and draft.tree == measured.tree_with_root


def test_measure_says_what_it_waits_for_and_when_it_is_done(caplog):
    caplog.set_level("INFO", logger="budget")
    costs.measure(Target(MockRunner(MockModel(32, 1), 256)), 8, reps=1)
    said = [r.getMessage() for r in caplog.records if r.name == "budget"]
    assert len(said) == 2 and costs.TYPICAL in said[0] and said[0].startswith("budget auto: timing")
    assert said[1].startswith("budget auto: passes timed in ")
    # the Python API (which logs at WARNING) says the wait and its end
    assert [r.levelname for r in caplog.records if r.name == "budget"] == ["WARNING", "WARNING"]


class Timed:
    """A DrafterClient around another that counts its requests and whether one is open."""

    def __init__(self, inner) -> None:
        self.inner, self.wants_features = inner, inner.wants_features
        self.requests, self.open = 0, False

    def start(self, prompt, *features):
        self.requests, self.open = self.requests + 1, True
        self.inner.start(prompt, *features)

    def commit(self, tokens, *features):
        self.requests += 1
        self.inner.commit(tokens, *features)

    def pool(self):
        return self.inner.pool()

    def has_pool(self):
        return self.inner.has_pool()

    def end(self):
        self.open = False
        self.inner.end()


@pytest.mark.parametrize("head", [False, True])  # a standalone drafter; an EAGLE-3 head, told the features
def test_measure_times_the_drafters_pool_and_leaves_it_without_a_request(head):
    from drafter_proc.drafter import Drafter
    from drafter_proc.head import HeadDrafter
    from models.mock import MockHead, MockHeadRunner
    from pipeline.config import PoolConfig
    from tests.local_drafter import LocalDrafter

    pool = PoolConfig(topk=4, depth=3, expand=2)
    target = Target(MockRunner(MockModel(32, 1), 256))
    if head:
        target.keep_features((0,))
        inner = HeadDrafter(MockHeadRunner(MockHead(MockModel(32, 1, 1.0)), 256), pool)
    else:
        inner = Drafter(MockRunner(MockModel(32, 1, 1.0), 256), pool)
    drafter = Timed(LocalDrafter(inner))
    measured = costs.measure(target, 8, reps=2, drafter=drafter, pool_size=pool.size)
    # the start, then reps + 1 commits (the first untimed); a standalone drafter is started reps + 1 times more
    # beside the timed prefill (a head starts after the prefill that computes its features: nothing to time)
    assert measured.pool > 0 and drafter.requests == 1 + 3 + (0 if head else 3)
    if head:  # the decode's prefill runs as alone (pipeline.decode): the head's start costs it nothing
        assert measured.prefill_shared == measured.prefill and costs_for(False, measured).start(700) == 0
    assert not drafter.open and target.before_root == 0
    assert costs_for(False, measured).front == measured.pool  # `draft` waits for the whole pool
    # Without room for a scratch context beside the pool the drafter is not asked: its pool is learnt from rounds.
    asked = drafter.requests
    small = costs.measure(Target(MockRunner(MockModel(32, 1), 24)), 8, reps=1, drafter=drafter, pool_size=pool.size)
    assert small.pool == 0 and drafter.requests == asked


def test_the_prefill_beside_a_standalone_drafter_is_timed_with_the_drafters_start_in_it():
    import time as clock

    from drafter_proc.drafter import Drafter
    from pipeline.config import PoolConfig
    from tests.local_drafter import LocalDrafter

    class Slow(Timed):  # its prefill and first pool take 20 ms more than the mock's
        def start(self, prompt, *features):
            clock.sleep(0.02)
            super().start(prompt, *features)

    pool = PoolConfig(topk=4, depth=3, expand=2)
    target = Target(MockRunner(MockModel(32, 1), 512))
    drafter = Slow(LocalDrafter(Drafter(MockRunner(MockModel(32, 1, 1.0), 512), pool)))
    measured = costs.measure(target, 8, reps=2, drafter=drafter, pool_size=pool.size)
    tokens = costs.PREFILL  # the scratch prompt: what start() charges per token of the drafter's start
    assert measured.prefill > 0 and (measured.prefill_shared - measured.prefill) * tokens >= 0.02
    assert costs_for(True, measured).start(tokens) >= 0.02 and not drafter.open and target.before_root == 0


@pytest.fixture
def sessions(mock_session, monkeypatch, tmp_path):
    """session(**kw) -> a mock TargetSession keeping its pass timings in tmp_path (the models as records would
    name them); `timed` lists the caps costs.measure timed, each at once (no pass is run)."""
    from target_proc.session import TargetSession

    timed = []

    def fake_measure(target, cap, reps=costs.REPS, drafter=None, pool_size=0):
        timed.append(cap)
        sizes = dict.fromkeys(candidate_sizes(cap)[1:], 0.002)
        return MeasuredPasses(0.001 * len(timed), 0.001, sizes, sizes, 1e-4, 2e-4, 0.003)

    monkeypatch.setattr(costs, "measure", fake_measure)

    def session(models=None, retime=False, path=tmp_path / "pass-timings.json"):
        s = mock_session()
        models = models or {"target": {"model": "mock"}, "drafter": {"model": "mock"}}
        return TargetSession(s.target, s.tokenizer, s.drafter, s.pool, models, costs.PassTimes(path), retime)

    session.timed = timed
    return session


def test_a_later_session_reuses_the_kept_timings_and_says_so_in_one_line(sessions, caplog):
    first = sessions().budgets.timings(8)
    assert sessions.timed == [8]
    caplog.clear()  # the first session's lines
    with caplog.at_level("INFO", logger="budget"):
        again = sessions().budgets.timings(8)
    assert again == first and sessions.timed == [8]  # not timed again
    said = [r.getMessage() for r in caplog.records if r.name == "budget"]
    assert len(said) == 1 and "as kept in" in said[0] and "pass-timings.json" in said[0] and "--retime" in said[0]
    assert re.search(r"at a load average of [\d.]+ on \d+ CPUs", said[0])  # what the timings saw


def test_another_key_or_retime_times_again_and_keeps_the_new_timings(sessions):
    first = sessions().budgets.timings(8)
    sessions().budgets.timings(16)  # another cap
    sessions(models={"target": {"model": "mock", "dtype": "float16"}, "drafter": {"model": "mock"}}).budgets.timings(8)
    assert sessions.timed == [8, 16, 8]
    fresh = sessions(retime=True).budgets.timings(8)
    assert sessions.timed == [8, 16, 8, 8] and fresh != first
    assert sessions().budgets.timings(8) == fresh and len(sessions.timed) == 4  # the new timings are kept


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[1, 2]", b'{"format": 99, "entries": []}',
                                     b'{"format": 1, "entries": [{"key": {"cap": 8}, "passes": {}, "timed": "", '
                                     b'"load": 0}]}',
                                     b'{"format": 1, "entries": [{"key": {"cap": 1e400}, "passes": {"tree": {}, '
                                     b'"tree_with_root": {}}, "timed": "", "load": 0}]}', b"[" * 100_000])
def test_a_damaged_or_foreign_file_is_named_in_one_line_and_timed_again(sessions, caplog, tmp_path, content):
    path = tmp_path / "pass-timings.json"
    path.write_bytes(content)
    with caplog.at_level("WARNING"):
        sessions().budgets.timings(8)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and str(path) in r.getMessage()]
    assert sessions.timed == [8] and len(warned) == 1 and "timed again" in warned[0]
    assert sessions().budgets.timings(8) and sessions.timed == [8]  # rewritten whole, then reused


WRITER = """
import sys
from pipeline.budget import MeasuredPasses, candidate_sizes
from target_proc.costs import PassTimes, canonical
kept, who = PassTimes(sys.argv[1]), sys.argv[2]
sizes = dict.fromkeys(candidate_sizes(8)[1:], 0.002)
passes = MeasuredPasses(0.1, 0.1, sizes, sizes, 0.0, 0.0)
for i in range(40):
    kept.add({canonical({"who": who, "i": i, "cap": 8}): (passes, "now", 1.0)})
"""


def test_two_processes_keeping_timings_at_once_leave_a_whole_file_with_both(tmp_path):
    import subprocess
    import sys

    from tests.processes.proc_tools import ROOT

    path = tmp_path / "pass-timings.json"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who], cwd=ROOT) for who in ("a", "b")]
    assert [p.wait(120) for p in procs] == [0, 0]
    assert len(costs.PassTimes(path).read()) == 80 and not list(tmp_path.glob(".*partial"))
