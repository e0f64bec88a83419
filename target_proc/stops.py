"""Stop strings, which need the output's text: where a round's tokens complete one, and the text cut before it.

As vLLM's default: the output's ids end with the token that completes the stop string, its text just before the
string; a stop token id is kept as the ids' last, its text left out. pipeline.decode calls StopStrings after
each round, so the decode ends at that round."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.config import InputError
from pipeline.result import DecodeResult
from pipeline.settings import DecodeConfig


class StopStrings:
    """pipeline.decode's StopCheck for stop strings: the first token whose text completes one of `strings`."""

    def __init__(self, tokenizer, strings: Sequence[str]) -> None:
        self.tokenizer, self.strings = tokenizer, tuple(strings)

    def __call__(self, output: Sequence[int], new: Sequence[int]) -> int | None:
        """The index in `new` of the first token after which the text of `output` + `new` holds a stop string.
        The text before `new` holds none (the decode would have ended), so it is searched whole each time:
        a tokenizer may rewrite a character that its next token completes."""
        return next((i for i in range(len(new)) if self.first(self.text([*output, *new[: i + 1]])) is not None), None)

    def text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(tokens).rstrip("\ufffd")  # a character still incomplete waits

    def first(self, text: str) -> tuple[int, str] | None:
        """(position, string) of the stop string that starts first in `text` (the earliest listed on a tie)."""
        found = [(text.find(s), i, s) for i, s in enumerate(self.strings) if s in text]
        return None if not found else (min(found)[0], min(found)[2])


def output_text(tokenizer, result: DecodeResult, config: DecodeConfig) -> tuple[str, str | int | None]:
    """The text of a decode's output and the stop that ended it (vLLM's `stop_reason`: the stop string or
    stop token id; None for an end-of-sequence token or the limit)."""
    if result.finish == "stop_token_id":
        return tokenizer.decode(result.tokens[:-1]), result.tokens[-1]
    text = tokenizer.decode(result.tokens)
    found = StopStrings(tokenizer, config.stop).first(text) if result.finish == "stop_string" else None
    return (text, None) if found is None else (text[: found[0]], found[1])


def check_stop_ids(config: DecodeConfig, vocab_size: int) -> None:
    """InputError naming `stop_token_ids` when one is outside the target's vocabulary."""
    if bad := [t for t in config.stop_token_ids if t >= vocab_size]:
        raise InputError(f"`stop_token_ids` holds {bad[0]}, outside the target's vocabulary [0, {vocab_size})")


def stop_check(tokenizer, config: DecodeConfig) -> StopStrings | None:
    """The decode's check of its stop strings, or None without any."""
    return StopStrings(tokenizer, config.stop) if config.stop else None
