"""Context lookup (pipeline.lookup, DecodeConfig.lookup): the chain the context suggests, its graft into the
drafter's pool, the estimates its edges are scored by, and decodes with it: outputs equal ar's at T = 0."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from pipeline.budget import PassCosts
from pipeline.config import ConfigError, PoolConfig
from pipeline.decode import decode
from pipeline.lookup import NGRAM, ContextLookup, graft
from models.mock import EOS
from pipeline.pool import ROOT, Pool, grow_pool
from pipeline.rules import RULES
from pipeline.select import draft_order, select_draft
from pipeline.settings import DecodeConfig

COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045}, prefill=0.001, prefill_shared=0.003)
DRAFTED = [name for name, rule in RULES.items() if rule.select is not None]


def naive_chain(tokens: list[int], longest: int) -> tuple[list[int], int]:
    """The chain by brute force: the longest suffix (NGRAM tokens at most) that occurred before with a token
    after it, its latest such occurrence, then an overlapping copy from the token after it."""
    for n in range(min(NGRAM, len(tokens)), 0, -1):
        starts = [s for s in range(len(tokens) - n) if tokens[s:s + n] == tokens[-n:]]
        if starts:
            out = list(tokens)
            start = starts[-1] + n
            for i in range(longest):
                out.append(out[start + i])
            return out[len(tokens):], n
    return [], 0


def test_the_chain_copies_after_the_latest_occurrence_of_the_longest_suffix_seen_before():
    lookup = ContextLookup([5, 6, 7, 1, 2, 9, 6, 7, 3, 6, 7], 3)
    assert lookup.propose() == ([3, 6, 7], 2)  # "6 7" twice before: the latest is followed by 3
    lookup.extend([3])
    assert lookup.propose() == ([6, 7, 3], 3)  # "6 7 3" before: the copy runs on
    assert ContextLookup([1, 2, 3], 4).propose() == ([], 0)  # no token occurred before


def test_a_copy_that_runs_into_itself_continues_a_loop():
    assert ContextLookup([4, 8, 9, 8, 9], 5).propose() == ([8, 9, 8, 9, 8], 2)
    assert ContextLookup([2, 2], 3).propose() == ([2, 2, 2], 1)


@pytest.mark.parametrize("seed", range(20))
def test_the_index_grown_a_round_at_a_time_proposes_what_a_search_of_the_whole_context_finds(seed):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 4, 60).tolist()  # a small vocabulary: matches of every length
    lookup = ContextLookup(tokens[:5], 6)
    at = 5
    while at < len(tokens):
        assert lookup.propose() == naive_chain(tokens[:at], 6)
        step = int(rng.integers(1, 5))
        lookup.extend(tokens[at:at + step])
        at += step


def pool_of(tokens, parents, probs, expanded) -> Pool:
    return Pool.from_edges(tokens, parents, np.log(probs), expanded)


def test_a_graft_merges_with_the_candidates_it_meets_and_appends_the_rest():
    pool = pool_of([3, 4, 9, 6], [ROOT, ROOT, 0, 0], [0.5, 0.3, 0.2, 0.1], [True, False, False, False])
    grafted = graft(pool, [4, 5, 6], np.log([0.6, 0.5, 0.5]).astype(np.float32))
    assert grafted.token.tolist() == [3, 4, 9, 6, 5, 6]
    assert grafted.parent.tolist() == [ROOT, ROOT, 0, 0, 1, 4]
    assert np.allclose(np.exp(grafted.logp), [0.5, 0.6, 0.2, 0.1, 0.5, 0.5])  # 4's edge: the larger
    assert grafted.expanded.tolist() == [True, True, False, False, True, False]
    assert np.allclose(np.exp(grafted.cum), [0.5, 0.6, 0.1, 0.05, 0.3, 0.15])
    # a merged candidate keeps the drafter's edge where the drafter's is the larger
    kept = graft(pool, [3, 9], np.log([0.4, 0.1]).astype(np.float32))
    assert len(kept) == len(pool) and np.allclose(kept.logp, pool.logp)
    assert kept.expanded.tolist() == pool.expanded.tolist()


@pytest.mark.parametrize("seed", range(10))
def test_every_prefix_of_the_grafted_pools_ranking_is_a_tree(seed):
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    pool = grow_pool(torch.log_softmax(torch.randn(12, generator=gen), -1),
                     lambda nodes, *_: torch.log_softmax(torch.randn(len(nodes), 12, generator=gen), -1),
                     PoolConfig(topk=4, depth=3, expand=2))
    chain = rng.integers(0, 12, 6).tolist()
    grafted = graft(pool, chain, np.log(rng.uniform(0.05, 1.0, 6)).astype(np.float32))
    assert len(grafted) >= len(pool)
    order = draft_order(grafted)
    for b in range(1, len(grafted) + 1):
        select_draft(grafted, b)  # Tree.from_pool asserts the set is ancestor-closed
    on_chain = ROOT
    for t in chain:  # the chain is a path of the grafted pool
        (i,) = np.flatnonzero((grafted.parent == on_chain) & (grafted.token == t))
        on_chain = int(i)
    assert set(order.tolist()) == set(range(len(grafted)))


def test_edges_are_scored_by_what_the_chains_matched_so_far():
    lookup = ContextLookup([1, 2, 3, 1, 2, 3, 1, 2], 4)
    assert np.allclose(np.exp(lookup.edge_logp(2, 3)), [0.5, 0.5, 0.5])  # the prior: one hit, one miss
    pool = pool_of([7], [ROOT], [0.9], [False])
    grafted = lookup.graft(pool)
    assert lookup.chain == [3, 1, 2, 3] and lookup.match == NGRAM
    assert len(grafted) == 5
    assert lookup.learn([3, 1, 9], accepted=2) == 2  # 3 and 1 copied and accepted; 2 against 9 missed
    assert lookup.tried.tolist() == [0, 0, 1, 2] and lookup.matched.tolist() == [0, 0, 1, 1]
    assert np.allclose(np.exp(lookup.edge_logp(3, 2)), [2 / 3, 2 / 4])
    assert lookup.chain == []  # learnt once
    assert lookup.learn([5], accepted=0) == 0
    lookup.graft(pool)
    assert lookup.learn([3, 1, 2], accepted=1) == 1  # the continuation matched too, but only 1 was accepted


def test_copies_count_the_accepted_tokens_the_drafters_pool_lacked():
    lookup = ContextLookup([1, 2, 3, 1, 2], 4)  # the chain: 3 1 2 3
    pool = pool_of([3, 8, 1], [ROOT, ROOT, 0], [0.6, 0.3, 0.5], [True, False, False])  # holds 3, then 3 1
    grafted = lookup.graft(pool)
    assert lookup.merged == 2 and len(grafted) == len(pool) + 2
    assert lookup.learn([3, 1, 2, 3, 5], accepted=4) == 2  # 3 and 1 were the drafter's too
    lookup.graft(pool)
    assert lookup.learn([3, 7], accepted=1) == 0


def test_without_a_match_the_pool_is_the_drafters():
    pool = pool_of([7, 8], [ROOT, ROOT], [0.6, 0.3], [False, False])
    lookup = ContextLookup([1, 2, 3], 4)
    assert lookup.graft(pool) is pool
    assert lookup.learn([5, 6], accepted=1) == 0 and not lookup.tried.any()


def test_a_chain_of_no_tokens_is_refused():
    with pytest.raises(ValueError, match="one token or more"):
        ContextLookup([1], 0)
    with pytest.raises(ConfigError, match="`lookup`"):
        DecodeConfig(lookup=-1)
    with pytest.raises(ConfigError, match="`lookup`"):
        DecodeConfig(lookup=65)


LOOP_PROMPT = [3, 4, 5, 3, 4, 5, 3, 4]  # a context that repeats: chains from the first round


@pytest.mark.parametrize("decoder", DRAFTED)
@pytest.mark.parametrize("budget", [1, 4, "auto"])
def test_greedy_outputs_with_context_lookup_equal_ar(mock_pair, decoder, budget):
    pool = PoolConfig(topk=3, depth=3, expand=2)
    for seed, noise in ((11, 0.6), (3, 2.0)):
        want = decode(mock_pair(24, seed, noise, pool).target, None, LOOP_PROMPT, DecodeConfig("ar", 0.0, 1, 40),
                      frozenset(), None)
        pair = mock_pair(24, seed, noise, pool)
        got = decode(pair.target, pair.drafter, LOOP_PROMPT, DecodeConfig(decoder, 0.0, budget, 40, budget_max=4,
                                                                          lookup=6),
                     frozenset(), None, costs=copy.deepcopy(COSTS))
        assert got.tokens == want.tokens
        assert all(0 <= r.copied <= r.accepted for r in got.rounds)


def test_a_target_that_repeats_its_context_accepts_the_copies(mock_pair, fixed_pool_drafter, prefix_target):
    """The target continues the prompt's loop; the drafter's pool never holds the next token: every accepted
    token is a copy, and the estimates learn that copies match."""
    period = [3, 4, 5, 6]
    full = period * 20
    target = prefix_target({tuple(full[:i]): full[i] for i in range(8, len(full))}, vocab_size=8)
    drafter = fixed_pool_drafter(pool_of([7], [ROOT], [0.9], [False]))
    config = DecodeConfig("draft", 0.0, 6, 30, lookup=6)
    got = decode(target, drafter, full[:8], config, frozenset({EOS}), None)
    assert got.tokens == full[8:38]
    assert sum(r.copied for r in got.rounds) == sum(r.accepted for r in got.rounds) > 0
    assert max(r.accepted for r in got.rounds) >= 5  # the chain outranks the drafter's one candidate once learnt
