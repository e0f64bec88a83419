"""Stop token ids and stop checks (the target side's stop strings) in the round loop: where the output ends,
how the decode says why, and that stopping changes no law (every decoder stops where `ar` stops: greedy
outputs equal, and at T = 1 whole outputs follow the law enumerated with the same stops); and `ignore_eos`,
under which end-of-sequence tokens end nothing, with the same laws."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from models.mock import EOS
from pipeline.budget import PassCosts
from pipeline.config import ConfigError, PoolConfig
from pipeline.decode import decode
from pipeline.pool import ROOT, Pool
from pipeline.rules import DECODERS, RULES
from pipeline.settings import DecodeConfig
from tests.pipeline.test_sampling_law import goodness_of_fit

SPECULATIVE = [d for d in DECODERS if d != "ar"]
A, B, C = 1, 2, 3
COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045, 8: 0.06})


class EndsAfter:
    """A StopCheck as the target side's stop strings are, over ids: the output ends at the token that
    completes `sequence` (a stop string spanning tokens)."""

    def __init__(self, sequence: Sequence[int]) -> None:
        self.sequence = list(sequence)
        self.calls: list[tuple[list[int], list[int]]] = []

    def __call__(self, output: Sequence[int], new: Sequence[int]) -> int | None:
        self.calls.append((list(output), list(new)))
        whole, n = [*output, *new], len(self.sequence)
        return next((i for i in range(len(new)) if whole[len(output) + i + 1 - n: len(output) + i + 1]
                     == self.sequence), None)


def chain_pool() -> Pool:
    # a -> b -> c: one path the target accepts whole.
    return Pool.from_edges(token=[A, B, C], parent=[ROOT, 0, 1], logp=np.log([0.9, 0.9, 0.9]),
                           expanded=[True, True, False])


def chain_target(prefix_target):
    # c -> a -> b -> c -> a ...: the round accepts a, b, c and continues with a.
    return prefix_target({(C,): A, (C, A): B, (C, A, B): C, (C, A, B, C): A, (C, A, B, C, A): B}, 4)


@pytest.mark.parametrize("decoder", SPECULATIVE)
def test_output_ends_at_the_first_stop_token_id_inside_a_round(decoder, prefix_target, fixed_pool_drafter):
    result = decode(chain_target(prefix_target), fixed_pool_drafter(chain_pool()), [C],
                    DecodeConfig(decoder, 0.0, 3, 16, stop_token_ids=(B, EOS)), frozenset({EOS}), None)
    assert result.tokens == [A, B] and result.finish == "stop_token_id" and not result.hit_limit
    assert len(result.rounds) == 1 and result.overshoot == 0  # the round's c and a are dropped


@pytest.mark.parametrize("decoder", SPECULATIVE)
def test_output_ends_where_the_stop_check_says_and_the_check_sees_each_token_once(decoder, prefix_target,
                                                                                   fixed_pool_drafter):
    check = EndsAfter([B, C])
    result = decode(chain_target(prefix_target), fixed_pool_drafter(chain_pool()), [C],
                    DecodeConfig(decoder, 0.0, 3, 16), frozenset({EOS}), None, stop_check=check)
    assert result.tokens == [A, B, C] and result.finish == "stop_string"
    assert check.calls == [([], [A, B, C] if RULES[decoder].covers else [A, B, C, A])]  # `cover` stops at the leaf C


def test_a_stop_token_id_wins_over_a_string_it_completes_and_a_string_completed_first_wins(
        prefix_target, fixed_pool_drafter):
    def run(ids, sequence):
        return decode(chain_target(prefix_target), fixed_pool_drafter(chain_pool()), [C],
                      DecodeConfig("draft", 0.0, 3, 16, stop_token_ids=ids), frozenset({EOS}), None,
                      stop_check=EndsAfter(sequence))

    result = run((B,), [A, B])
    assert result.tokens == [A, B] and result.finish == "stop_token_id"
    result = run((C,), [A, B])
    assert result.tokens == [A, B] and result.finish == "stop_string"


def test_a_stop_beyond_the_limit_leaves_the_limit_as_the_reason(prefix_target, fixed_pool_drafter):
    result = decode(chain_target(prefix_target), fixed_pool_drafter(chain_pool()), [C],
                    DecodeConfig("draft", 0.0, 3, 2, stop_token_ids=(C,)), frozenset({EOS}), None)
    assert result.tokens == [A, B] and result.finish == "limit" and result.overshoot == 1
    result = decode(chain_target(prefix_target), fixed_pool_drafter(chain_pool()), [C],
                    DecodeConfig("draft", 0.0, 3, 3, stop_token_ids=(C,)), frozenset({EOS}), None)
    assert result.tokens == [A, B, C] and result.finish == "stop_token_id" and result.overshoot == 0


@pytest.mark.parametrize("decoder", DECODERS)
def test_ignore_eos_decodes_past_end_of_sequence_tokens_to_the_limit_and_stop_ids_still_end_it(
        decoder, prefix_target, fixed_pool_drafter):
    def run(**settings):  # c, a, b, c, a, b, then end-of-sequence tokens (the target's default row)
        drafter = fixed_pool_drafter(chain_pool()) if decoder != "ar" else None
        return decode(chain_target(prefix_target), drafter, [C], DecodeConfig(decoder, 0.0, 3, 10, **settings),
                      frozenset({EOS}), None)

    ended = run()
    assert ended.tokens == [A, B, C, A, B, EOS] and ended.finish == "eos"
    whole = run(ignore_eos=True)
    assert whole.tokens == ended.tokens + [EOS] * 4 and whole.finish == "limit" and whole.hit_limit
    stopped = run(ignore_eos=True, stop_token_ids=(EOS,))
    assert stopped.tokens == ended.tokens and stopped.finish == "stop_token_id"
    with pytest.raises(ConfigError, match=r"^`ignore_eos` must be true or false, got 1"):
        DecodeConfig(decoder, ignore_eos=1)


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_sampled_output_with_ignore_eos_begins_with_the_output_that_ends_at_the_end_of_sequence_token(
        decoder, mock_pair):
    """At T = 1 with one sampling stream: the same draws up to the end-of-sequence token, then more."""
    pair = mock_pair(6, 3, 1.0, PoolConfig(topk=3, depth=3, expand=2))
    ended = 0
    for seed in range(12):
        outputs = [decode(pair.target, pair.drafter if decoder != "ar" else None, [3],
                          DecodeConfig(decoder, 1.0, 4, 16, ignore_eos=ignore), frozenset({EOS}),
                          torch.Generator().manual_seed(seed)) for ignore in (False, True)]
        assert outputs[1].tokens[: len(outputs[0].tokens)] == outputs[0].tokens and len(outputs[1].tokens) == 16
        ended += outputs[0].finish == "eos"
    assert ended >= 3  # the end-of-sequence token was met, and passed


def test_stops_are_checked_and_normalized_naming_the_setting():
    config = DecodeConfig("ar", stop="###", stop_token_ids=[7, 9])
    assert config.stop == ("###",) and config.stop_token_ids == (7, 9)
    assert DecodeConfig("ar", stop=["a", "b"], stop_token_ids=3).stop == ("a", "b")
    for value in ("", [""], ["a", 3], 3, None):
        with pytest.raises(ConfigError, match=r"^`stop` must be a non-empty string or a list of them, got "):
            DecodeConfig("ar", stop=value)
    for value in (-1, [2, -1], [True], "2", [1.5], None):
        with pytest.raises(ConfigError, match=r"^`stop_token_ids` must be a non-negative token id or a list of "
                                              r"them, got "):
            DecodeConfig("ar", stop_token_ids=value)


VOCAB = 64
N_PROMPTS = 8


@pytest.mark.parametrize("noise", [0.5, pytest.param(3.0, marks=pytest.mark.slow)])
def test_greedy_outputs_with_stops_equal_ar_with_the_same_stops(noise, mock_pair, greedy):
    """A stop id and a two-token stop sequence taken from the middle of each prompt's greedy stream: every
    decoder at every budget stops where ar stops, with the same ids and the same reason."""
    pair = mock_pair(VOCAB, 11, noise, PoolConfig(topk=4, depth=4, expand=2))
    rng = np.random.default_rng(4)
    eos, stopped = frozenset({EOS}), 0
    for _ in range(N_PROMPTS):
        prompt = rng.integers(1, VOCAB, size=int(rng.integers(1, 8))).tolist()
        stream = greedy(pair.target_model, prompt, 24)
        at = int(rng.integers(2, len(stream))) if len(stream) > 2 else 0
        for ids, sequence in (((stream[at],), None), ((), stream[at - 1: at + 1])):
            config = DecodeConfig("ar", 0.0, 1, 24, stop_token_ids=ids)
            check = EndsAfter(sequence) if sequence else None
            ar = decode(pair.target, None, prompt, config, eos, None, stop_check=copy.copy(check))
            stopped += ar.finish != "limit"
            for decoder in SPECULATIVE:
                for budget in (1, 8, "auto"):
                    result = decode(pair.target, pair.drafter, prompt,
                                    DecodeConfig(decoder, 0.0, budget, 24, budget_max=8, stop_token_ids=ids), eos, None,
                                    costs=copy.deepcopy(COSTS), stop_check=copy.copy(check))
                    assert (result.tokens, result.finish) == (ar.tokens, ar.finish), (decoder, budget, prompt)
    assert stopped >= N_PROMPTS  # the stops were met, not the limit


def test_greedy_outputs_with_ignore_eos_equal_ar_with_it(mock_pair, greedy):
    pair = mock_pair(8, 11, 0.5, PoolConfig(topk=4, depth=4, expand=2))
    rng = np.random.default_rng(5)
    eos, ended = frozenset({EOS}), 0
    for _ in range(N_PROMPTS):
        prompt = rng.integers(1, 8, size=int(rng.integers(1, 8))).tolist()
        ended += len(greedy(pair.target_model, prompt, 24)) < 24
        ar = decode(pair.target, None, prompt, DecodeConfig("ar", 0.0, 1, 24, ignore_eos=True), eos, None)
        assert len(ar.tokens) == 24 and ar.finish == "limit"
        for decoder in SPECULATIVE:
            for budget in (1, 8, "auto"):
                result = decode(pair.target, pair.drafter, prompt,
                                DecodeConfig(decoder, 0.0, budget, 24, budget_max=8, ignore_eos=True), eos, None,
                                costs=copy.deepcopy(COSTS))
                assert result.tokens == ar.tokens, (decoder, budget, prompt)
    assert ended >= N_PROMPTS // 2  # without ignore_eos most outputs end early


# At T = 1: whole outputs with a stop token id and a two-token stop sequence against the law enumerated
# with the same stops (which is ar's law with them), as tests/pipeline/test_sampling_law does without.
LAW_VOCAB, HORIZON, STOP_ID, SEQUENCE = 4, 3, 2, [1, 3]
N_DECODES = 3000
LAW_CASES = list(DECODERS)
ALPHA = 1e-3 / (2 * len(LAW_CASES))  # family-wise 1e-3 (Bonferroni), over both settings of ignore_eos


def stopped_law(model, softmax, ends=(EOS, STOP_ID)) -> dict[tuple[int, ...], float]:
    """Probability of every output, ended by a token of `ends`, SEQUENCE or the horizon."""
    law: dict[tuple[int, ...], float] = {}

    def walk(digest, prefix, prob):
        if len(prefix) == HORIZON or (prefix and prefix[-1] in ends) or prefix[-2:] == SEQUENCE:
            law[tuple(prefix)] = prob
            return
        row = softmax(model.logits(digest))
        for token in range(model.vocab_size):
            walk(model.extend(digest, token), prefix + [token], prob * row[token])

    walk(model.digest([3]), [], 1.0)
    return law


@pytest.mark.slow
@pytest.mark.parametrize("ignore_eos", [False, True])
@pytest.mark.parametrize("decoder", LAW_CASES)
def test_sampled_outputs_with_stops_follow_the_target_law_with_those_stops(decoder, ignore_eos, mock_pair, softmax):
    pair = mock_pair(LAW_VOCAB, 5, 1.0, PoolConfig(topk=3, depth=3, expand=2))
    law = stopped_law(pair.target_model, softmax, (STOP_ID,) if ignore_eos else (EOS, STOP_ID))
    assert abs(sum(law.values()) - 1) < 1e-12 and max(law.values()) < 0.5
    case = LAW_CASES.index(decoder) + len(LAW_CASES) * ignore_eos
    config = DecodeConfig(decoder, 1.0, 4, HORIZON, seed=case, stop_token_ids=(STOP_ID,), ignore_eos=ignore_eos)
    outcomes = []
    for i in range(N_DECODES):
        generator = torch.Generator().manual_seed(9_000_011 * case + i)
        result = decode(pair.target, pair.drafter if decoder != "ar" else None, [3], config, frozenset({EOS}),
                        generator, stop_check=EndsAfter(SEQUENCE))
        outcomes.append(tuple(result.tokens))
    assert goodness_of_fit(outcomes, law) >= ALPHA
