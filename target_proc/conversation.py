"""A prompt's user turns decoded in one conversation, one record per turn (evaluation.record's schema)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np

from evaluation.record import DecodeRecord, decode_record, machine_load
from pipeline.config import InputError, is_int
from pipeline.pool import out_of_vocab
from pipeline.settings import DecodeConfig
from target_proc.logprobs import TokenLogprobs
from target_proc.recorder import RoundRecorder
from target_proc.stops import output_text


class Conversation(Protocol):
    """A prompt as the decode loop needs it: a unique id, a category and its user turns."""

    id: str
    category: str
    turns: Sequence[str]


def decode_conversation(session, prompt: Conversation, config: DecodeConfig,
                        done: Mapping[int, DecodeRecord] | None = None,
                        rounds: Callable[[DecodeRecord, list], None] | None = None,
                        on_tokens=None, logprobs: int | None = None) -> Iterator[DecodeRecord]:
    """Decode each turn of `prompt` in one conversation, yielding a record per turn as it ends.
    Turn k's context holds the earlier user turns and this decoder's own answers, through the chat template. `done`:
    records of turns decoded before (a resumed sweep), whose answers are reused. `rounds`: record every round's pool
    (target_proc.recorder) and hand (record, recorded rounds) to this callable before the record is yielded.
    `on_tokens`: as pipeline.decode.decode's. `logprobs`: keep each output token's log-probability and the top
    `logprobs` of its row (target_proc.logprobs), for a decode that does not record its rounds."""
    history: list[str] = []
    for turn, user in enumerate(prompt.turns):
        record = (done or {}).get(turn)
        if record is None:
            ids = session.tokenizer.chat_ids([*history, user])
            key = prompt.id if turn == 0 else f"{prompt.id}#{turn}"  # the verifier's stream of this turn
            recorder = RoundRecorder(session.target, config, ids) if rounds else None
            kept = TokenLogprobs(logprobs) if logprobs is not None and not rounds else None
            load = machine_load()
            result = session.decode(ids, config, key, **_given(observe=recorder or kept, on_tokens=on_tokens))
            record = decode_record(result, config, prompt_id=prompt.id, category=prompt.category, turn=turn,
                                   prompt_token_ids=ids, load_average=(load, machine_load()),
                                   logprobs=kept.of(len(result.tokens)) if kept else None,
                                   **_texts(session.tokenizer, ids, result, config))
            if rounds:
                rounds(record, recorder.rounds)
            yield record
        history += [user, record.text.strip()]


ROLES = ("system", "user", "assistant")


def context_ids(tokenizer, vocab_size: int, prompt) -> list[int]:
    """The token ids a decode continues: `prompt` as token ids (used as they are), or as chat messages
    ([{"role", "content"}, ...], system ones included, the last a user's) through the chat template.
    InputError naming the problem for anything else."""
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise InputError("`prompt` must be text, a non-empty list of token ids or a non-empty list of chat messages")
    if all(is_int(t) for t in prompt):
        if problem := out_of_vocab(np.asarray(prompt), vocab_size, "prompt token"):
            raise InputError(f"`prompt`: {problem}")
        return [int(t) for t in prompt]
    for i, m in enumerate(prompt):
        if not (isinstance(m, dict) and m.keys() == {"role", "content"} and m["role"] in ROLES
                and isinstance(m["content"], str)):
            raise InputError(f"`prompt` message {i} must be {{'role': {'|'.join(ROLES)}, 'content': text}}, got "
                             f"{m!r:.80}")
    if prompt[-1]["role"] != "user":
        raise InputError("`prompt`'s last message must be the user's: the decode answers it")
    return tokenizer.message_ids([dict(m) for m in prompt])


def decode_context(session, prompt, config: DecodeConfig, *, prompt_id: str, category: str,
                   on_tokens=None, logprobs: int | None = None) -> DecodeRecord:
    """One decode continuing token ids or chat messages (see context_ids) -> its record (turn 0); `logprobs` as
    decode_conversation's."""
    ids = context_ids(session.tokenizer, session.target.runner.vocab_size, prompt)
    kept = TokenLogprobs(logprobs) if logprobs is not None else None
    load = machine_load()
    result = session.decode(ids, config, prompt_id, **_given(observe=kept, on_tokens=on_tokens))
    return decode_record(result, config, prompt_id=prompt_id, category=category, turn=0, prompt_token_ids=ids,
                         load_average=(load, machine_load()), logprobs=kept.of(len(result.tokens)) if kept else None,
                         **_texts(session.tokenizer, ids, result, config))


def _texts(tokenizer, ids: list[int], result, config: DecodeConfig) -> dict:
    """A record's texts: the prompt's, the output's (cut before a stop string) and the stop that matched."""
    text, stop_reason = output_text(tokenizer, result, config)
    return {"prompt": tokenizer.prompt_text(ids), "text": text, "stop_reason": stop_reason}


def _given(**keywords) -> dict:
    """TargetSession.decode's optional keywords, only those given: sessions that never stream or record need not
    take them."""
    return {k: v for k, v in keywords.items() if v is not None}
