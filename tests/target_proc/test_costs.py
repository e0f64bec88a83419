"""Budget auto's start-up timing: every cost the choice needs is measured, and the cache is left empty."""

from __future__ import annotations

import pytest

from models.mock import MockModel, MockRunner
from pipeline.budget import candidate_sizes, costs_for
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
    assert [r.levelname for r in caplog.records if r.name == "budget"] == ["WARNING", "INFO"]  # the API says the wait


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
