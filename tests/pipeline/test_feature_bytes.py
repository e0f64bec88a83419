"""Each round's record holds the bytes of the target's features that the request for its pool carried: the
Start's (the prompt's tokens but the last) for the first round, each Commit's (a row per token the round before
emitted) for the others; none in a round without a pool, or with a standalone drafter."""

from __future__ import annotations

from models.mock import EOS, FEATURE_WIDTH
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.settings import DecodeConfig

POOL = PoolConfig(topk=4, depth=3, expand=2)
ROW = FEATURE_WIDTH * 4  # a token's features from the mock target: a float32 digest
PROMPT = [9, 5, 17, 3, 60]


def test_a_head_is_sent_a_row_a_token_and_each_round_says_what_its_pool_cost(mock_head_pair):
    pair = mock_head_pair(64, 11, 3.0, POOL)  # a far drafter: rounds emit from 1 to 4 tokens
    for decoder in ("draft", "pearl", "root", "cover"):
        rounds = decode(pair.target, pair.drafter, PROMPT, DecodeConfig(decoder, 0.0, 8, 24), frozenset({EOS}),
                        None).rounds
        told = [len(PROMPT) - 1] + [r.emitted for r in rounds[:-1]]
        assert [r.feature_bytes for r in rounds] == [ROW * n for n in told], decoder
        assert len({r.emitted for r in rounds}) > 1, decoder  # Commits of several sizes


def test_no_features_are_sent_without_a_pool_or_to_a_standalone_drafter(mock_head_pair, mock_pair):
    head = mock_head_pair(64, 11, 3.0, POOL)
    plain = decode(head.target, head.drafter, PROMPT, DecodeConfig("ar", 0.0, 8, 12), frozenset({EOS}), None)
    standalone = mock_pair(64, 11, 3.0, POOL)
    root = decode(standalone.target, standalone.drafter, PROMPT, DecodeConfig("root", 0.0, 8, 12), frozenset({EOS}),
                  None)
    assert plain.rounds and root.rounds
    assert all(r.feature_bytes == 0 for r in plain.rounds + root.rounds)
