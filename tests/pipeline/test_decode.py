"""The round loop (DESIGN.md sections 4-6): where a decode stops, what a round emits, how many target
passes each decoder makes, and reproducibility under a seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.mock import EOS
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.pool import ROOT, Pool
from pipeline.rules import DECODERS, RULES
from pipeline.settings import DecodeConfig

SPECULATIVE = [d for d in DECODERS if d != "ar"]
A, B, C = 1, 2, 3


def chain_pool() -> Pool:
    # a -> EOS -> b: a tree that runs through an end-of-sequence token.
    return Pool.from_edges(token=[A, EOS, B], parent=[ROOT, 0, 1], logp=np.log([0.9, 0.9, 0.9]),
                           expanded=[True, True, False])


@pytest.mark.parametrize("decoder", SPECULATIVE)
def test_output_stops_at_the_first_eos_inside_a_round(decoder, prefix_target, fixed_pool_drafter):
    # c -> a, ca -> EOS, then b and b: the round accepts a, EOS, b and continues with b, but the output
    # ends at the end-of-sequence token.
    target = prefix_target({(C,): A, (C, A): EOS, (C, A, EOS): B, (C, A, EOS, B): B}, 4)
    result = decode(target, fixed_pool_drafter(chain_pool()), [C], DecodeConfig(decoder, 0.0, 3, 16),
                    frozenset({EOS}), None)
    assert result.tokens == [A, EOS]
    assert not result.hit_limit
    # the chain's last node is a leaf: `cover` emits it as the continuation instead of accepting it
    assert [(r.accepted, r.emitted) for r in result.rounds] == [(2, 3) if RULES[decoder].covers else (3, 4)]


@pytest.mark.parametrize("decoder", DECODERS)
def test_max_new_tokens_respected(decoder, mock_pair):
    pair = mock_pair(16, 8, 0.5, PoolConfig(topk=3, depth=4, expand=2))
    for max_new in (1, 2, 7, 30):
        result = decode(pair.target, pair.drafter, [5, 6], DecodeConfig(decoder, 1.0, 8, max_new), frozenset(),
                        torch.Generator().manual_seed(max_new))
        # The last round is verified whole, then the output is cut at the limit: exactly max_new tokens
        # here (no end-of-sequence token), and the record keeps what the last round made beyond it.
        emitted = sum(r.emitted for r in result.rounds)
        assert len(result.tokens) == max_new and result.hit_limit
        assert result.overshoot == emitted - max_new < result.rounds[-1].emitted
        assert len(result.tokens) + result.overshoot == emitted  # the paper's count: the last round whole


def test_an_end_of_sequence_token_beyond_the_limit_is_cut_with_the_rest(prefix_target, fixed_pool_drafter):
    # The round accepts a, EOS (and b): with a limit of 1 the output is [a], cut by the limit, and the
    # paper's count (the round whole, up to its end-of-sequence token) is 2.
    target = prefix_target({(C,): A, (C, A): EOS, (C, A, EOS): B, (C, A, EOS, B): B}, 4)
    result = decode(target, fixed_pool_drafter(chain_pool()), [C], DecodeConfig("draft", 0.0, 3, 1),
                    frozenset({EOS}), None)
    assert result.tokens == [A] and result.hit_limit and result.overshoot == 1
    result = decode(target, fixed_pool_drafter(chain_pool()), [C], DecodeConfig("draft", 0.0, 3, 2),
                    frozenset({EOS}), None)
    assert result.tokens == [A, EOS] and not result.hit_limit and result.overshoot == 0


@pytest.mark.parametrize("decoder", DECODERS)
def test_round_accounting(decoder, mock_pair):
    pair = mock_pair(16, 8, 0.5, PoolConfig(topk=3, depth=4, expand=2))
    result = decode(pair.target, pair.drafter, [5, 6], DecodeConfig(decoder, 1.0, 5, 40), frozenset(),
                    torch.Generator().manual_seed(1))
    rule = RULES[decoder]
    for r in result.rounds:
        assert r.emitted == r.accepted + 1
        assert r.accepted <= r.tree_size <= 5
        # Each round times exactly the steps its flow ran: a root pass for ar and the first-draw rules, a
        # wait, a selection and a tree pass (unless `root` skipped it) for every drafted rule.
        steps = {"draft", "commit"} | ({"root"} if rule.select is None or rule.root_pass or r.held_row else set())
        if rule.select is not None:
            steps |= {"wait", "select"} | ({"tree"} if r.tree_size else set())
        assert set(r.phases.ran()) == steps, (decoder, r)
        assert all(v >= 0 for v in r.phases.ran().values())
    # The target-side phases never overlap: together they fit in the time after the prefill.
    target_side = sum(v for r in result.rounds for k, v in r.phases.ran().items() if k != "draft")
    assert target_side <= result.seconds - result.prefill_seconds
    # Passes after the prefill: one per round for ar and draft; a root pass plus a tree pass for the
    # drawn-first rules, except that root skips the tree pass when the draw is off its tree.
    tree_passes = sum(r.tree_size > 0 for r in result.rounds)
    want = {"ar": len(result.rounds), "draft": len(result.rounds), "root": len(result.rounds) + tree_passes,
            "cover": len(result.rounds)}  # `cover`'s held rounds draw from the row the pass before scored
    assert result.target_passes == want.get(decoder, 2 * len(result.rounds))
    if decoder in ("pearl", "pearl-top1", "root-draw"):
        assert tree_passes == len(result.rounds)  # the drawn token is always verified
    assert result.seconds >= result.prefill_seconds > 0
    if rule.covers:  # a round holds its root's row exactly when the round before stopped at a leaf
        assert not result.rounds[0].held_row and any(r.held_row for r in result.rounds)


def test_root_rule_skips_the_tree_pass_for_an_off_tree_draw(prefix_target, fixed_pool_drafter):
    # The pool's first level holds only a; the target goes c -> b, so the draw is the continuation.
    pool = Pool.from_edges(token=[A, B], parent=[ROOT, 0], logp=[-0.1, -0.1], expanded=[True, False])
    target = prefix_target({(C,): B}, 4)
    result = decode(target, fixed_pool_drafter(pool), [C], DecodeConfig("root", 0.0, 2, 16), frozenset({EOS}),
                    None)
    assert result.tokens == [B, EOS]
    assert [(r.accepted, r.tree_size, r.emitted) for r in result.rounds] == [(0, 0, 1), (0, 0, 1)]
    assert result.target_passes == target.passes == 2


@pytest.mark.parametrize("decoder", DECODERS)
def test_seed_reproducibility(decoder, mock_pair):
    pair = mock_pair(16, 8, 0.5, PoolConfig(topk=3, depth=4, expand=2))

    def run(seed):
        return decode(pair.target, pair.drafter, [5, 6], DecodeConfig(decoder, 1.0, 8, 12), frozenset({EOS}),
                      torch.Generator().manual_seed(seed)).tokens

    assert run(11) == run(11)
    assert len({tuple(run(seed)) for seed in range(6)}) > 1  # the generator drives the draws
