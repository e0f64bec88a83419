"""The field's metrics: τ counts the bonus token, acceptance by depth conditions on reaching the depth, on
hand-made rounds and on decodes whose drafter is the target itself."""

from __future__ import annotations

import pytest

from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.metrics import round_stats, tokens_per_pass
from pipeline.rules import RULES, SPECULATIVE
from pipeline.settings import DecodeConfig


def test_metrics_of_hand_made_rounds():
    # Four rounds: accepted 3 of a chain of 3 (leaf reached), 1 then rejected at depth 2, 0 (rejected at
    # depth 1), and 2 then rejected at depth 3.
    accepted, tried = [3, 1, 0, 2], [3, 2, 1, 3]
    stats = round_stats([a + 1 for a in accepted], accepted, tried, [3, 5, 4, 6])
    assert stats.rounds == 4 and stats.tau == pytest.approx((4 + 2 + 1 + 3) / 4)
    # depth 1: 3 of 4 rounds accepted; depth 2: 2 of the 3 that tried it; depth 3: 1 of 2.
    assert stats.acceptance == pytest.approx((3 / 4, 2 / 3, 1 / 2))
    assert stats.mean_tree_size == pytest.approx(4.5)


def test_rounds_without_a_tree_count_in_tau_not_in_tree_size():
    stats = round_stats([1, 1, 3], [0, 0, 2], [0, 1, 2], [0, 0, 4])  # ar-like, a refused draw, a tree
    assert stats.tau == pytest.approx(5 / 3) and stats.mean_tree_size == 4.0
    assert stats.acceptance == pytest.approx((1 / 2, 1.0))
    assert round_stats([], [], [], []).acceptance == ()
    assert tokens_per_pass(10, 0) == 0.0 and tokens_per_pass(10, 4) == 2.5


def test_a_round_cannot_accept_more_than_it_tried():
    with pytest.raises(AssertionError):
        round_stats([3], [2], [1], [0])


@pytest.mark.parametrize("decoder", [d for d in SPECULATIVE if not RULES[d].covers])  # exhaustive walks only
def test_a_drafter_equal_to_the_target_is_accepted_until_its_tree_ends(decoder, mock_pair):
    # Noise 0: the drafter's rows are the target's, so at T = 0 the target's argmax child is the drafter's
    # best child, which any tree holding a child of that node holds. Every comparison accepts, and every
    # walk ends at a leaf: acceptance 1 at every depth, tried == accepted in every round.
    pair = mock_pair(32, 7, 0.0, PoolConfig(topk=3, depth=4, expand=2))
    result = decode(pair.target, pair.drafter, [4, 5, 6], DecodeConfig(decoder, 0.0, 6, 60), frozenset(), None)
    rounds = result.rounds
    assert all(r.tried == r.accepted for r in rounds)
    stats = round_stats([r.emitted for r in rounds], [r.accepted for r in rounds], [r.tried for r in rounds],
                        [r.tree_size for r in rounds])
    assert stats.acceptance and all(a == 1.0 for a in stats.acceptance)
    assert stats.tau == pytest.approx(sum(r.emitted for r in rounds) / len(rounds)) and stats.tau > 2
