"""Prompt sources and selection: every source's prompts, clear errors naming the file, and a subset
balanced over categories and reproducible under the seed."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from evaluation.prompts import BUILTIN, Prompt, PromptError, gather, load_prompts, stratified_subset
from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import MT_BENCH, category_group
from pipeline.config import ConfigError
from programs.options import PromptOptions


def prompts(n: int, categories: int = 1) -> list[Prompt]:
    return [Prompt(f"p/{i}", f"cat{i % categories}", f"text {i}") for i in range(n)]


def test_stratified_subset_balances_categories():
    ps = prompts(13 * 4, categories=4) + [Prompt("rare/0", "rare", "x")]
    chosen = stratified_subset(ps, 9, seed=0)
    counts = Counter(p.category for p in chosen)
    assert len(chosen) == 9
    assert counts["rare"] == 1  # a small category gives what it has ...
    assert max(counts.values()) - min(v for c, v in counts.items() if c != "rare") <= 1  # ... the rest even
    assert [p.id for p in chosen] == [p.id for p in ps if p in chosen]  # original order kept


def spec_bench_like() -> list[Prompt]:
    """Ten prompts in each MT-bench category and in each of three other groups, as Spec-Bench's file has them."""
    categories = [*MT_BENCH, "translation", "qa", "rag"]
    return [Prompt(f"p/{c}/{i}", c, f"{c} {i}") for c in categories for i in range(10)]


def test_a_subset_stratified_by_group_gives_each_group_an_even_share():
    ps = spec_bench_like()
    by_group = Counter(category_group(p.category) for p in stratified_subset(ps, 8, seed=3, by="group"))
    assert by_group == Counter({"mt_bench": 2, "translation": 2, "qa": 2, "rag": 2})
    # by category, the eight MT-bench categories take eight of every eleven prompts
    by_category = Counter(category_group(p.category) for p in stratified_subset(ps, 11, seed=3))
    assert by_category == Counter({"mt_bench": 8, "translation": 1, "qa": 1, "rag": 1})


def test_gather_spreads_over_groups_when_asked_and_refuses_another_stratum(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": p.text, "id": p.id, "category": p.category})
                              for p in spec_bench_like()))
    got = gather(PromptOptions(prompts=(str(path),), limit_prompts=12, stratify="group"), seed=1)
    assert Counter(category_group(p.category) for p in got) == Counter({"mt_bench": 3, "translation": 3, "qa": 3,
                                                                        "rag": 3})
    with pytest.raises(ConfigError, match="`stratify` must be category or group, got 'prompt'"):
        PromptOptions(stratify="prompt")
    with pytest.raises(ValueError, match="`by` must be one of category, group"):
        stratified_subset(spec_bench_like(), 4, 0, by="prompt")


def test_stratified_subset_is_deterministic_under_the_seed():
    ps = prompts(80, categories=8)
    assert stratified_subset(ps, 16, 0) == stratified_subset(ps, 16, 0)
    assert stratified_subset(ps, 16, 0) != stratified_subset(ps, 16, 1)
    assert Counter(p.category for p in stratified_subset(ps, 16, 1)) == Counter({f"cat{i}": 2 for i in range(8)})


@pytest.mark.parametrize("limit", [0, 10, 99])
def test_stratified_subset_without_a_binding_limit_keeps_every_prompt(limit):
    ps = prompts(10, categories=3)
    assert stratified_subset(ps, limit, 0) == ps


def test_sources_repeat_and_command_line_prompts_come_first(tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text("first\n\nsecond\n")
    got = gather(PromptOptions(prompt=("hello",), prompts=("builtin", str(text))), seed=0)
    assert [p.id for p in got][:2] == ["prompt/0", "builtin/0"]
    assert [p.text for p in got][-2:] == ["first", "second"]
    assert [p.id for p in gather(PromptOptions(), 0)] == [f"builtin/{i}" for i in range(len(BUILTIN))]


def test_the_builtin_prompts_are_enough_for_an_interval():
    assert len(BUILTIN) >= MIN_INTERVAL_PROMPTS
    assert [p.id for p in gather(PromptOptions(prompt=("x",)), 0)] == ["prompt/0"]  # no built-ins added


def test_limit_prompts_draws_the_same_subset_for_decodes_and_sweeps(tmp_path):
    lines = [json.dumps({"prompt": f"q{i}", "id": i, "category": f"c{i % 3}"}) for i in range(30)]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines))
    got = gather(PromptOptions(prompts=(str(path),), limit_prompts=6), seed=2)
    assert got == stratified_subset(load_prompts(str(path)), 6, 2)
    assert Counter(p.category for p in got) == Counter({"c0": 2, "c1": 2, "c2": 2})


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfeprompt\n", "is not UTF-8 text"),
    (b"", "holds no prompt"),
])
def test_a_bad_prompt_file_is_named(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with pytest.raises(PromptError, match=f"{path}.*{message}|{message}"):
        load_prompts(str(path))


@pytest.mark.parametrize("line, message", [
    ("not json", r"bad.jsonl:1: not valid JSON"),
    ("[1, 2]", r"bad.jsonl:1: each line must be a JSON object"),
    ('{"id": 1}', r"bad.jsonl:1: needs a non-empty string \"prompt\""),
])
def test_a_bad_jsonl_line_is_named(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(PromptError, match=message):
        load_prompts(str(path))


def test_a_missing_or_odd_source_is_named_in_one_line_in_either_form(tmp_path):
    with pytest.raises(PromptError, match=r"^prompt file 'no/such/file.txt' does not exist \(a prompt source is "
                                          r"builtin, humaneval, spec-bench:PATH or a file\)$"):
        load_prompts("no/such/file.txt")
    with pytest.raises(PromptError, match=r"^prompt file 'no/such/question.jsonl' does not exist$"):
        load_prompts("spec-bench:no/such/question.jsonl")
    with pytest.raises(PromptError, match=f"^prompt file '{tmp_path}' is a directory, not a regular file"):
        load_prompts(str(tmp_path))


def test_a_prompt_id_in_two_sources_is_refused(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "x", "id": 0}))
    with pytest.raises(PromptError, match="is in both"):
        gather(PromptOptions(prompts=(str(path), str(path))), 0)


def test_categories_keep_named_categories_and_spec_bench_groups(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [f"q{i}"]})
                              for i, c in enumerate(["writing", "coding", "qa", "rag", "stem"])))
    got = gather(PromptOptions(prompts=(f"spec-bench:{path}",), categories="mt_bench,rag"), 0)
    assert [p.category for p in got] == ["writing", "coding", "rag", "stem"]
    with pytest.raises(PromptError, match="no prompt is in `categories` 'math'"):
        gather(PromptOptions(prompts=(f"spec-bench:{path}",), categories="math"), 0)


def test_a_limit_beyond_the_prompts_there_are_is_said(caplog):
    with caplog.at_level("WARNING"):
        chosen = gather(PromptOptions(prompt=("a", "b", "c"), limit_prompts=10), 0)
    assert len(chosen) == 3
    assert "`limit_prompts` 10 is more than the 3 prompts there are: all 3 run" in caplog.text
