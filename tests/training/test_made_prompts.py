"""Prompts the target writes and passage prompts: the user's turn opened, rounds kept, duplicates, degenerate
and evaluated texts left out, the same for a seed; and a run of train-head that answers them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from models.shapes import random_model
from models.tokenizers import HFTokenizer, MockTokenizer
from training import cli, made_prompts
from training.made_prompts import passage_prompts, user_turn, write_round, written_prompts
from training.novelty import EVAL_NGRAM, Novelty, evaluated_texts, words
from training.passages import cut
from training.prompts import training_prompts

SPEC_BENCH = Path(os.environ.get("SPEC_BENCH_QUESTIONS", Path(__file__).resolve().parents[3] / "shared" / "data"
                                 / "spec_bench" / "question.jsonl"))


def chat_tokenizer() -> HFTokenizer:
    """A character tokenizer with a ChatML template (ids 0 and 1: <|im_end|>, <|im_start|>), built in code."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    tok = Tokenizer(models.BPE(vocab={"<|im_end|>": 0, "<|im_start|>": 1, **{c: i + 2 for i, c in enumerate(chars)}},
                               merges=[]))
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return HFTokenizer(fast)


def chatty_target():
    """The tiny random target, its output layer biased towards id 0 (<|im_end|>) and the space, so that the
    messages it writes end and hold words."""
    model = random_model("tiny", "cpu", torch.float32)
    head = torch.nn.Linear(64, 512, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[0], head.bias[2] = 1.5, 3.0  # <|im_end|>, " "
    model.lm_head = head
    return model


def test_the_user_turn_is_the_template_up_to_the_message_and_ends_where_it_closes():
    header, ends = user_turn(chat_tokenizer())
    assert chat_tokenizer().prompt_text(header) == "<|im_start|>user\n" and ends == (0,)
    with pytest.raises(ValueError, match="has no chat template: its user turn cannot be opened"):
        user_turn(MockTokenizer(512))


def test_written_rounds_are_the_same_for_a_seed_and_closed_messages_only():
    model, tok = chatty_target(), chat_tokenizer()
    first = write_round(model, tok, 0, seed=3)
    assert first == write_round(model, tok, 0, seed=3) and first != write_round(model, tok, 1, seed=3)
    assert len(first) == made_prompts.ROUND and any(first) and None in first  # some closed, some not


def test_kept_prompts_skip_duplicates_degenerate_and_evaluated_texts(tmp_path, monkeypatch):
    evaluated = "Explain in three sentences why the sky is blue."  # a built-in prompt
    rounds = [["Write a poem about a quiet harbour at dawn.", None, "Hi", "hello " * 30, evaluated],
              ["WRITE a poem about a quiet harbour at dawn!",  # an exact copy, but for case and punctuation
               "Please explain in three sentences why the sky is blue and green.",  # 8 words of a built-in one
               "Describe the life of a honeybee worker over one summer season in a busy hive.",
               "Describe the life of a honeybee worker over one summer season in a quiet meadow."],  # 10 shared
              ["List four things to pack for a rainy weekend trip to the mountains."]]
    monkeypatch.setattr(made_prompts, "write_round", lambda model, tok, index, seed: rounds[index])
    novelty = Novelty(evaluated_texts(["builtin"]))
    kept = written_prompts(None, None, 3, 0, tmp_path, novelty)
    assert kept == [rounds[0][0], rounds[1][2], rounds[2][0]]
    assert json.loads((tmp_path / "made" / "round-0001.json").read_text()) == rounds[1]
    monkeypatch.setattr(made_prompts, "write_round", lambda *a: pytest.fail("a kept round written again"))
    assert written_prompts(None, None, 3, 0, tmp_path, Novelty([evaluated])) == kept
    (tmp_path / "made" / "round-0002.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"round-0002.json: not a list of made prompts .*delete it"):
        written_prompts(None, None, 5, 0, tmp_path, Novelty([]))  # reads every round


def test_passage_prompts_use_each_passage_once_and_a_larger_count_keeps_the_first():
    text = "\n\n".join(f"Paragraph {i} tells of item {i} " + " ".join(f"w{i}x{j}" for j in range(50))
                       for i in range(12))
    passages = cut(text, 400)
    assert all(300 <= len(p) <= 400 for p in passages) and len(passages) == 12
    few, more = (passage_prompts(passages + passages, n, 5, Novelty([])) for n in (4, 12))
    assert few == more[:4] and len(set(more)) == 12
    with pytest.raises(ValueError, match="give 12 distinct passage prompts, fewer than the 13"):
        passage_prompts(passages + passages, 13, 5, Novelty([]))


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason="Spec-Bench's questions are not here (set SPEC_BENCH_QUESTIONS)")
def test_no_made_prompt_is_or_shares_eight_words_with_an_evaluated_one(tmp_path, monkeypatch):
    """Spec-Bench (MT-bench's questions and GSM8K's among them), HumanEval and the built-in prompts: none is
    kept, nor any text holding a run of 8 of their words; the templated and passage prompts hold none."""
    sources = [f"spec-bench:{SPEC_BENCH}", "builtin", "humaneval"]
    evaluated = evaluated_texts(sources)
    assert len(evaluated) > 700
    grams = {tuple(ws[i: i + EVAL_NGRAM]) for t in evaluated for ws in [words(t)] for i in range(len(ws) - 7)}
    exact = {" ".join(words(t)) for t in evaluated}
    planted = [t for t in evaluated if len(words(t)) >= 4] + [
        f"Tell me more: {' '.join(words(t)[:EVAL_NGRAM])} and so on." for t in evaluated if len(words(t)) >= 8]
    monkeypatch.setattr(made_prompts, "write_round", lambda model, tok, index, seed: planted[index * 128:][:128])
    with pytest.raises(ValueError, match="the target wrote only 0 usable prompts"):
        written_prompts(None, None, 1, 0, tmp_path, Novelty(evaluated))
    from training.passages import machine_passages

    made = training_prompts(2000, 0) + passage_prompts(machine_passages()[:3000], 300, 0, Novelty(evaluated))
    for text in made:
        ws = words(text)
        assert " ".join(ws) not in exact and not {tuple(ws[i: i + EVAL_NGRAM]) for i in range(len(ws) - 7)} & grams


def test_train_head_answers_made_and_passage_prompts(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "load_target", lambda *a: (chatty_target(), chat_tokenizer()))
    monkeypatch.setattr("training.passages.machine_passages", lambda: cut("\n\n".join(
        f"Passage {i}: " + " ".join(f"word{i}-{j}" for j in range(60)) for i in range(8)), 600))
    argv = ["--target", "tiny-chat", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "h"), "--prompts", "2",
            "--made-prompts", "3", "--passage-prompts", "2", "--max-new", "6", "--shard", "2", "--draft-vocab", "32",
            "--epochs", "1", "--batch", "2"]
    assert cli.main(argv) == 0
    data = json.loads((tmp_path / "h" / "training.json").read_text())["data"]
    assert (data["made_prompts"], data["passage_prompts"], data["answers_greedy"]) == (3, 2, 4)
    assert sorted(p.name for p in (tmp_path / "w").glob("*.pt") if p.name != "checkpoint.pt") == [
        "answers-0000.pt", "made-0000.pt", "made-0001.pt", "passages-0000.pt"]
    assert cli.main(argv[:-6] + ["--made-prompts", "-1"] + argv[-4:]) == 2


def test_made_and_passage_prompts_are_held_out_by_their_text(tmp_path, monkeypatch):
    from training.distill import read_shard

    monkeypatch.setattr(cli, "HELD_OUT", 2)
    tokenizer = chat_tokenizer()
    monkeypatch.setattr(cli, "load_target", lambda *a: (chatty_target(), tokenizer))
    monkeypatch.setattr("training.passages.machine_passages", lambda: cut("\n\n".join(
        f"Passage {i}: " + " ".join(f"word{i}-{j}" for j in range(60)) for i in range(8)), 600))
    assert cli.main(["--target", "tiny-chat", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "h"),
                     "--prompts", "2", "--made-prompts", "6", "--passage-prompts", "4", "--max-new", "6", "--shard",
                     "2", "--draft-vocab", "32", "--epochs", "1", "--batch", "2"]) == 0
    work = tmp_path / "w"
    texts = [q for path in [*sorted((work / "made").glob("*.json")), work / "passage-prompts.json"]
             for q in json.loads(path.read_text()) if q] + training_prompts(2, 0)
    by_ids = {tuple(tokenizer.chat_ids([q])): q for q in texts}
    asked = {kind: [by_ids[tuple(a.tokens[: a.start].tolist())] for path in sorted(work.glob(f"{kind}-*.pt"))
                    for a in read_shard(path)] for kind in ("answers", "made", "passages", "held")}
    assert asked["held"] and len(asked["held"]) + sum(len(asked[k]) for k in ("answers", "made", "passages")) == 12
    assert all(cli.held_out(q) for q in asked["held"])
    assert set(asked["held"]) - set(training_prompts(2, 0))  # made or passage prompts among them
    assert not any(cli.held_out(q) for k in ("answers", "made", "passages") for q in asked[k])


def test_an_exclude_source_that_cannot_be_read_is_refused_before_the_target_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "load_target", lambda *a: pytest.fail("the target loaded"))
    assert cli.main(["--target", "tiny-chat", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "h"),
                     "--made-prompts", "3", "--exclude", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl" in capsys.readouterr().err and not (tmp_path / "w").exists()
