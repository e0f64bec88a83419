"""Properties of evaluation.stats: reproducible, calibrated, equal to the direct loop, strict at the edge."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evaluation.stats import GainResult, paired_gains


def paired_gain(tokens_a, seconds_a, tokens_b, seconds_b, **settings) -> GainResult:
    """The gain of decoder A over decoder B alone, from (n_prompts,) tokens and seconds aligned by prompt."""
    return paired_gains({"a": tokens_a, "b": tokens_b}, {"a": seconds_a, "b": seconds_b}, [("a", "b")],
                        **settings)["a", "b"]


def synthetic_pair(rng: np.random.Generator, n_prompts: int, ratio: float, speed_b: float = 40.0):
    """(n,) tokens and seconds for decoders A and B on the same prompts, A truly `ratio` times faster.

    Both decoders share each prompt's output length and difficulty; each decode has its own timing noise,
    identically distributed for A and B, so the population speed ratio is exactly `ratio`.
    """
    tokens = rng.poisson(150, n_prompts) + 1.0  # (n,)
    difficulty = rng.lognormal(0.0, 0.4, n_prompts)  # (n,) shared by both decoders
    noise_a, noise_b = rng.lognormal(0.0, 0.15, (2, n_prompts))
    seconds_b = tokens / speed_b * difficulty * noise_b
    seconds_a = tokens / (speed_b * ratio) * difficulty * noise_a
    return tokens, seconds_a, tokens.copy(), seconds_b


@pytest.fixture
def data():
    return synthetic_pair(np.random.default_rng(7), 30, 1.3)


# ---- reproducibility ----

def test_same_int_seed_gives_identical_result_in_another_process(data):
    """The seed alone fixes the resamples: no global random state, no per-process hashing."""
    code = ("import json, sys, numpy as np; from evaluation.stats import paired_gains; "
            "ta, sa, tb, sb = [np.array(x) for x in json.load(sys.stdin)]; "
            "r = paired_gains({'a': ta, 'b': tb}, {'a': sa, 'b': sb}, [('a', 'b')], n_resamples=300, "
            "rng=123)['a', 'b']; "
            "print(json.dumps([r.gain, r.low, r.high, r.standard_error]))")
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps([x.tolist() for x in data]), text=True,
                          capture_output=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    here = paired_gain(*data, n_resamples=300, rng=123)
    assert json.loads(done.stdout) == [here.gain, here.low, here.high, here.standard_error]


def test_same_generator_seed_gives_identical_result(data):
    first = paired_gain(*data, rng=np.random.default_rng(123))
    second = paired_gain(*data, rng=np.random.default_rng(123))
    assert first == second
    assert first == paired_gain(*data, rng=123)  # an int seed means default_rng(seed)


def test_different_seed_gives_different_interval(data):
    first, second = paired_gain(*data, rng=1), paired_gain(*data, rng=2)
    assert first.gain == second.gain  # the point estimate does not depend on the resamples
    assert (first.low, first.high, first.standard_error) != (second.low, second.high, second.standard_error)


def test_generator_is_advanced(data):
    rng = np.random.default_rng(5)
    assert paired_gain(*data, rng=rng) != paired_gain(*data, rng=rng)


# ---- calibration ----

def test_interval_covers_true_gain_at_nominal_rate():
    # Bounds fixed before running: 200 repetitions at a true 95% give a standard error of 1.5 points;
    # the percentile bootstrap runs slightly low at n = 60, so accept [0.90, 0.99]. Default 2,000 resamples.
    rng = np.random.default_rng(2024)
    ratio, repetitions = 1.25, 200
    covered = 0
    for _ in range(repetitions):
        result = paired_gain(*synthetic_pair(rng, 60, ratio), rng=rng)
        covered += result.low <= ratio - 1.0 <= result.high
    assert 0.90 <= covered / repetitions <= 0.99


def test_standard_error_tracks_spread_of_estimates():
    # The bootstrap standard error estimates the sampling spread of the gain across fresh samples.
    rng = np.random.default_rng(11)
    samples = [synthetic_pair(rng, 60, 1.25) for _ in range(200)]
    spread = np.std([paired_gain(*s, n_resamples=10).gain for s in samples], ddof=1)
    typical_se = np.median([paired_gain(*s, n_resamples=500, rng=rng).standard_error for s in samples[:40]])
    assert 0.7 < typical_se / spread < 1.4


# ---- agreement with the direct computation ----

def direct_gain(ta, sa, tb, sb, n_resamples, confidence_level, seed):
    """The definition written out: one Python loop over resampled prompt index sets."""
    n = len(ta)
    idx = np.random.default_rng(seed).integers(0, n, (n_resamples, n))
    boot = []
    for r in range(n_resamples):
        i = idx[r]
        boot.append((ta[i].sum() / sa[i].sum()) / (tb[i].sum() / sb[i].sum()) - 1.0)
    tail = (1 - confidence_level) / 2
    low, high = np.percentile(boot, [100 * tail, 100 * (1 - tail)])
    gain = (ta.sum() / sa.sum()) / (tb.sum() / sb.sum()) - 1.0
    return gain, low, high, np.std(boot, ddof=1)


def test_vectorized_matches_direct_loop():
    ta, sa, tb, sb = synthetic_pair(np.random.default_rng(3), 12, 1.1)
    tb = tb + np.random.default_rng(4).integers(-5, 5, 12)  # decoders need not emit the same tokens
    result = paired_gain(ta, sa, tb, sb, n_resamples=300, confidence_level=0.9, rng=np.random.default_rng(99))
    gain, low, high, se = direct_gain(ta, sa, tb, sb, 300, 0.9, 99)
    assert result.gain == gain
    assert result.low == pytest.approx(low, rel=0, abs=1e-12)
    assert result.high == pytest.approx(high, rel=0, abs=1e-12)
    assert result.standard_error == pytest.approx(se, rel=0, abs=1e-12)
    assert result.speed_a == ta.sum() / sa.sum() and result.speed_b == tb.sum() / sb.sum()
    assert result.n_prompts == 12


def test_all_pairs_share_one_resample():
    rng = np.random.default_rng(8)
    ta, sa, tb, sb = synthetic_pair(rng, 25, 1.2)
    _, sc, _, _ = synthetic_pair(rng, 25, 1.0)
    tokens = {"a": ta, "b": tb, "c": ta}
    seconds = {"a": sa, "b": sb, "c": sc}
    both = paired_gains(tokens, seconds, [("a", "b"), ("c", "b")], n_resamples=400, rng=17)
    assert both["a", "b"] == paired_gain(ta, sa, tb, sb, n_resamples=400, rng=17)
    assert both["c", "b"] == paired_gain(ta, sc, tb, sb, n_resamples=400, rng=17)


def test_lowest_is_the_slowest_prompts_own_gain():
    # Prompt speeds under A: 20, 30, 10; under B: 10, 20, 10 -> own gains +100%, +50%, 0%; the third prompt
    # emitted nothing under B in a fourth column of the sums, which has no gain of its own.
    tokens_a, seconds_a = np.array([40.0, 30.0, 10.0, 5.0]), np.array([2.0, 1.0, 1.0, 1.0])
    tokens_b, seconds_b = np.array([40.0, 30.0, 10.0, 0.0]), np.array([4.0, 1.5, 1.0, 1.0])
    g = paired_gain(tokens_a, seconds_a, tokens_b, seconds_b, n_resamples=50, rng=0)
    assert g.lowest == pytest.approx(0.0)
    g = paired_gain(tokens_b[:2], seconds_b[:2], tokens_a[:2], seconds_a[:2], n_resamples=50, rng=0)
    assert g.lowest == pytest.approx(-0.5)  # the first prompt: 10 against 20 tok/s


def test_result_is_frozen(data):
    result = paired_gain(*data, n_resamples=50, rng=0)
    assert isinstance(result, GainResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.gain = 0.0


# ---- validation ----

GOOD = ([10.0, 20.0, 30.0], [1.0, 2.0, 3.0])


def gain_with(**changes):
    args = {"tokens_a": GOOD[0], "seconds_a": GOOD[1], "tokens_b": GOOD[0], "seconds_b": GOOD[1]}
    settings = {key: changes.pop(key) for key in ("n_resamples", "confidence_level", "rng") if key in changes}
    args.update(changes)
    return paired_gain(*args.values(), **settings)


@pytest.mark.parametrize("changes, message", [
    ({"tokens_a": [[1.0, 2.0, 3.0]]}, "`tokens\\['a'\\]` must be 1-D"),
    ({"seconds_b": 3.0}, "`seconds\\['b'\\]` must be 1-D"),
    ({"tokens_a": ["x", "y", "z"]}, "`tokens\\['a'\\]` must be an array of numbers"),
    ({"seconds_a": [1.0, 2.0]}, "`seconds\\['a'\\]` must have the same length as `tokens\\['a'\\]`"),
    ({"tokens_b": [1.0, 2.0], "seconds_b": [1.0, 2.0]},
     "`tokens\\['b'\\]` must have the same length as `tokens\\['a'\\]`"),
    ({"tokens_a": [1.0], "seconds_a": [1.0], "tokens_b": [1.0], "seconds_b": [1.0]},
     "`tokens\\['a'\\]` must hold at least 2 prompts"),
    ({"tokens_a": [1.0, np.nan, 3.0]}, "`tokens\\['a'\\]` must be finite"),
    ({"seconds_b": [1.0, np.inf, 3.0]}, "`seconds\\['b'\\]` must be finite"),
    ({"tokens_b": [1.0, -1.0, 3.0]}, "`tokens\\['b'\\]` must be non-negative"),
    ({"seconds_a": [1.0, 0.0, 3.0]}, "`seconds\\['a'\\]` must be positive"),
    ({"seconds_b": [1.0, -2.0, 3.0]}, "`seconds\\['b'\\]` must be positive"),
    ({"tokens_b": [0.0, 0.0, 0.0]}, "`tokens\\['b'\\]` must have a positive sum"),
    ({"n_resamples": 0}, "`n_resamples` must be a positive integer"),
    ({"n_resamples": 10.0}, "`n_resamples` must be a positive integer"),
    ({"n_resamples": True}, "`n_resamples` must be a positive integer"),
    ({"confidence_level": 0.0}, r"`confidence_level` must be a number in \(0, 1\)"),
    ({"confidence_level": 1.0}, r"`confidence_level` must be a number in \(0, 1\)"),
    ({"confidence_level": float("nan")}, r"`confidence_level` must be a number in \(0, 1\)"),
    ({"confidence_level": "95%"}, r"`confidence_level` must be a number in \(0, 1\)"),
    ({"rng": 1.5}, "`rng` must be None, a non-negative int seed or a numpy Generator"),
    ({"rng": -1}, "`rng` must be None, a non-negative int seed or a numpy Generator"),
])
def test_paired_gain_rejects_bad_input(changes, message):
    with pytest.raises(ValueError, match=message):
        gain_with(**changes)


TOKENS = {"a": GOOD[0], "b": GOOD[0]}
SECONDS = {"a": GOOD[1], "b": GOOD[1]}


@pytest.mark.parametrize("tokens, seconds, pairs, message", [
    ([1.0], SECONDS, [("a", "b")], "`tokens` must be a mapping"),
    (TOKENS, GOOD[1], [("a", "b")], "`seconds` must be a mapping"),
    (TOKENS, SECONDS, [], "`pairs` must be a non-empty sequence"),
    (TOKENS, SECONDS, "ab", "`pairs` must be a non-empty sequence"),
    (TOKENS, SECONDS, [("a", "b", "c")], "`pairs` entries must be \\(a, b\\) name pairs"),
    (TOKENS, SECONDS, ["ab"], "`pairs` entries must be \\(a, b\\) name pairs"),
    (TOKENS, SECONDS, [("a", "z")], "`pairs` names 'z', which is not in `tokens`"),
    ({**TOKENS, "z": GOOD[0]}, SECONDS, [("z", "a")], "`pairs` names 'z', which is not in `seconds`"),
    ({**TOKENS, "b": [1.0, 2.0]}, {**SECONDS, "b": [1.0, 2.0]}, [("a", "b")],
     "`tokens\\['b'\\]` must have the same length as `tokens\\['a'\\]`"),
    ({**TOKENS, "b": [1.0, 2.0]}, SECONDS, [("a", "b")],
     "`seconds\\['b'\\]` must have the same length as `tokens\\['b'\\]`"),
    (TOKENS, {**SECONDS, "a": [1.0, 0.0, 1.0]}, [("a", "b")], "`seconds\\['a'\\]` must be positive"),
    ({**TOKENS, "b": [0.0, 0.0, 0.0]}, SECONDS, [("a", "b")], "`tokens\\['b'\\]` must have a positive sum"),
])
def test_paired_gains_rejects_bad_input(tokens, seconds, pairs, message):
    with pytest.raises(ValueError, match=message):
        paired_gains(tokens, seconds, pairs)


def test_paired_gains_ignores_names_outside_pairs():
    tokens = {**TOKENS, "unused": [1.0]}  # malformed, but never read
    result = paired_gains(tokens, SECONDS, [("a", "b")], n_resamples=20, rng=0)
    assert result["a", "b"].gain == 0.0
