"""A prompt's user turns decoded in one conversation, one record per turn (evaluation.record's schema)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from evaluation.record import decode_record
from pipeline.settings import DecodeConfig
from target_proc.recorder import RoundRecorder


class Conversation(Protocol):
    """A prompt as the decode loop needs it: a unique id, a category and its user turns."""

    id: str
    category: str
    turns: Sequence[str]


def decode_conversation(session, prompt: Conversation, config: DecodeConfig,
                        done: Mapping[int, dict] | None = None,
                        rounds: Callable[[dict, list], None] | None = None) -> Iterator[dict]:
    """Decode each turn of `prompt` in one conversation, yielding a record per turn as it ends.

    Turn k's context holds the earlier user turns and this decoder's own answers to them, through the
    target's chat template (as Spec-Bench's inference builds it). `done`: records of turns decoded before
    (a resumed sweep), whose answers are reused instead of decoded again. `rounds`: record every round's
    pool with one measurement pass (target_proc.recorder) and hand (record, recorded rounds) to this
    callable before the record is yielded.
    """
    history: list[str] = []
    for turn, user in enumerate(prompt.turns):
        record = (done or {}).get(turn)
        if record is None:
            ids = session.tokenizer.chat_ids([*history, user])
            key = prompt.id if turn == 0 else f"{prompt.id}#{turn}"  # the verifier's stream of this turn
            recorder = RoundRecorder(session.target, config.temperature) if rounds else None
            result = session.decode(ids, config, key, observe=recorder)
            record = decode_record(result, config, prompt_id=prompt.id, category=prompt.category, turn=turn,
                                   prompt_tokens=len(ids), text=session.tokenizer.decode(result.tokens))
            if rounds:
                rounds(record, recorder.rounds)
            yield record
        history += [user, record["text"].strip()]
