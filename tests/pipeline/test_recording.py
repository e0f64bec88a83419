"""Recording rounds: the measurement pass over the whole pool changes nothing of the decode, gives the
target's exact edge probabilities, and its values agree with what the decoder realized."""

from __future__ import annotations

import copy
import itertools
import time

import numpy as np
import pytest
import torch

from models.mock import EOS, MockModel
from pipeline.budget import PassCosts
from pipeline.config import PoolConfig
from pipeline.settings import DecodeConfig
from pipeline.decode import decode
from pipeline.pool import ROOT
from pipeline.rules import RULES, SPECULATIVE
from pipeline.verify import target_probs
from target_proc.recorder import RoundRecorder

VOCAB = 40
POOL = PoolConfig(topk=4, depth=3, expand=2)
MAX_NEW = 21
COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045, 8: 0.06, 16: 0.09})
PROMPTS = [[5, 9, 2], [7], [11, 3, 3, 8, 1]]
VALUED_RULES = [d for d in SPECULATIVE if RULES[d].value is not None]  # `cover` walks its trees otherwise


def run(pair, prompt, config, recorder=None):
    generator = torch.Generator().manual_seed(3)
    return decode(pair.target, pair.drafter, prompt, config, frozenset({EOS}), generator,
                  costs=copy.deepcopy(COSTS), observe=recorder)


def exact_edges(model: MockModel, context: list[int], rnd) -> np.ndarray:
    """(N,) the mock target's probability of each recorded candidate's edge at `context` (root included)."""
    digests: list[bytes] = []
    base = model.digest(context)
    edge = np.empty(len(rnd.token))
    for i, (token, parent) in enumerate(zip(rnd.token.tolist(), rnd.parent.tolist())):
        at = base if parent == ROOT else digests[parent]
        edge[i] = target_probs(torch.from_numpy(model.logits(at)), 1.0)[token].item()
        digests.append(model.extend(at, token))
    return edge


@pytest.fixture
def ticking_clock(monkeypatch):
    """A clock that moves 1 ms a read: budget auto learns from the rounds' timings, and with the wall clock a
    busy machine would time the two runs apart (the measurement runs between reads, and moves no timing)."""
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * 1e-3)


@pytest.mark.parametrize("decoder", SPECULATIVE)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [3, "auto"])
def test_recording_leaves_the_decode_unchanged(mock_pair, decoder, temperature, budget, ticking_clock):
    pair = mock_pair(VOCAB, 4, 1.0, POOL)
    config = DecodeConfig(decoder, temperature, budget, MAX_NEW, budget_max=8)
    for prompt in PROMPTS:
        plain = run(pair, prompt, config)
        recorder = RoundRecorder(pair.target, DecodeConfig(temperature=temperature))
        recorded = run(pair, prompt, config, recorder)
        assert recorded.tokens == plain.tokens
        assert [(r.accepted, r.tree_size, r.budget) for r in recorded.rounds] == \
               [(r.accepted, r.tree_size, r.budget) for r in plain.rounds]
        assert len(recorder.rounds) == sum(r.budget > 0 for r in recorded.rounds)


@pytest.mark.parametrize("decoder", SPECULATIVE)
def test_recorded_edges_are_the_targets_rows_at_the_rounds_context(mock_pair, decoder):
    pair = mock_pair(VOCAB, 6, 1.0, POOL)
    prompt = [4, 17, 9]
    recorder = RoundRecorder(pair.target, DecodeConfig(temperature=1.0))
    result = run(pair, prompt, DecodeConfig(decoder, 1.0, 4, MAX_NEW), recorder)
    context = list(prompt)
    for rnd in recorder.rounds:
        np.testing.assert_allclose(rnd.edge, exact_edges(pair.target_model, context, rnd), rtol=1e-5, atol=1e-7)
        context += rnd.emitted.tolist()
    assert context[len(prompt):][: len(result.tokens)] == result.tokens


@pytest.mark.parametrize("decoder", VALUED_RULES)
@pytest.mark.parametrize("budget", [1, 3, 8, "auto"])
def test_greedy_values_equal_what_each_round_accepted(mock_pair, decoder, budget):
    """At T = 0 the verifier is deterministic, so the rule's value at each round's own budget is exactly
    the number of tree nodes that round accepted."""
    pair = mock_pair(VOCAB, 8, 1.5, POOL)
    for prompt in PROMPTS:
        recorder = RoundRecorder(pair.target, DecodeConfig(temperature=0.0))
        run(pair, prompt, DecodeConfig(decoder, 0.0, budget, MAX_NEW, budget_max=8), recorder)
        for rnd in recorder.rounds:
            value = RULES[decoder].value(rnd.scored()).at([rnd.budget])[0]
            assert value == pytest.approx(rnd.accepted), (decoder, budget, prompt)


@pytest.mark.parametrize("decoder", VALUED_RULES)
def test_greedy_prediction_values_equal_the_hits_drafting_ahead_realized(mock_pair, decoder):
    # At T = 0 a recorded round's prediction value is 0 or 1, and it says whether the next round used the pool
    # grown ahead (when that round speculated, and the prediction ended inside the pool's expanded part).
    from study.values import prediction_hit

    pair = mock_pair(VOCAB, 4, 1.0, PoolConfig(topk=4, depth=6, expand=3))  # deep: paths end inside it
    config = DecodeConfig(decoder, 0.0, 4, 40, ahead=True)
    compared = hits = 0
    for prompt in PROMPTS:
        recorder = RoundRecorder(pair.target, config)
        result = run(pair, prompt, config, recorder)
        assert len(recorder.rounds) == len(result.rounds)  # every round speculated
        for rnd, after in zip(recorder.rounds, result.rounds[1:]):
            p = prediction_hit(rnd, rnd.scored(), decoder)
            if np.isnan(p):
                continue
            assert p in (0.0, 1.0) and (p == 1.0) == (after.ahead == 1), (p, after.ahead)
            compared += 1
            hits += p == 1.0
    assert compared >= 10 and 0 < hits < compared
