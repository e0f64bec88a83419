"""vLLM's `SamplingParams` for the vLLM-compatible layer (launch.vllm_compat): vLLM's fields, defaults and positional
order, checked as the runtime checks its own settings, and made into one DecodeConfig per output."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from pipeline.config import ConfigError, is_int
from pipeline.settings import DecodeConfig

# vLLM's fields the runtime cannot honour, each accepted at its vLLM default only (which changes nothing) and
# refused at any other value, naming it.
UNSUPPORTED_SAMPLING = {"min_tokens": 0, "prompt_logprobs": None, "detokenize": True, "bad_words": None,
                        "allowed_token_ids": None, "logits_processors": None, "truncate_prompt_tokens": None,
                        "guided_decoding": None, "structured_outputs": None, "logit_bias": None,
                        "spaces_between_special_tokens": True}
# The order vLLM's SamplingParams takes its first fields positionally (a msgspec struct's field order).
POSITIONAL = ("n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k",
              "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens", "min_tokens", "logprobs",
              "prompt_logprobs")
# Penalties that would change the target's law, at their neutral values: any other is not applied (the runtime
# samples the target's law exactly), and the call says so in a logged line.
NEUTRAL_PENALTIES = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}
MAX_LOGPROBS = 20  # vLLM's default `max_logprobs`: the most top log-probabilities an output token may carry


@dataclass(slots=True, init=False)
class SamplingParams:
    """vLLM's sampling parameters, in vLLM's positional order (POSITIONAL) or by keyword. `top_k`, `top_p` and
    `min_p` filter the target's law exactly as the command line's filters do; `n` outputs are independent
    decodes, seeded `seed + i` when `seed` is given and each with a fresh seed otherwise (as vLLM seeds them);
    `best_of` decodes that many and keeps the `n` of highest cumulative log-probability; `logprobs` gives each
    output token's log-probability under the target (with the `logprobs` most likely tokens beside it);
    `max_tokens=None` decodes up to the context's limit. Penalties away from neutral are not applied."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: every token
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()  # given as a string or a list of them
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    max_tokens: int | None = 16  # None: up to the context's limit
    logprobs: int | None = None
    best_of: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    def __init__(self, *positional, **given) -> None:
        if len(positional) > len(POSITIONAL):
            raise ConfigError("sampling_params", f"take at most {len(POSITIONAL)} positional arguments "
                                                 f"({', '.join(POSITIONAL)}), got {len(positional)}")
        for name, value in zip(POSITIONAL, positional):
            if name in given:
                raise ConfigError(name, "is given both by position and by keyword")
            given[name] = value
        names = [f.name for f in dataclasses.fields(self)]
        for name, value in given.items():
            if name in UNSUPPORTED_SAMPLING:
                if value != UNSUPPORTED_SAMPLING[name]:
                    raise ConfigError(name, f"is not supported here: the runtime decodes by exact speculative "
                                            f"sampling of the target's law and accepts only "
                                            f"{UNSUPPORTED_SAMPLING[name]!r}, got {value!r}")
            elif name not in names:
                raise ConfigError(name, f"is not a SamplingParams field; the fields are {', '.join(names)}")
        for f in dataclasses.fields(self):
            setattr(self, f.name, given.get(f.name, f.default))
        self.__post_init__()

    def __post_init__(self) -> None:
        if not (is_int(self.n) and self.n >= 1):
            raise ConfigError("n", f"must be a whole number >= 1, got {self.n!r}")
        if not (self.best_of is None or (is_int(self.best_of) and self.best_of >= self.n)):
            raise ConfigError("best_of", f"must be None or a whole number >= n ({self.n}), got {self.best_of!r}")
        if not (self.max_tokens is None or (is_int(self.max_tokens) and self.max_tokens >= 1)):
            raise ConfigError("max_tokens", f"must be None (up to the context's limit) or a whole number >= 1, got "
                                            f"{self.max_tokens!r}")
        if not (self.seed is None or (is_int(self.seed) and self.seed >= 0)):
            raise ConfigError("seed", f"must be None or a whole number >= 0, got {self.seed!r}")
        if not (self.logprobs is None or (is_int(self.logprobs) and 0 <= self.logprobs <= MAX_LOGPROBS)):
            raise ConfigError("logprobs", f"must be None or a whole number from 0 to {MAX_LOGPROBS} (vLLM's "
                                          f"max_logprobs), got {self.logprobs!r}")
        self._check_penalties()
        if is_int(self.top_k) and self.top_k == -1:
            self.top_k = 0  # vLLM's older spelling of "every token"
        self.stop = (self.stop,) if isinstance(self.stop, str) else _as_tuple(self.stop)
        self.stop_token_ids = _as_tuple(self.stop_token_ids)
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be True or False, got {getattr(self, name)!r}")
        self.decode_config("ar", 0, 1)  # the shared fields checked as the runtime checks them, under the same names

    def _check_penalties(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not -2 <= value <= 2:
                raise ConfigError(name, f"must be a number from -2 to 2, got {value!r}")
        value = self.repetition_penalty
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
            raise ConfigError("repetition_penalty", f"must be a finite number > 0, got {value!r}")

    @property
    def decodes(self) -> int:
        """How many decodes a request takes: `best_of`, else `n`."""
        return self.best_of or self.n

    def unapplied(self) -> list[str]:
        """The penalties given away from neutral, as `name=value`: the runtime does not apply them."""
        return [f"{name}={getattr(self, name)!r}" for name, neutral in NEUTRAL_PENALTIES.items()
                if getattr(self, name) != neutral]

    def decode_config(self, decoder: str, seed: int, max_new_tokens: int, **runtime) -> DecodeConfig:
        """These parameters as the runtime's DecodeConfig of one output: its seed and length given (they
        depend on the output's index and the prompt's length)."""
        return DecodeConfig(decoder, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                            min_p=self.min_p, stop=self.stop, stop_token_ids=self.stop_token_ids,
                            ignore_eos=self.ignore_eos, max_new_tokens=max_new_tokens, seed=seed, **runtime)

    @classmethod
    def of(cls, value, count: int) -> list[SamplingParams]:
        """`sampling_params` as `generate` takes it (None, one SamplingParams or dict of its fields, or a list
        of them, one per prompt) -> one per prompt."""
        if isinstance(value, (list, tuple)):
            if len(value) != count:
                raise ConfigError("sampling_params", f"holds {len(value)} parameters for {count} prompts: give "
                                                     f"one, or one per prompt")
            return [cls._one(v) for v in value]
        return [cls._one(value)] * count

    @classmethod
    def _one(cls, value) -> SamplingParams:
        if value is None:
            return cls()
        if isinstance(value, SamplingParams):
            return value
        if isinstance(value, dict):
            if bad := [k for k in value if not isinstance(k, str)]:
                raise ConfigError("sampling_params", f"keys must be field names, got {bad[0]!r}")
            return cls(**value)
        raise ConfigError("sampling_params", f"must be a SamplingParams, a dict of its fields or a list of them, "
                                             f"got {type(value).__name__}")


def _as_tuple(value):
    """A list given for a tuple field (None: empty); anything else as it is, for the runtime's check to name."""
    return () if value is None else tuple(value) if isinstance(value, list) else value
