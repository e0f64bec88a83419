"""Sampling at any temperature a user may pass: the law stays finite and sums to one, and as T -> 0 it is
the greedy law, so that every decoder gives the target's greedy stream at such temperatures."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from models.mock import EOS
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from pipeline.verify import draw, target_probs

TINY = [1e-39, 1e-300, sys.float_info.min, 5e-324]  # below float32's range; the smallest normal and
IDS = ["1e-39", "1e-300", "smallest-normal", "smallest-subnormal"]  # subnormal doubles
VOCAB = 64


def rows(n: int = 6, vocab: int = 1000) -> torch.Tensor:
    return 3.0 * torch.randn(n, vocab, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("temperature", TINY, ids=IDS)
def test_a_tiny_temperature_gives_the_point_mass_on_the_argmax(temperature):
    logits = rows()
    probs = target_probs(logits, temperature)
    assert torch.isfinite(probs).all() and probs.dtype == torch.float32
    assert torch.equal(probs, target_probs(logits, 0.0))  # exactly the greedy law
    drawn = draw(logits, temperature, torch.Generator().manual_seed(1))
    assert torch.equal(drawn, logits.argmax(-1))


@pytest.mark.parametrize("temperature", TINY, ids=IDS)
def test_exact_ties_share_the_mass_at_a_tiny_temperature(temperature):
    logits = torch.tensor([[1.0, 5.0, 5.0, -3.0]])
    np.testing.assert_array_equal(target_probs(logits, temperature).numpy(), [[0.0, 0.5, 0.5, 0.0]])


@pytest.mark.parametrize("temperature", [1e-30, 1e-3, 1.0, 1e6, 1e300])
def test_the_law_is_finite_and_normalized_at_every_scale(temperature):
    logits = rows()
    probs = target_probs(logits, temperature).double()
    assert torch.isfinite(probs).all()
    np.testing.assert_allclose(probs.sum(-1).numpy(), 1.0, rtol=1e-5)
    expected = torch.softmax(logits.double() / temperature, -1)  # the reference, in float64
    np.testing.assert_allclose(probs.numpy(), expected.numpy(), atol=1e-6)


def test_large_logits_do_not_overflow():
    # A row the softmax would overflow without subtracting the max first (exp(1e4) is inf in float32).
    logits = torch.tensor([[1e4, 1e4 - 1.0, -1e4]])
    np.testing.assert_allclose(target_probs(logits, 0.5).numpy(), [[1 / (1 + np.exp(-2)), np.exp(-2) / (1 + np.exp(-2)),
                                                                     0.0]], rtol=1e-6)


@pytest.mark.parametrize("temperature", TINY, ids=IDS)
def test_every_decoder_gives_the_greedy_stream_at_a_tiny_temperature(temperature, mock_pair, greedy):
    pool = PoolConfig(topk=4, depth=3, expand=2)
    pair = mock_pair(VOCAB, 11, 1.0, pool)
    eos = frozenset({EOS})
    for seed, prompt in enumerate([[5, 17, 3], [9], [40, 2, 2, 61, 7]]):
        stream = greedy(pair.target_model, prompt, 16 + pool.depth)
        for decoder in DECODERS:
            generator = torch.Generator().manual_seed(seed)
            out = decode(pair.target, pair.drafter if decoder != "ar" else None, prompt,
                         DecodeConfig(decoder, temperature, 8, 16), eos, generator).tokens
            assert out == stream[:len(out)] and (len(out) >= 16 or out[-1] == EOS), (decoder, prompt)
