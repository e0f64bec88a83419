"""Stop strings and stop token ids on the target side: the token that completes a stop string ends the
decode, the record's text stops just before the string, a stop token id's text is left out, and the record
says why it ended (finish_reason, stop_reason) for every decoder alike."""

from __future__ import annotations

import pytest

from evaluation.record import DecodeRecord
from models.tokenizers import MockTokenizer
from pipeline.config import InputError
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from target_proc.conversation import decode_context
from target_proc.stops import StopStrings

PROMPT = [40, 41, 42, 43]
LIMIT = 40


def record(session, decoder: str = "ar", **settings) -> DecodeRecord:
    return decode_context(session, PROMPT, DecodeConfig(decoder, 0.0, 8, LIMIT, **settings), prompt_id="p",
                          category="c")


def test_the_first_token_that_completes_a_stop_string_is_found_across_tokens():
    tok = MockTokenizer(128)  # the whole alphabet: one character per id
    check = StopStrings(tok, ["cd", "zz"])
    ids = tok.chat_ids(["abcdef"])
    assert check([], ids) == 3  # "abcd": d completes "cd"
    assert check(ids[:2], ids[2:]) == 1 and check(ids[:3], ids[3:]) == 0
    assert check([], ids[:3]) is None and check([], []) is None
    assert check.first("xxzzcd") == (2, "zz") and StopStrings(tok, ["bc", "b"]).first("abc") == (1, "bc")


def test_a_stop_string_ends_the_output_and_the_text_stops_before_it(mock_session):
    session = mock_session()
    whole = record(session)
    assert whole.finish_reason == "length" and whole.stop_reason is None and whole.stop == "limit"
    stop = whole.text[10:13]  # three characters from the middle of the greedy text
    at = whole.text.index(stop)
    for decoder in DECODERS:
        stopped = record(session, decoder, stop=["never", stop])
        assert stopped.text == whole.text[:at], decoder
        assert stopped.token_ids == whole.token_ids[: at + len(stop)]  # the completing token included
        assert (stopped.finish_reason, stopped.stop_reason, stopped.stop) == ("stop", stop, "stop_string")
        assert stopped.stop_strings == ["never", stop] and stopped.overshoot == 0


def test_a_stop_token_id_ends_the_output_its_text_left_out(mock_session):
    session = mock_session()
    whole = record(session)
    token = whole.token_ids[7]
    at = whole.token_ids.index(token)
    for decoder in DECODERS:
        stopped = record(session, decoder, stop_token_ids=[token])
        assert stopped.token_ids == whole.token_ids[: at + 1], decoder
        assert stopped.text == whole.text[:at]  # the mock's one character per token
        assert (stopped.finish_reason, stopped.stop_reason, stopped.stop) == ("stop", token,
                                                                                       "stop_token_id")


def test_the_record_holds_the_prompts_text(mock_session):
    session = mock_session()
    assert record(session).prompt == session.tokenizer.prompt_text(PROMPT) == session.tokenizer.decode(PROMPT)


def test_a_stop_token_id_outside_the_vocabulary_is_refused_naming_the_setting(mock_session):
    with pytest.raises(InputError, match=r"^`stop_token_ids` holds 64, outside the target's vocabulary \[0, 64\)"):
        record(mock_session(), stop_token_ids=[3, 64])
