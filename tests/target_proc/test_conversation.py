"""A conversation's decodes (target_proc.conversation): a record per turn, as a decode run, a sweep and the API
build them; multi-turn prompts decode in one conversation with the decoder's own earlier answers in context."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from pipeline.budget import MeasuredPasses, candidate_sizes
from pipeline.settings import DecodeConfig
from target_proc.conversation import decode_conversation


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    turns: tuple[str, ...]


class Recording:
    """A session that remembers the prompt ids of every decode it ran."""

    def __init__(self, session) -> None:
        self.session, self.tokenizer, self.calls = session, session.tokenizer, []

    def decode(self, ids, config, key, observe=None):
        self.calls.append((list(ids), key))
        return self.session.decode(ids, config, key)


def test_a_two_turn_question_holds_both_turns_with_the_first_answer_in_the_second_context(mock_session):
    session = Recording(mock_session())
    question = Question("spec-bench/81", "writing", ("Write a poem.", "Now shorter."))
    records = list(decode_conversation(session, question, DecodeConfig("root-draw", 0.0, 8, 20)))
    assert [r.turn for r in records] == [0, 1] and all(r.prompt_id == "spec-bench/81" for r in records)
    first_answer = records[0].text.strip()
    assert first_answer  # the mock answers something
    tok = session.tokenizer
    assert session.calls[0][0] == tok.chat_ids(["Write a poem."])
    assert session.calls[1][0] == tok.chat_ids(["Write a poem.", first_answer, "Now shorter."])
    assert records[1].prompt_tokens == len(session.calls[1][0])
    assert [key for _, key in session.calls] == ["spec-bench/81", "spec-bench/81#1"]  # a stream per turn


def test_recorded_turns_are_reused_not_decoded_again(mock_session):
    session = Recording(mock_session())
    question = Question("q/1", "c", ("one", "two", "three"))
    config = DecodeConfig("draft", 0.0, 8, 12)
    whole = list(decode_conversation(session, question, config))
    session.calls.clear()
    resumed = list(decode_conversation(session, question, config, done={0: whole[0], 1: whole[1]}))
    assert [r.turn for r in resumed] == [2] and len(session.calls) == 1
    assert resumed[0].token_ids == whole[2].token_ids  # the same context: the same greedy answer


@pytest.mark.parametrize("limit", [1, 5, 13])
def test_the_record_keeps_the_output_at_the_limit_and_what_the_last_round_made_beyond_it(mock_session, limit):
    record = next(decode_conversation(mock_session(), Question("p", "c", ("Once upon a time",)),
                                      DecodeConfig("draft", 0.0, 8, limit)))
    assert record.new_tokens == len(record.token_ids) <= limit and record.max_new_tokens == limit
    if record.stop == "limit":
        assert record.new_tokens + record.overshoot == sum(record.accept_lengths)
    assert record.tokens_per_second == pytest.approx(record.new_tokens / record.seconds)



@pytest.mark.parametrize("prior", ["session", "decode"])
def test_budget_auto_learns_across_a_sessions_decodes_only_with_the_session_prior(mock_session, prior):
    session = mock_session()
    # pass times under which speculation pays from the first round (timed ones vary with the machine's load,
    # and a decode of plain rounds only would verify nothing to learn from)
    sizes = [b for b in candidate_sizes(8) if b]
    fast = dict.fromkeys(sizes, 1e-3)
    session.budgets.measure = lambda cap: MeasuredPasses(plain=1.0, overlapped=1e-3, tree=fast, tree_with_root=fast,
                                                         prefill=0.0, prefill_shared=0.0)
    config = DecodeConfig("root-draw", 0.0, "auto", 16, budget_max=8, budget_prior=prior)
    session.decode([3, 4, 5], config, "a")
    session.decode([3, 4, 6], config, "b")
    session.decode([3, 4, 7], dataclasses.replace(config, drafter_window=2), "c")  # drafting otherwise: apart
    learnt = {key: float(e.seen.sum()) for key, e in session.budgets.experience.items()}
    drafting, windowed = config.drafting, dataclasses.replace(config, drafter_window=2).drafting
    if prior == "session":
        assert list(learnt) == [("root-draw", 0.0, 8, drafting), ("root-draw", 0.0, 8, windowed)]
        assert min(learnt.values()) > 0
    else:
        assert learnt == {}
    assert set(session.budgets.costs) == {("root-draw", 8, drafting), ("root-draw", 8, windowed)}


def test_a_record_holds_the_context_it_continued_and_how_busy_the_machine_was(mock_session):
    session = Recording(mock_session())
    question = Question("q", "c", ("First.", "Second."))
    records = list(decode_conversation(session, question, DecodeConfig("draft", 0.0, 8, 12)))
    assert [r.prompt_token_ids for r in records] == [ids for ids, _ in session.calls]
    assert all(r.prompt_tokens == len(r.prompt_token_ids) and r.schema == 4 for r in records)
    for r in records:
        start, end = r.load_average
        assert 0 <= start < 1e4 and 0 <= end < 1e4 and r.cpus >= 1
