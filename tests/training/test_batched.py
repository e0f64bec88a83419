"""training.batched: many prompts answered at once over a static cache of slots, each as it would be alone."""

from __future__ import annotations

import pytest
import torch

from models.shapes import random_model
from training import batched
from training.batched import answer_all, answer_batch

LAYERS = (0, 1, 1)  # the tiny target's fused layers (it has 2)


@pytest.fixture(scope="module")
def model():
    return random_model("tiny", "cpu", torch.float32)


def _prompts(count: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 512, (int(n),), generator=g).tolist() for n in torch.randint(2, 24, (count,), generator=g)]


def test_each_answer_is_the_prompt_answered_alone_with_its_rows(model):
    """Fewer slots than prompts (slots refill, then the last moves into a freed one): every greedy answer is
    transformers' generate of its prompt alone, and its kept rows are that sequence's own hidden states."""
    prompts = _prompts(9)
    answers = answer_all(model, prompts, sample=False, max_new=10, end_ids=(0,), layers=LAYERS, seed=0, slots=4)
    for p, a in zip(prompts, answers):
        with torch.inference_mode():
            alone = model.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=0,
                                   pad_token_id=0)[0]
            out = model(a.tokens[None, :-1], output_hidden_states=True)
        assert a.start == len(p) and a.tokens.tolist() == alone.tolist()
        hs = out.hidden_states
        torch.testing.assert_close(a.features.float(), torch.cat([hs[i] for i in LAYERS], -1)[0], atol=2e-2,
                                   rtol=2e-2)
        torch.testing.assert_close(a.last.float(), hs[-1][0], atol=2e-2, rtol=2e-2)
        assert a.argmax.tolist() == out.logits[0].argmax(-1).tolist()


def test_each_sequence_stops_at_its_own_first_end_id(model):
    prompts = _prompts(6, seed=1)
    free = answer_all(model, prompts, sample=False, max_new=12, end_ids=(0,), layers=LAYERS, seed=0, slots=3)
    end = free[2].tokens[free[2].start + 4].item()  # the fifth token of one answer ends it
    stopped = answer_all(model, prompts, sample=False, max_new=12, end_ids=(0, end), layers=LAYERS, seed=0, slots=3)
    for f, s in zip(free, stopped):
        new = f.tokens[f.start:].tolist()
        cut = new[: new.index(end) + 1] if end in new else new
        assert s.tokens[s.start:].tolist() == cut and len(s.features) == len(s.tokens) - 1
    assert len(stopped[2].tokens) - stopped[2].start <= 5 and all(len(f.tokens) - f.start == 12 for f in free)


def test_sampled_answers_are_the_same_for_a_seed_whatever_their_batch(model):
    prompts = _prompts(5, seed=2)
    flags = [True, False, True, True, False]
    one = answer_all(model, prompts, sample=flags, max_new=10, end_ids=(0,), layers=LAYERS, seed=7, slots=1)
    many = answer_all(model, prompts, sample=flags, max_new=10, end_ids=(0,), layers=LAYERS, seed=7, slots=5)
    assert [a.tokens.tolist() for a in one] == [a.tokens.tolist() for a in many]
    other = answer_all(model, prompts, sample=flags, max_new=10, end_ids=(0,), layers=LAYERS, seed=8, slots=5)
    assert [a.tokens.tolist() for a in other] != [a.tokens.tolist() for a in many]
    assert other[1].tokens.tolist() == many[1].tokens.tolist()  # a greedy answer draws nothing


def test_a_llama_target_answers_through_the_slots(model, monkeypatch):
    monkeypatch.setattr(batched, "generate_batch", lambda *a, **kw: pytest.fail("generate used for a Llama model"))
    out = answer_batch(model, _prompts(3), sample=False, max_new=4, end_ids=(0,), pad_id=0, layers=LAYERS, seed=0)
    assert [len(a.tokens) - a.start for a in out] == [4, 4, 4]


@pytest.mark.slow
def test_the_embedded_target_answers_in_slots_as_generate_does_alone():
    """SmolLM2-135M: greedy answers in slots are its generate answers of each prompt alone."""
    from training.cli import ends_and_pad, load_target

    model, tok = load_target("smollm2")
    ends, pad = ends_and_pad(tok)
    prompts = [tok.chat_ids([t]) for t in ("Name three rivers.", "Write a haiku about rain, please.", "Hi!")]
    answers = answer_all(model, prompts, sample=False, max_new=24, end_ids=ends, layers=(2, 15, 27), seed=0, slots=2)
    for p, a in zip(prompts, answers):
        with torch.inference_mode():
            alone = model.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False, eos_token_id=list(ends),
                                   pad_token_id=pad)[0]
        assert a.tokens.tolist() == alone.tolist()
