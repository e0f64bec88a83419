"""Decoder speeds and paired-bootstrap gains: speed is summed tokens over summed seconds, gain a speed ratio - 1.

The gain of decoder A over decoder B on the same prompts is speed_a / speed_b - 1 (DESIGN.md section 6). Its
interval is a percentile interval over bootstrap resamples of prompts. Every decoder in one call is resampled
with the same prompt indices, so a prompt's shared difficulty cancels within each pair and all pairs in a
report rest on one set of resamples.

Reproducibility contract: the resampled prompt indices are `rng.integers(0, n_prompts, (n_resamples,
n_prompts))`, drawn once per call from `np.random.default_rng(rng)`."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


# Fewest prompts whose paired bootstrap gives an interval worth printing as one: with fewer, the percentile
# interval is little more than the range of the per-prompt gains (2 prompts have 3 distinct resamples, 4 have
# 35, and a resample of one prompt repeated falls in the outer 2.5% only from 5 prompts on).
MIN_INTERVAL_PROMPTS = 5


@dataclass(frozen=True, slots=True)
class GainResult:
    """Gain of decoder A over decoder B on the same prompts, with its bootstrap interval."""

    gain: float  # speed_a / speed_b - 1 on all prompts
    low: float  # percentile interval ends
    high: float
    standard_error: float  # standard deviation (ddof=1) of the bootstrap gains
    speed_a: float  # tokens per second, summed over prompts
    speed_b: float
    n_prompts: int
    lowest: float = float("nan")  # the lowest prompt's own gain (its speed under A over its speed under B, - 1)

    @property
    def has_interval(self) -> bool:
        """Whether enough prompts back the interval for it to be reported as a bootstrap interval."""
        return self.n_prompts >= MIN_INTERVAL_PROMPTS

    def interval_text(self) -> str:
        """"[+a%, +b%]", or, from fewer than MIN_INTERVAL_PROMPTS prompts, none (it would be about their range)."""
        if not self.has_interval:
            return f"none ({self.n_prompts} prompts)"
        return f"[{percent(self.low)}, {percent(self.high)}]"


def paired_gains(tokens: Mapping[str, object], seconds: Mapping[str, object], pairs: Sequence[tuple[str, str]],
                 *, n_resamples: int = 2000, confidence_level: float = 0.95,
                 rng=None) -> dict[tuple[str, str], GainResult]:
    """Gains for each (a, b) name pair, all from one set of resampled prompt indices.
    tokens, seconds: name -> (n_prompts,) per-prompt array, the same prompt order for every name. Only the names in
    `pairs` are read. rng: None, an int seed or a numpy Generator (which is advanced)."""
    if not isinstance(tokens, Mapping):
        raise ValueError("`tokens` must be a mapping from decoder name to per-prompt tokens")
    if not isinstance(seconds, Mapping):
        raise ValueError("`seconds` must be a mapping from decoder name to per-prompt seconds")
    pairs = _check_pairs(pairs, tokens, seconds)
    names = list(dict.fromkeys(name for pair in pairs for name in pair))
    tok, sec = {}, {}
    for name in names:
        tok[name], sec[name] = _check_run(tokens[name], seconds[name], f"tokens[{name!r}]", f"seconds[{name!r}]")
        _check_same_length(tok[name], f"tokens[{name!r}]", tok[names[0]], f"tokens[{names[0]!r}]")
    for name in dict.fromkeys(b for _, b in pairs):
        _check_denominator(tok[name], f"tokens[{name!r}]")
    n_resamples, confidence_level, rng = _check_settings(n_resamples, confidence_level, rng)
    return _gains(tok, sec, pairs, n_resamples, confidence_level, rng)


# ---- computation: inputs are clean ----

def percent(x: float) -> str:
    """A gain as a signed percentage with one decimal."""
    return f"{100 * x:+.1f}%" if np.isfinite(x) else str(x)


def _speed(tokens: np.ndarray, seconds: np.ndarray) -> float:
    """Summed tokens over summed seconds of (n,) arrays."""
    return float(tokens.sum() / seconds.sum())


def resample_counts(rng: np.random.Generator, n_resamples: int, n_prompts: int) -> np.ndarray:
    """(n_resamples, n_prompts) times each prompt is drawn in each resample. Counts rather than gathered values: one
    matrix product then sums every decoder at once, with memory independent of the number of decoders."""
    idx = rng.integers(0, n_prompts, (n_resamples, n_prompts))  # (R, n)
    flat = idx + n_prompts * np.arange(n_resamples)[:, None]  # distinct bins per resample
    counts = np.bincount(flat.ravel(), minlength=n_resamples * n_prompts)
    return counts.reshape(n_resamples, n_prompts).astype(np.float64)


def _gains(tokens: dict[str, np.ndarray], seconds: dict[str, np.ndarray], pairs: list[tuple[str, str]],
           n_resamples: int, confidence_level: float,
           rng: np.random.Generator) -> dict[tuple[str, str], GainResult]:
    """Gains of each pair from name -> (n,) arrays, with one shared draw of resampled prompts."""
    names = list(tokens)
    n_prompts = len(tokens[names[0]])
    col = {name: j for j, name in enumerate(names)}
    tok = np.stack([tokens[name] for name in names], axis=1)  # (n, k)
    sec = np.stack([seconds[name] for name in names], axis=1)  # (n, k)
    counts = resample_counts(rng, n_resamples, n_prompts)  # (R, n)
    boot_speed = (counts @ tok) / (counts @ sec)  # (R, k); seconds > 0, so no resample divides by zero
    speed = {name: _speed(tokens[name], seconds[name]) for name in names}
    with np.errstate(divide="ignore", invalid="ignore"):
        own = tok / sec  # (n, k) each prompt's own speed
    tail = (1.0 - confidence_level) / 2.0
    out = {}
    for a, b in pairs:
        # A resample holding only zero-token prompts of B has speed 0 there and an infinite gain.
        with np.errstate(divide="ignore"):
            boot_gain = boot_speed[:, col[a]] / boot_speed[:, col[b]] - 1.0  # (R,)
        low, high = np.quantile(boot_gain, [tail, 1.0 - tail])
        standard_error = float(np.std(boot_gain, ddof=1)) if n_resamples > 1 else float("nan")
        with np.errstate(divide="ignore", invalid="ignore"):
            per_prompt = own[:, col[a]] / own[:, col[b]] - 1.0  # (n,) nan where B emitted no token
        lowest = float(np.nanmin(per_prompt)) if np.isfinite(per_prompt).any() else float("nan")
        out[a, b] = GainResult(gain=speed[a] / speed[b] - 1.0, low=float(low), high=float(high),
                               standard_error=standard_error, speed_a=speed[a], speed_b=speed[b],
                               n_prompts=n_prompts, lowest=lowest)
    return out


# ---- validation at the public edge ----

def _as_1d(x, name: str) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be an array of numbers") from None
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be 1-D (one value per prompt), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"`{name}` must be finite")
    return arr


def _check_run(tokens, seconds, tokens_name: str, seconds_name: str) -> tuple[np.ndarray, np.ndarray]:
    """One decoder's (n_prompts,) tokens and seconds as float64 arrays, or ValueError."""
    tokens, seconds = _as_1d(tokens, tokens_name), _as_1d(seconds, seconds_name)
    _check_same_length(seconds, seconds_name, tokens, tokens_name)
    if len(tokens) < 2:
        raise ValueError(f"`{tokens_name}` must hold at least 2 prompts, got {len(tokens)}")
    if (tokens < 0).any():
        raise ValueError(f"`{tokens_name}` must be non-negative")
    if (seconds <= 0).any():
        raise ValueError(f"`{seconds_name}` must be positive")
    return tokens, seconds


def _check_same_length(x: np.ndarray, name: str, ref: np.ndarray, ref_name: str) -> None:
    if len(x) != len(ref):
        raise ValueError(f"`{name}` must have the same length as `{ref_name}`, got {len(x)} and {len(ref)}")


def _check_denominator(tokens: np.ndarray, name: str) -> None:
    # B's speed divides the gain, so it must be positive on the full sample.
    if tokens.sum() <= 0:
        raise ValueError(f"`{name}` must have a positive sum: the gain divides by this decoder's speed")


def _check_pairs(pairs, tokens: Mapping, seconds: Mapping) -> list[tuple[str, str]]:
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence) or len(pairs) == 0:
        raise ValueError("`pairs` must be a non-empty sequence of (a, b) name pairs")
    out = []
    for pair in pairs:
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"`pairs` entries must be (a, b) name pairs, got {pair!r}")
        for name in pair:
            if name not in tokens:
                raise ValueError(f"`pairs` names {name!r}, which is not in `tokens`")
            if name not in seconds:
                raise ValueError(f"`pairs` names {name!r}, which is not in `seconds`")
        out.append((pair[0], pair[1]))
    return out


def _check_settings(n_resamples, confidence_level,
                    rng) -> tuple[int, float, np.random.Generator]:
    if not isinstance(n_resamples, numbers.Integral) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise ValueError(f"`n_resamples` must be a positive integer, got {n_resamples!r}")
    if (not isinstance(confidence_level, numbers.Real) or isinstance(confidence_level, bool)
            or not 0 < confidence_level < 1):
        raise ValueError(f"`confidence_level` must be a number in (0, 1), got {confidence_level!r}")
    if rng is not None and not isinstance(rng, np.random.Generator):
        if not isinstance(rng, numbers.Integral) or isinstance(rng, bool) or rng < 0:
            raise ValueError(f"`rng` must be None, a non-negative int seed or a numpy Generator, got {rng!r}")
    return int(n_resamples), float(confidence_level), np.random.default_rng(rng)
