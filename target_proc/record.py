"""The one record of a decode, built here for every program: the decode run's --json lines, sweep records
(which add where in the schedule the decode ran), the benchmarks, the GPU check and the Python API.

A record holds one turn of one prompt: the output (ids and text, at most `max_new_tokens` tokens), how
many tokens the last round produced beyond the limit, its time, and per-round columns (accept lengths
with the bonus token, accepted tree nodes, depths tried, tree sizes, the budget each round ran with (0: a
plain round), phase times). Multi-turn prompts
give one record per turn, decoded in one conversation with the decoder's own earlier answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np

from pipeline.config import DecodeConfig, InputError, is_int
from pipeline.pool import out_of_vocab
from pipeline.decode import PHASES, DecodeResult

SCHEMA = 2  # 1: records before the output limit was exact (no `schema` field)
ROUND_COLUMNS = ("accept_lengths", "accepted", "tried", "tree_sizes", "available", "budgets")


class Conversation(Protocol):
    """A prompt as the decode loop needs it: a unique id, a category and its user turns."""

    id: str
    category: str
    turns: Sequence[str]


def decode_record(result: DecodeResult, config: DecodeConfig, *, prompt_id: str, category: str, turn: int,
                  prompt_tokens: int, text: str) -> dict:
    rounds = result.rounds
    return {
        "kind": "decode", "schema": SCHEMA, "prompt_id": prompt_id, "category": category, "turn": turn,
        "decoder": config.decoder, "temperature": config.temperature, "top_k": config.top_k,
        "top_p": config.top_p, "min_p": config.min_p, "budget": config.budget,
        "seed": config.seed, "max_new_tokens": config.max_new_tokens, "prompt_tokens": prompt_tokens,
        "new_tokens": len(result.tokens), "token_ids": list(result.tokens), "text": text,
        "overshoot": result.overshoot, "stop": "limit" if result.hit_limit else "eos",
        "seconds": result.seconds, "prefill_seconds": result.prefill_seconds,
        "tokens_per_second": result.tokens_per_second, "rounds": len(rounds), "target_passes": result.target_passes,
        "accept_lengths": [r.emitted for r in rounds], "accepted": [r.accepted for r in rounds],
        "tried": [r.tried for r in rounds], "tree_sizes": [r.tree_size for r in rounds],
        "available": [r.available for r in rounds], "budgets": [r.budget for r in rounds],
        "phases": {name: [r.phases.get(name, 0.0) for r in rounds] for name in PHASES},
        "finished": time.time(),
    }


def decode_conversation(session, prompt: Conversation, config: DecodeConfig,
                        done: Mapping[int, dict] | None = None, on_tokens=None) -> Iterator[dict]:
    """Decode each turn of `prompt` in one conversation, yielding a record per turn as it ends.

    Turn k's context holds the earlier user turns and this decoder's own answers to them, through the
    target's chat template (as Spec-Bench's inference builds it). `done`: records of turns decoded before
    (a resumed sweep), whose answers are reused instead of decoded again.
    """
    history: list[str] = []
    for turn, user in enumerate(prompt.turns):
        record = (done or {}).get(turn)
        if record is None:
            ids = session.tokenizer.chat_ids([*history, user])
            key = prompt.id if turn == 0 else f"{prompt.id}#{turn}"  # the verifier's stream of this turn
            result = session.decode(ids, config, key, **_streaming(on_tokens))
            record = decode_record(result, config, prompt_id=prompt.id, category=prompt.category, turn=turn,
                                   prompt_tokens=len(ids), text=session.tokenizer.decode(result.tokens))
            yield record
        history += [user, record["text"].strip()]


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
                   on_tokens=None) -> dict:
    """One decode continuing token ids or chat messages (see context_ids) -> its record (turn 0)."""
    ids = context_ids(session.tokenizer, session.target.runner.vocab_size, prompt)
    result = session.decode(ids, config, prompt_id, **_streaming(on_tokens))
    return decode_record(result, config, prompt_id=prompt_id, category=category, turn=0, prompt_tokens=len(ids),
                         text=session.tokenizer.decode(result.tokens))


def _streaming(on_tokens) -> dict:
    """Session.decode's streaming keyword, given only when streaming: sessions that never stream need not
    take it."""
    return {} if on_tokens is None else {"on_tokens": on_tokens}
