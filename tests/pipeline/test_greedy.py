"""At T = 0 every decoder emits the target's greedy stream, on mock targets with mock drafters."""

from __future__ import annotations

import numpy as np
import pytest

from models.mock import EOS
from pipeline.config import DecodeConfig, PoolConfig
from pipeline.rules import DECODERS
from pipeline.decode import decode

VOCAB = 64
MAX_NEW = 16
BUDGETS = (1, 8, 59, 1000)  # 1000 exceeds the default pool of 710 candidates
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
    draft_accepted = draft_rounds = 0
    for prompt in prompts(5):
        # A round emits at most depth + 1 tokens, so a decode stops within depth tokens past the limit.
        stream = greedy(pair.target_model, prompt, MAX_NEW + pool_config.depth)
        ar = decode(pair.target, None, prompt, DecodeConfig("ar", 0.0, 1, MAX_NEW), eos, None).tokens
        assert ar == stream[:MAX_NEW]
        for decoder in DECODERS[1:]:
            for budget in BUDGETS:
                result = decode(pair.target, pair.drafter, prompt, DecodeConfig(decoder, 0.0, budget, MAX_NEW),
                                eos, None)
                out = result.tokens
                n = min(len(out), len(ar))
                assert out[:n] == ar[:n], (decoder, budget, prompt)
                assert out == stream[: len(out)], (decoder, budget, prompt)
                if EOS in out:
                    assert out[-1] == EOS and not result.hit_limit
                else:
                    assert MAX_NEW <= len(out) <= MAX_NEW + pool_config.depth and result.hit_limit
                assert all(r.tree_size <= min(budget, pool_config.size) for r in result.rounds)
                if decoder == "draft" and budget > 1:
                    draft_accepted += sum(r.accepted for r in result.rounds)
                    draft_rounds += len(result.rounds)
    # The trees are verified, not bypassed: `draft` (whose first token is not drawn before the tree pass)
    # accepts drafted tokens in a good share of rounds.
    assert draft_accepted > 0.5 * draft_rounds
