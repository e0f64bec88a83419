"""The prompt file drawn from OpenAI's evals registry: which rows give prompts, the per-file cap, the exclusion
of evaluated prompts, determinism, and bad input."""

import json
import zipfile

import pytest

from training.openai_evals import DATA, chat_prompt, main
from training.prompts import source_prompts


def chat(user, system=None, examples=()):
    messages = [{"role": "system", "content": system}] if system else []
    for q, a in examples:
        messages += [{"role": "system", "name": "example_user", "content": q},
                     {"role": "system", "name": "example_assistant", "content": a}]
    return {"input": messages + [{"role": "user", "content": user}], "ideal": "x"}


def wheel(tmp_path, files):
    path = tmp_path / "evals-0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evals/__init__.py", "")
        for name, rows in files.items():
            z.writestr(DATA + name, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_prompt_is_the_unnamed_system_messages_then_the_first_user_message():
    record = chat("What is the capital of Peru?", system="Answer in one word.", examples=[("2+2?", "4")])
    assert chat_prompt(record) == "Answer in one word.\n\nWhat is the capital of Peru?"
    assert chat_prompt({"input": "a plain string"}) is None
    assert chat_prompt({"input": [{"role": "system", "content": "no user turn"}]}) is None
    assert chat_prompt({"input": [{"role": "user", "content": ["not", "text"]}]}) is None


def test_each_file_gives_at_most_per_file_prompts_and_short_long_and_repeated_rows_are_left_out(tmp_path):
    rows = [chat(f"Question number {i}: explain how tides work.") for i in range(10)]
    foreign = chat("下面这首诗的作者是谁？请仅回复作者的名字。静夜四无邻，荒居旧业贫。")
    w = wheel(tmp_path, {"a/samples.jsonl": rows + ["{not json", chat("short"), chat("z" * 1001), rows[0], foreign],
                         "b/samples.jsonl": [chat("Describe a forest in autumn, in three sentences.")],
                         "c/readme.txt": ["ignored"]})
    out = tmp_path / "p.jsonl"
    assert main([str(w), "--out", str(out), "--per-file", "3"]) == 0
    prompts = read(out)
    assert len(prompts) == 4 and {p["category"] for p in prompts} == {"a", "b"}
    assert all(20 <= len(p["prompt"]) <= 1000 and p["id"].split(":")[0] in ("a/samples.jsonl", "b/samples.jsonl")
               for p in prompts)
    assert len({p["prompt"] for p in prompts}) == 4
    assert main([str(w), "--out", str(out), "--per-file", "30"]) == 0
    assert foreign["input"][0]["content"] not in [p["prompt"] for p in read(out)] and len(read(out)) == 11
    assert main([str(w), "--out", str(out), "--per-file", "30", "--min-ascii", "0"]) == 0
    assert foreign["input"][0]["content"] in [p["prompt"] for p in read(out)] and len(read(out)) == 12
    assert main([str(w), "--out", str(out), "--per-file", "3"]) == 0
    assert source_prompts([str(out)], None) == [p["prompt"] for p in prompts]  # train-head reads it as written


def test_the_draw_is_deterministic_for_a_seed_and_moves_with_it(tmp_path):
    w = wheel(tmp_path, {f"s{k}/samples.jsonl": [chat(f"Set {k}, item {i}: name a colour you like.")
                                                for i in range(20)] for k in range(4)})
    outs = []
    for n, seed in enumerate(("0", "0", "1")):
        outs.append(tmp_path / f"{n}.jsonl")
        assert main([str(w), "--out", str(outs[-1]), "--seed", seed]) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes() != outs[2].read_bytes()


def test_prompts_sharing_a_run_of_words_with_an_excluded_source_are_left_out(tmp_path, capsys):
    evaluated = "Natalia sold clips to 48 of her friends in April and then she sold half as many clips in May"
    bench = tmp_path / "question.jsonl"
    short = "Who wrote the novel Pride and Prejudice?"  # 7 words: held whole, it is left out too
    bench.write_text(json.dumps({"question_id": 1, "category": "math_reasoning", "turns": [evaluated]}) + "\n"
                     + json.dumps({"question_id": 2, "category": "qa", "turns": [short, "Rewrite your answer."]})
                     + "\n")
    kept = ["Natalia sold clips to friends; how many did she sell?", "Who wrote the novel Emma? Rewrite your answer."]
    w = wheel(tmp_path, {"m/samples.jsonl": [chat(f"Solve this: {evaluated}. How many in all?", system="Be brief."),
                                             chat(f"Answer in one word. {short}"), *map(chat, kept)]})
    out = tmp_path / "p.jsonl"
    assert main([str(w), "--out", str(out), "--exclude", f"spec-bench:{bench}"]) == 0
    assert sorted(p["prompt"] for p in read(out)) == kept
    assert "2 left out for overlapping" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["not-a-zip", "no-registry", "bad-exclude", "bad-out", "none-kept", "unwritable"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    w = wheel(tmp_path, {"a/samples.jsonl": [chat("Describe a forest in autumn, in three sentences.")]})
    out = tmp_path / "p.jsonl"
    args = [str(w), "--out", str(out)]
    if case == "not-a-zip":
        args[0] = str(tmp_path / "x.whl")
        (tmp_path / "x.whl").write_text("not a zip")
    elif case == "no-registry":
        args[0] = str(tmp_path / "e.whl")
        zipfile.ZipFile(args[0], "w").writestr("evals/__init__.py", "")
    elif case == "bad-exclude":
        args += ["--exclude", str(tmp_path / "missing.jsonl")]
    elif case == "none-kept":
        args += ["--max-chars", "20"]
    elif case == "unwritable":
        (tmp_path / "file").write_text("")
        args[2] = str(tmp_path / "file" / "p.jsonl")
    else:
        args[2] = str(tmp_path / "p.txt")
    if case == "bad-out":
        with pytest.raises(SystemExit):
            main(args)
    else:
        assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "error" in err[-1] and (len(err) == 1 or case == "bad-out")  # argparse prints its usage first
    assert not list(tmp_path.glob("p.*")) and not list(tmp_path.glob(".p.*"))
