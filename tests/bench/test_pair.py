"""python -m bench.pair's command line: budget auto, a subset spread over groups, and bad values refused with
the flag named (the benchmark itself loads the embedded pair and is run by hand)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench.common import command_line
from bench.pair import BenchPrompts, PairOptions, build_parser, prompts_or_refuse
from evaluation.summary import MT_BENCH, category_group


def parse(argv: list[str]) -> PairOptions:
    return command_line(build_parser(), argv)[0]


def test_the_budget_may_be_auto_and_the_decoders_a_subset():
    options = parse(["--budget", "auto", "--decoders", "ar,root-draw", "--stratify", "group", "--limit", "8"])
    assert (options.budget, options.decoders, options.stratify, options.limit) == ("auto", "ar,root-draw", "group", 8)
    assert parse([]).budget == 8 and parse([]).stratify == ""


@pytest.mark.parametrize("argv, message", [
    (["--budget", "0"], "--budget must be a positive integer or auto, got 0"),
    (["--budget", "eight"], "--budget must be a positive integer or auto, got 'eight'"),
    (["--limit", "0"], "--limit must be a positive integer, got 0"),
    (["--decoders", "ar,nope"], "--decoders must list distinct names"),
    (["--decoders", "root-draw"], "--decoders must hold ar and at least one other decoder"),
    (["--stratify", "prompt"], "--stratify must be category or group, got 'prompt'"),
])
def test_bad_values_are_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        parse(argv)
    assert done.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]


def test_prompts_are_the_first_ones_or_spread_over_groups(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [{"prompt": f"{c} {i}", "id": f"{c}{i}", "category": c} for c in (*MT_BENCH, "qa", "rag") for i in range(3)]
    path.write_text("\n".join(map(json.dumps, rows)))
    assert prompts_or_refuse(BenchPrompts((str(path),), 3), "bench.pair") == ["writing 0", "writing 1", "writing 2"]
    texts = prompts_or_refuse(BenchPrompts((str(path), "builtin"), 6, "group"), "bench.pair")
    category = {r["prompt"]: r["category"] for r in rows}
    groups = Counter(category_group(category[t]) if t in category else "builtin" for t in texts)
    assert set(groups) == {"mt_bench", "qa", "rag", "builtin"} and sorted(groups.values()) == [1, 1, 2, 2]


def test_an_unknown_prompt_source_is_a_usage_error_before_any_model_loads(capsys):
    from bench.pair import main

    with pytest.raises(SystemExit) as done:
        main(["--prompts", "nope"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "python -m bench.pair: error: prompt file 'nope' does not exist (a prompt source is builtin, "
        "humaneval, spec-bench:PATH or a file)")
