"""Drafting ahead: the predicted end of a round, the pools grown from it, and outputs left unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drafter_proc.drafter import Abandoned
from pipeline.ahead import HIT, MISSED, NOT_TRIED, hit_probability, predicted_tokens
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.pool import Pool
from pipeline.rules import RULES
from pipeline.settings import DecodeConfig
from pipeline.tree import Tree

VOCAB = 48
CONFIG = PoolConfig(topk=4, depth=4, expand=2)


def toy_pool() -> Pool:
    """root -> a(0) b(1); a -> c(2) d(3); c -> e(4) f(5); draft edge probabilities make the ranking plain."""
    return Pool.from_edges(token=[10, 11, 12, 13, 14, 15], parent=[-1, -1, 0, 0, 2, 2],
                           logp=np.log([0.7, 0.3, 0.6, 0.4, 0.9, 0.1]).astype(np.float32),
                           expanded=[True, False, True, False, False, False])


@pytest.mark.parametrize("nodes, first, path", [
    ([0, 2, 4], None, [10, 12, 14]),  # the whole greedy chain
    ([0, 2, 5], None, [10, 12]),  # c's first choice e is not in the tree: the path stops at c
    ([0, 3], None, [10]),  # a's first choice c is not in the tree
    ([1], None, []),  # the root's first choice a is not in the tree
    ([0, 2, 3, 4], 10, [10, 12, 14]),  # beneath a drawn X1
])
def test_the_prediction_follows_the_drafters_first_choice_while_the_tree_holds_it(nodes, first, path):
    pool = toy_pool()
    assert predicted_tokens(pool, Tree.from_pool(pool, np.array(nodes)), first).tolist() == path


def test_a_draw_off_the_pool_is_the_whole_prediction():
    assert predicted_tokens(toy_pool(), Tree.single(47), 47).tolist() == [47]


def test_hit_probability_is_the_product_of_target_edges_along_the_path_and_the_drafters_next_token():
    pool = toy_pool()
    edges = np.array([0.5, 0.2, 0.8, 0.1, 0.25, 0.6])
    # path a, c then e (c's first choice, outside the tree {a, c, f})
    assert hit_probability(pool, Tree.from_pool(pool, np.array([0, 2, 5])), None, edges) == pytest.approx(0.5 * 0.8 * 0.25)
    assert hit_probability(pool, Tree.from_pool(pool, np.array([0, 2, 5])), 10, edges) == pytest.approx(0.8 * 0.25)
    # path a, c, e: e was not expanded, so the drafter's next token is not in the pool
    assert hit_probability(pool, Tree.from_pool(pool, np.array([0, 2, 4])), None, edges) is None
    assert hit_probability(pool, Tree.single(47), 47, edges) is None


@pytest.mark.parametrize("shared", [0, 1, 2, 3])
def test_a_commit_after_drafting_ahead_grows_the_pool_a_plain_commit_grows(mock_pair, shared):
    # Hit (shared 3: every token): the pool grown ahead is taken. Miss: the K/V of the shared prefix stays,
    # and the pool equals the one a drafter that never drafted ahead grows.
    plain, ahead = mock_pair(VOCAB, 3, 0.7, CONFIG).drafter.drafter, mock_pair(VOCAB, 3, 0.7, CONFIG).drafter.drafter
    prompt = [5, 9, 2, 7]
    plain.start(prompt)
    ahead.start(prompt)
    assert ahead.ahead([4, 8])
    predicted = ahead.written.tolist()
    assert predicted[:2] == [4, 8] and len(predicted) == 3  # the drafter's own next token appended
    committed = predicted[:shared] + [(t + 1) % VOCAB for t in predicted[shared:]]
    want, got = plain.commit(committed), ahead.commit(committed)
    assert got.ahead == (HIT if shared == 3 else MISSED) and want.ahead == NOT_TRIED
    for name in ("token", "parent", "expanded"):
        np.testing.assert_array_equal(getattr(got.pool, name), getattr(want.pool, name))
    np.testing.assert_allclose(got.pool.logp, want.pool.logp, rtol=1e-6, atol=1e-6)
    assert ahead.through_root == plain.through_root
    # and the round after goes on alike
    want, got = plain.commit([3, 1]), ahead.commit([3, 1])
    np.testing.assert_allclose(got.pool.logp, want.pool.logp, rtol=1e-6, atol=1e-6)
    assert got.ahead == NOT_TRIED


def test_drafting_ahead_is_abandoned_when_asked(mock_pair):
    drafter = mock_pair(VOCAB, 3, 0.7, CONFIG).drafter.drafter
    drafter.start([5, 9, 2])
    def abandon():
        raise Abandoned

    assert not drafter.ahead([4, 8], abandon)
    assert drafter.commit([4, 8]).ahead == MISSED


def test_drafting_ahead_that_does_not_fit_the_cache_is_skipped(mock_pair):
    drafter = mock_pair(VOCAB, 3, 0.7, CONFIG, capacity=3 + 3 + CONFIG.n_expanded).drafter.drafter
    drafter.start([5, 9, 2])
    assert not drafter.ahead([4, 8, 1])  # with the drafter's next token, 7 slots before the pool's scratch
    assert drafter.ahead([4, 8])


DECODERS = [name for name, rule in RULES.items() if rule.select is not None]


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_drafting_ahead_changes_no_output(mock_pair, decoder, temperature):
    outputs, pools = [], []
    for ahead in (False, True):
        pair = mock_pair(VOCAB, 11, 0.6, CONFIG)
        grown = []
        pool_of = pair.drafter.pool
        pair.drafter.pool = lambda: grown.append(pool_of()) or grown[-1]
        config = DecodeConfig(decoder, temperature, 6, 48, 0, ahead=ahead)
        result = decode(pair.target, pair.drafter, [3, 1, 4, 1, 5], config, frozenset(),
                        torch.Generator().manual_seed(7))
        outputs.append(result.tokens)
        pools.append(grown)
        if ahead:
            assert any(r.ahead == HIT for r in result.rounds) and any(r.ahead == MISSED for r in result.rounds)
        else:
            assert {r.ahead for r in result.rounds} == {NOT_TRIED}
    assert outputs[0] == outputs[1]
    assert len(pools[0]) == len(pools[1])
    for want, got in zip(*pools):
        np.testing.assert_array_equal(got.pool.token, want.pool.token)
        np.testing.assert_allclose(got.pool.logp, want.pool.logp, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("decoder", ["draft", "root-draw"])
def test_a_round_hits_exactly_when_the_round_before_ended_where_predicted(mock_pair, decoder):
    pair = mock_pair(VOCAB, 5, 0.8, CONFIG)
    result = decode(pair.target, pair.drafter, [2, 7, 1, 8], DecodeConfig(decoder, 0.0, 5, 60, 0, ahead=True),
                    frozenset(), None)
    predictions = pair.drafter.predictions
    emitted = []
    out = list(result.tokens) + list(result.beyond)
    for r in result.rounds:
        emitted.append(out[:r.emitted])
        out = out[r.emitted:]
    assert len(predictions) == len(result.rounds)  # one per round: every round verified a tree
    hits = [r.ahead == HIT for r in result.rounds[1:]]
    assert hits == [p == e for p, e in zip(predictions, emitted)][: len(hits)]
    assert 0 < sum(hits) < len(hits)
    assert all(r.ahead == MISSED for r in result.rounds[1:] if r.ahead != HIT)


@pytest.mark.parametrize("lend", [True, False])
def test_a_cpu_target_tells_a_drafter_it_waits_unless_told_not_to(mock_pair, lend):
    pair = mock_pair(VOCAB, 2, 0.7, CONFIG)
    told = []
    pair.drafter.has_pool = lambda: False  # as a drafter in another process still growing
    pair.drafter.waiting = lambda cut=False: told.append(cut)
    result = decode(pair.target, pair.drafter, [3, 9, 4], DecodeConfig("root-draw", 0.0, 4, 20, lend_cores=lend),
                    frozenset(), None)
    assert len(told) == (len(result.rounds) if lend else 0)
