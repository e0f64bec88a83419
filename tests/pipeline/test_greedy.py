"""At T = 0 every decoder emits the target's greedy stream, on mock targets with mock drafters."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from models.mock import EOS
from pipeline.budget import PassCosts
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig

VOCAB = 64
MAX_NEW = 13  # not a multiple of a round's length: the limit falls inside rounds
BUDGETS = (1, 8, 59, 1000, "auto")  # 1000 exceeds the default pool of 710 candidates
COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045, 8: 0.06, 16: 0.09, 32: 0.15, 59: 0.26})
N_PROMPTS = 20


def prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    # Lengths from 1 (an empty prefill) to 12; EOS never appears inside a prompt.
    return [rng.integers(1, VOCAB, size=int(rng.integers(1, 13))).tolist() for _ in range(N_PROMPTS)]


@pytest.mark.parametrize("pool_config, noise", [
    pytest.param(PoolConfig(topk=4, depth=4, expand=2), 0.5, id="small-pool-close-drafter"),
    pytest.param(PoolConfig(topk=4, depth=4, expand=2), 3.0, id="small-pool-far-drafter"),
    pytest.param(PoolConfig(), 0.5, id="default-pool-close-drafter", marks=pytest.mark.slow),
    pytest.param(PoolConfig(), 3.0, id="default-pool-far-drafter", marks=pytest.mark.slow),
])
def test_greedy_outputs_equal_ar(pool_config, noise, mock_pair, greedy):
    pair = mock_pair(VOCAB, 11, noise, pool_config)
    eos = frozenset({EOS})
    draft_accepted = draft_rounds = inside = 0
    for prompt in prompts(5):
        stream = greedy(pair.target_model, prompt, MAX_NEW)
        ar = decode(pair.target, None, prompt, DecodeConfig("ar", 0.0, 1, MAX_NEW), eos, None).tokens
        assert ar == stream
        for decoder in DECODERS[1:]:
            for budget in BUDGETS:
                result = decode(pair.target, pair.drafter, prompt, DecodeConfig(decoder, 0.0, budget, MAX_NEW),
                                eos, None, costs=copy.deepcopy(COSTS))
                # Exactly ar's output, ids and length, wherever the limit falls in the last round.
                assert result.tokens == ar, (decoder, budget, prompt)
                assert result.hit_limit == (EOS not in ar)
                inside += result.overshoot > 0
                assert all(r.tree_size <= min(r.budget, pool_config.size) for r in result.rounds)
                if decoder == "draft" and budget != "auto" and budget > 1:
                    draft_accepted += sum(r.accepted for r in result.rounds)
                    draft_rounds += len(result.rounds)
    # The trees are verified, not bypassed: `draft` (whose first token is not drawn before the tree pass)
    # accepts drafted tokens in a good share of rounds; and the limit fell inside a round many times.
    assert draft_accepted > 0.5 * draft_rounds
    assert inside > 10


@pytest.mark.parametrize("window", [0, 3])
def test_greedy_outputs_equal_ar_with_an_eagle3_head(mock_head_pair, greedy, window):
    """The mock head drafts from the target's features: every decoder gives ar's output, and drafts are
    accepted as often as the mock drafter's (features off by a token would give rows of other prefixes)."""
    pool_config = PoolConfig(topk=4, depth=4, expand=2)
    pair = mock_head_pair(VOCAB, 11, 0.5, pool_config)
    eos = frozenset({EOS})
    draft_accepted = draft_rounds = 0
    for prompt in prompts(6)[:8]:
        prompt = [9, *prompt]  # a head starts from two tokens at least
        ar = greedy(pair.target_model, prompt, MAX_NEW)
        for decoder in DECODERS[1:]:
            for budget in (1, 8, 59, "auto"):
                config = DecodeConfig(decoder, 0.0, budget, MAX_NEW, drafter_window=window)
                result = decode(pair.target, pair.drafter, prompt, config, eos, None, costs=copy.deepcopy(COSTS))
                assert result.tokens == ar, (decoder, budget, prompt)
                if decoder == "draft" and budget in (8, 59):
                    draft_accepted += sum(r.accepted for r in result.rounds)
                    draft_rounds += len(result.rounds)
    assert draft_accepted > 0.5 * draft_rounds


def test_greedy_output_and_text_equal_ar_at_every_limit(mock_pair):
    """The limit cuts ids and text alike: for each limit from 1 to 12 every decoder's output (and its text
    through the mock tokenizer) is ar's."""
    from models.tokenizers import MockTokenizer

    pair = mock_pair(VOCAB, 3, 1.0, PoolConfig(topk=4, depth=4, expand=2))
    tokenizer = MockTokenizer(VOCAB)
    for limit in range(1, 13):
        ar = decode(pair.target, None, [7, 8], DecodeConfig("ar", 0.0, 1, limit), frozenset(), None).tokens
        assert len(ar) == limit
        for decoder in DECODERS[1:]:
            out = decode(pair.target, pair.drafter, [7, 8], DecodeConfig(decoder, 0.0, 8, limit), frozenset(),
                         None).tokens
            assert out == ar and tokenizer.decode(out) == tokenizer.decode(ar), (decoder, limit)
