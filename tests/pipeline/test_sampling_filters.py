"""top_k, top_p and min_p: the filters against a plain numpy reference, and at T = 1 every decoder's whole
outputs following the filtered target law, which is `ar`'s with the same options (goodness of fit as in
test_sampling_law, against the law enumerated from the mock target's rows filtered by the reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.mock import EOS
from pipeline.budget import PassCosts
from pipeline.config import ConfigError, PoolConfig
from pipeline.settings import DecodeConfig
from pipeline.decode import decode
from pipeline.config import Filters
from pipeline.sampling import filtered
from tests.pipeline.test_sampling_law import goodness_of_fit

N_DECODES = 3000
DECODERS = ("ar", "draft", "pearl", "root-draw", "root")
# (vocabulary, horizon, filters): each filter where it bites on a 4-token vocabulary, and the three together
# with the field's usual values on a 32-token one.
SETTINGS = [(4, 3, Filters(top_k=2)), (4, 3, Filters(top_p=0.9)), (4, 3, Filters(min_p=0.3)),
            (32, 2, Filters(top_k=20, top_p=0.9, min_p=0.05))]
CASES = [(s, d) for s in range(len(SETTINGS)) for d in DECODERS]
ALPHA = 1e-3 / len(CASES)  # family-wise 1e-3 (Bonferroni), fixed before any result was seen


def reference(probs: np.ndarray, f: Filters) -> np.ndarray:
    """(V,) float64 law -> the filtered law, step by step as transformers' warpers describe it."""
    p = probs.copy()
    if f.top_k:
        p[p < np.sort(p)[::-1][min(f.top_k, len(p)) - 1]] = 0
        p /= p.sum()
    if f.top_p < 1:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        p[order[before >= f.top_p]] = 0
        p /= p.sum()
    if f.min_p:
        p[p < f.min_p * p.max()] = 0
        p /= p.sum()
    return p


def softmax(z: np.ndarray) -> np.ndarray:
    z = np.exp(np.asarray(z, np.float64) - np.max(z))
    return z / z.sum()


@pytest.mark.parametrize("f", [Filters(top_k=3), Filters(top_p=0.5), Filters(min_p=0.2),
                               Filters(top_k=5, top_p=0.8, min_p=0.1)], ids=str)
@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_filtered_rows_give_the_filtered_law(f, temperature):
    rows = torch.randn(8, 50, generator=torch.Generator().manual_seed(3)) * 2
    out = filtered(rows, temperature, f)
    for row, got in zip(rows, out):
        want = reference(softmax(row.numpy() / temperature), f)
        law = torch.softmax(got / temperature, -1).double().numpy()
        assert np.array_equal(law > 0, want > 0) and np.allclose(law, want, atol=1e-6)


def test_greedy_rows_are_left_alone():
    rows = torch.randn(3, 20)
    assert filtered(rows, 0.0, Filters(top_k=1, top_p=0.1, min_p=0.9)) is rows


@pytest.mark.parametrize("settings, message", [
    ({"top_k": -1}, "`top_k` must be a non-negative integer"),
    ({"top_p": 0.0}, "`top_p` must be a number with 0 < top_p <= 1"),
    ({"top_p": 1.5}, "`top_p` must be a number with 0 < top_p <= 1"),
    ({"min_p": -0.1}, "`min_p` must be a number with 0 <= min_p <= 1")])
def test_bad_filters_are_refused_naming_the_field(settings, message):
    with pytest.raises(ConfigError, match=message):
        DecodeConfig("ar", 1.0, **settings)


def exact_law(model, horizon: int, f: Filters) -> dict[tuple[int, ...], float]:
    law: dict[tuple[int, ...], float] = {}

    def walk(digest, prefix, prob):
        if len(prefix) == horizon or (prefix and prefix[-1] == EOS):
            law[tuple(prefix)] = prob
            return
        row = reference(softmax(model.logits(digest)), f)
        for token in np.flatnonzero(row):
            walk(model.extend(digest, int(token)), prefix + [int(token)], prob * row[token])

    walk(model.digest([3]), [], 1.0)
    return law


@pytest.fixture(scope="module")
def pairs(mock_pair):
    return {vocab: mock_pair(vocab, 5, 1.0, PoolConfig(topk=3, depth=3, expand=2)) for vocab in (4, 32)}


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=[f"{SETTINGS[s][2]}-V{SETTINGS[s][0]}-{d}" for s, d in CASES])
def test_filtered_outputs_follow_the_filtered_target_law(case, pairs):
    setting, decoder = CASES[case]
    vocab, horizon, f = SETTINGS[setting]
    pair = pairs[vocab]
    law = exact_law(pair.target_model, horizon, f)
    unfiltered = exact_law(pair.target_model, horizon, Filters())
    assert sum(abs(law.get(o, 0) - p) for o, p in unfiltered.items()) > 0.1  # the filters change the law
    config = DecodeConfig(decoder, 1.0, 4, horizon, seed=case, top_k=f.top_k, top_p=f.top_p, min_p=f.min_p)
    outcomes = []
    for i in range(N_DECODES):
        generator = torch.Generator().manual_seed(7_000_003 * case + i)
        result = decode(pair.target, pair.drafter if decoder != "ar" else None, [3], config, frozenset({EOS}),
                        generator, costs=PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045}))
        outcomes.append(tuple(result.tokens))
    assert goodness_of_fit(outcomes, law) >= ALPHA
