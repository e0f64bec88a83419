"""python -m training.openai_evals: a prompt file for `train-head --prompt-source`, drawn from the registry of
OpenAI's evals (the `evals` wheel on PyPI, MIT licensed: hundreds of task sets written by many hands, in many
languages and kinds; fetch it with `pip download --no-deps evals==3.0.1.post1`).

Each registry row whose "input" is a chat gives one prompt: its unnamed system messages, then its first user
message. A row is kept when it is MIN_CHARS to `--max-chars` long, at least `--min-ascii` ASCII, and shares no
run of NGRAM words with an `--exclude` source's text nor holds a shorter one (SHORT words or more) whole; at most
`--per-file` rows of a file, drawn by a seeded shuffle of its first SCAN that pass, all shuffled together.

    python -m training.openai_evals WHEEL --out PROMPTS.jsonl [--per-file 4] [--exclude spec-bench:PATH]

Writes one {"prompt", "id", "category"} line a prompt (id: the registry file and row; category: its folder),
whole or not at all, and prints how many prompts, files and exclusions."""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import zipfile
import zlib
from pathlib import Path

from evaluation.paths import replace_atomically

DATA = "evals/registry/data/"
MIN_CHARS = 20
NGRAM = 13  # words: the run that marks a prompt as overlapping an evaluated one
SHORT = 6  # words: an evaluated text shorter than NGRAM, at least this long, excludes a prompt holding it whole
SCAN = 2000  # rows of a file read before its draw


def chat_prompt(record) -> str | None:
    """A registry row's prompt: its unnamed system messages, then its first user message; None if it has none."""
    messages = record.get("input") if isinstance(record, dict) else None
    if not isinstance(messages, list):
        return None
    parts = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            return None
        if m.get("role") == "system" and "name" not in m:
            parts.append(m["content"].strip())
        elif m.get("role") == "user":
            parts.append(m["content"].strip())
            return "\n\n".join(p for p in parts if p)
    return None


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def ngrams(text: str) -> set[tuple[str, ...]]:
    """The runs of NGRAM words of a candidate prompt, and of every length from SHORT up to NGRAM - 1: an
    evaluated text shorter than NGRAM words matches the run of its own length."""
    w = words(text)
    return {tuple(w[i:i + n]) for n in range(SHORT, NGRAM + 1) for i in range(len(w) - n + 1)}


def excluded_runs(text: str) -> set[tuple[str, ...]]:
    """What an evaluated text excludes: its runs of NGRAM words, or itself whole where it is shorter (but not
    shorter than SHORT words: "Rewrite your previous response" would exclude much that is not it)."""
    w = words(text)
    if len(w) < NGRAM:
        return {tuple(w)} if len(w) >= SHORT else set()
    return {tuple(w[i:i + NGRAM]) for i in range(len(w) - NGRAM + 1)}


def ascii_share(text: str) -> float:
    return sum(c < "\x80" for c in text) / len(text)


def registry_prompts(wheel: Path, per_file: int, max_chars: int, min_ascii: float, seed: int,
                     excluded: set[tuple[str, ...]]) -> tuple[list[dict], dict[str, int]]:
    """The kept prompts, shuffled, and counts of what was read and left out."""
    counts = {"files": 0, "files_used": 0, "rows": 0, "overlapping": 0}  # rows: that pass the filters
    kept, seen = [], set()
    with zipfile.ZipFile(wheel) as z:
        names = sorted(n for n in z.namelist() if n.startswith(DATA) and n.endswith(".jsonl"))
        if not names:
            raise ValueError(f"{wheel}: holds no {DATA}*.jsonl (is it the evals wheel?)")
        for name in names:
            counts["files"] += 1
            rows = []
            with z.open(name) as f:
                for number, line in enumerate(f, 1):
                    if len(rows) >= SCAN:
                        break
                    try:
                        text = chat_prompt(json.loads(line))
                    except ValueError:
                        continue
                    if (text and MIN_CHARS <= len(text) <= max_chars and text not in seen
                            and ascii_share(text) >= min_ascii):
                        rows.append((number, text))
                        seen.add(text)
            counts["rows"] += len(rows)
            random.Random(f"{seed}:{name}").shuffle(rows)
            taken = 0
            for number, text in rows:
                if taken == per_file:
                    break
                if excluded and ngrams(text) & excluded:
                    counts["overlapping"] += 1
                    continue
                short = name[len(DATA):]
                kept.append({"prompt": text, "id": f"{short}:{number}", "category": short.split("/")[0]})
                taken += 1
            counts["files_used"] += taken > 0
    random.Random(seed).shuffle(kept)
    return kept, counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.openai_evals", description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="the evals wheel (evals-*.whl)")
    ap.add_argument("--out", type=Path, required=True, help="the prompt file to write (.jsonl)")
    ap.add_argument("--per-file", type=int, default=4, help="prompts at most from each registry file (default: 4)")
    ap.add_argument("--max-chars", type=int, default=1000, help="longest prompt kept, in characters (default: "
                    "%(default)s: a batch answers at its longest prompt's pace)")
    ap.add_argument("--min-ascii", type=float, default=0.9, help="the share of a prompt's characters that must be "
                    "ASCII (default: %(default)s; 0 keeps every script)")
    ap.add_argument("--exclude", action="append", default=[], metavar="SOURCE",
                    help="leave out prompts sharing a run of words with this prompt source (spec-bench:PATH, "
                         "humaneval, builtin or a file); repeatable")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.per_file < 1 or args.max_chars < MIN_CHARS or not 0 <= args.min_ascii <= 1:
        ap.error(f"--per-file must be at least 1, --max-chars at least {MIN_CHARS} and --min-ascii in [0, 1]")
    if args.out.suffix != ".jsonl":
        ap.error(f"--out must name a .jsonl file, not {str(args.out)!r}")
    from evaluation.prompts import PromptError, load_prompts

    excluded: set[tuple[str, ...]] = set()
    try:
        for source in args.exclude:
            for p in load_prompts(source):
                for text in p.turns:
                    excluded |= excluded_runs(text)
        prompts, counts = registry_prompts(args.wheel, args.per_file, args.max_chars, args.min_ascii, args.seed,
                                            excluded)
    except (PromptError, ValueError, OSError, zipfile.BadZipFile, zlib.error, NotImplementedError) as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    if not prompts:
        print(f"{ap.prog}: error: no prompt of {args.wheel} passed the filters (--max-chars, --min-ascii, "
              f"--exclude); nothing written", file=sys.stderr)
        return 2
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with replace_atomically(args.out) as partial:
            partial.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts), encoding="utf-8")
    except OSError as e:
        print(f"{ap.prog}: error: cannot write {args.out}: {e}", file=sys.stderr)
        return 2
    print(f"{len(prompts)} prompts from {counts['files_used']} of {counts['files']} registry files "
          f"({counts['rows']} rows passed the filters; {counts['overlapping']} left out for overlapping "
          f"{', '.join(args.exclude) or 'no excluded source'}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
