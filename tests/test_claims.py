"""Words held to their intervals: every sentence of README.md, results/README.md and docs/ that states a
direction of a measured figure names the JSON line and fields it rests on, and the word agrees with the interval.

A claim is an HTML comment right after the figure it is about:

    +18.1% [+6.2, +36.6]<!-- claim above: results/DIR/report.json gains name=draft/ar temperature=0.0: gain low high -->

`above` (a gain, more, faster: the interval's low end above the null), `below` (a loss, fewer, slower: its high
end below it) or `across` (undecided, a tie: the interval holds the null); `null=1` for a ratio (the default is
0), then the file under the repository, the line (`KIND KEY=VALUE ...`, as tests/test_results.py reads lines; in a
program's printed output, a `.txt` file, each object within a JSON line it printed is a line of its name's KIND) and
the fields of the figure and its interval's two ends. The clause before the comment (from the previous claim or
the sentence's start; a clause without a direction word shares the one before it) must hold a word of the claim's direction. A sentence with a direction word and a
figure (a percentage or a ratio such as 1.65x) that names no claim says "one run" (one run, no interval) or
gives no direction at all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_results import json_lines, matches, printed

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "results").glob("*.md")),
         *sorted((ROOT / "results").glob("*/**/README.md"))]  # not the values.md and report.md programs write
CLAIM = re.compile(r"<!-- claim (above|below|across)(?: null=([\d.]+))?: (\S+) ([\w-]+)((?: [\w-]+=\S+)*): "
                   r"(\w+) (\w+) (\w+) -->")
WORDS = {
    "above": r"gain|gains|gained|more|faster|above|pays|paid|higher|beats?|rises?",
    "below": r"lose|loses|lost|loss|fewer|slower|below|lower|falls?",
    "across": r"undecided|ties?|tied|not told apart|not told from zero|not settled|neither|spans? zero",
}
DIRECTION = re.compile(r"\b(%s)\b" % "|".join(WORDS.values()), re.I)
FIGURE = re.compile(r"(?<![\w.\[])[+−-]?\d+(?:\.\d+)?(?:%|x\b)(?! \[)")
INTERVAL = re.compile(r"([+−-]?\d+(?:\.\d+)?)(%?) \[([+−-]?\d+(?:\.\d+)?)%?, ([+−-]?\d+(?:\.\d+)?)%?\]")
FENCE = re.compile(r"```.*?```", re.S)


def prose(page: Path) -> list[str]:
    """The page's sentences outside code blocks and tables, each on one line (a list item starts one)."""
    out = []
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for para in re.split(r"\n\s*\n|\n(?=\s*- )", text):
        lines = [line for line in para.splitlines() if not line.lstrip().startswith("|")]
        text = " ".join(" ".join(lines).split())
        out += [s for s in re.split(r"(?<=[.;:])\s+(?=[A-Z(`*\[])", text) if s]
    return out


def claim_lines(source: Path) -> list[dict]:
    """The lines a claim can name: a JSON file's (tests/test_results.py), or in printed output (`.txt`) each object
    of a JSON line, of its name's kind (`against`: the line's `against` object)."""
    if source.suffix != ".txt":
        return json_lines(source)
    printed_lines = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    return [{"kind": name, **value} for doc in printed_lines for name, value in doc.items() if isinstance(value, dict)]


def claim_problems(sentence: str) -> list[str]:
    """What in one sentence's claims the JSON or the words contradict."""
    problems, start, clause = [], 0, ""
    for m in CLAIM.finditer(sentence):
        direction, null, path, kind, keys, value, low, high = m.groups()
        near = sentence[start:m.start()]  # the figure the claim is about
        if DIRECTION.search(near):  # a clause without a direction word ("+9.6% and +9.3%") shares the last one's
            clause = near
        start = m.end()
        source = ROOT / path
        if not source.is_file():
            problems.append(f"{path} is not committed")
            continue
        keys = dict(k.split("=", 1) for k in keys.split())
        found = [line for line in claim_lines(source) if matches(line, kind, keys)]
        if len(found) != 1:
            problems.append(f"{len(found)} lines are `{kind}{m.group(5)}` in {path}")
            continue
        line, null = found[0], float(null or 0)
        lo, hi = float(line[low]), float(line[high])
        holds = {"above": lo > null, "below": hi < null, "across": lo <= null <= hi}[direction]
        if not holds:
            problems.append(f"`{direction}` but {low}..{high} is [{lo:.4g}, {hi:.4g}] against {null:g}")
        if not re.search(r"\b(%s)\b" % WORDS[direction], clause, re.I):
            problems.append(f"the words before `{direction}` say none of {WORDS[direction]!r}: {clause[-80:]!r}")
        shown = list(INTERVAL.finditer(near))
        if shown:
            v, pct, a, b = shown[-1].groups()
            if not all(printed(float(line[f]), x.replace("−", "-") + pct) for f, x in ((value, v), (low, a), (high, b))):
                problems.append(f"{shown[-1].group(0)} is not {value} {low} {high} = {line[value]:.4g} "
                                f"[{lo:.4g}, {hi:.4g}]")
    return problems


def uncited(sentence: str) -> bool:
    """A direction stated of a figure with neither a claim nor "one run" beside it (a confidence level, such as
    the 95% of an interval, is no figure)."""
    bare = re.sub(r"\b\d+% (?=(?:paired |percentile )?(?:prompt-bootstrap )?intervals?\b)", "", CLAIM.sub("", sentence))
    return bool(DIRECTION.search(bare) and (FIGURE.search(bare) or INTERVAL.search(bare))
                and not CLAIM.search(sentence) and "one run" not in bare)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_claim_agrees_with_its_interval(page):
    problems = [f"{p} ({s[:60]!r}...)" for s in prose(page) for p in claim_problems(s)]
    assert not problems, f"{page.name}: " + "\n  ".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_direction_of_a_figure_names_its_claim(page):
    bare = [s for s in prose(page) if uncited(s)]
    assert not bare, f"{page.name}: sentences that state a direction of a figure without a claim or " \
                     f"\"one run\":\n  " + "\n  ".join(s[:200] for s in bare)


LOOKUP8 = "results/cpu-smollm2-lookup/head-b8-lookup8/report.json gains name=draft/ar temperature=1.0: gain low high"


@pytest.mark.parametrize("sentence, wrong", [
    (f"at T = 1 lookup gains +9.1% [−0.2, +20.0]<!-- claim above: {LOOKUP8} -->", "`above` but"),
    (f"at T = 1 lookup is undecided, +9.2% [−0.2, +20.0]<!-- claim across: {LOOKUP8} -->", "is not gain"),
    (f"at T = 1 lookup adds +9.1% [−0.2, +20.0]<!-- claim across: {LOOKUP8} -->", "the words before"),
])
def test_a_word_stronger_than_its_interval_is_caught(sentence, wrong):
    problems = claim_problems(sentence)
    assert problems and wrong in problems[0]


def test_an_agreeing_claim_passes_and_a_bare_one_is_found():
    assert claim_problems(f"at T = 1 lookup is undecided, +9.1% [−0.2, +20.0]<!-- claim across: {LOOKUP8} -->") == []
    assert uncited("with lookup draft gains +9.1% over ar at T = 1")
    assert not uncited("with lookup draft gains +9.1% over ar at T = 1 (one run)")


AGREEMENT = "results/cpu-smollm2-eagle3-head/agreement-evals.txt against prompts=48: gain low high"


def test_a_claim_reads_an_object_of_a_programs_printed_json_line():
    assert claim_problems(f"its top-1 is lower, −13.5% [−18.6%, −7.5%]<!-- claim below: {AGREEMENT} -->") == []
    assert "`above` but" in claim_problems(f"its top-1 is higher, −13.5% [−18.6%, −7.5%]<!-- claim above: {AGREEMENT} -->")[0]
    assert "0 lines are" in claim_problems(f"it is lower, −13.5%<!-- claim below: {AGREEMENT.replace('=48', '=12')} -->")[0]
