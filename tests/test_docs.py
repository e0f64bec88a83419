"""The README and the pages of docs/ stay true to the tree: a short README, links and anchors that resolve,
commands whose modules and routes exist, flags that some program takes, paths of ours that exist, and the
decoder table in step with the rule table."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

from launch.pair import COMMANDS
from pipeline.rules import RULES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
RESULT_PAGES = sorted((ROOT / "results").glob("**/*.md"))  # their links are checked; their commands ran then
MAX_README_LINES = 150
PACKAGES = ("pipeline", "protocol", "models", "evaluation", "target_proc", "drafter_proc", "programs", "study",
            "training", "timing", "launch", "bench")
OURS = (*PACKAGES, "tests", "results", "docs")  # a backticked path under one of these must exist
FOREIGN = {"evaluation/speed.py"}  # paths in Spec-Bench's repository, which the pages name as such

FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
PYTHON_M = re.compile(r"python3? (?:-P )?-m ([\w.]+)")
PAIR_SH = re.compile(r"launch/pair\.sh(?: +([a-z][\w-]*))?")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*-]*)" % "|".join(OURS))


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def code_of(text: str) -> list[str]:
    """The fenced blocks and the inline code spans of a Markdown text."""
    blocks = FENCE.findall(text)
    return blocks + re.findall(r"`([^`\n]+)`", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (fenced blocks hold no headings); repeats get -1, -2, ..."""
    seen: Counter = Counter()
    out = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6} +(.*)", line):
            base = slug(m.group(1))
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return out


def program_flags() -> set[str]:
    """Every flag the programs and the benchmarks take: their parsers' options, and the flags written in the
    source of the scripts that build their command lines by hand."""
    from importlib import import_module

    import launch.pair
    from bench.__main__ import BENCHMARKS
    from programs import drafter_program, keys_program
    from timing import export, matched, report, values
    from training import cli as training_cli

    parsers = [launch.pair.build_parser("decode"), launch.pair.build_parser("sweep"), drafter_program.build_parser(),
               keys_program.build_parser("keys"), report.build_parser(), values.build_parser(),
               export.build_parser(), matched.build_parser(), training_cli.build_parser("train-head")]
    parsers += [import_module(f"bench.{name}").build_parser() for name in BENCHMARKS]
    flags = {option for parser in parsers for action in parser._actions for option in action.option_strings}
    sources = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    sources += [p for p in (ROOT / "launch").glob("*.sh")] + [p for p in (ROOT / "tests" / "gpu").glob("*.sh")]
    sources += [ROOT / "tests" / "protocol" / "hostile.py"]
    for path in sources:
        flags.update(FLAG.findall(path.read_text(encoding="utf-8")))
    return flags


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move the rest to docs/"


@pytest.mark.parametrize("page", PAGES + RESULT_PAGES, ids=page_id)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s): and other schemes
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.is_file() or ROOT not in path.parents:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: {page_id(path)} has no heading with the anchor #{anchor}")
    assert not broken, f"{page_id(page)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_command_names_a_module_and_route_that_exist(page):
    code = "\n".join(code_of(page.read_text(encoding="utf-8")))
    missing = [m for m in PYTHON_M.findall(code) if importlib.util.find_spec(m) is None]
    routes = [r for r in PAIR_SH.findall(code) if r and r not in COMMANDS]
    assert not missing, f"{page_id(page)}: python -m names modules that do not exist: {missing}"
    assert not routes, f"{page_id(page)}: launch/pair.sh has no commands {routes}; it has {', '.join(COMMANDS)}"


def test_every_flag_is_one_a_program_takes():
    flags = program_flags()
    unknown = {page_id(page): sorted(set(FLAG.findall("\n".join(code_of(page.read_text(encoding="utf-8"))))) - flags)
               for page in PAGES}
    unknown = {page: names for page, names in unknown.items() if names}
    assert not unknown, f"flags no program takes: {unknown}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_path_of_ours_exists(page):
    named = {p.rstrip("./") for code in code_of(page.read_text(encoding="utf-8")) for p in PATH.findall(code)}
    missing = sorted(p for p in named - FOREIGN if "*" not in p and not (ROOT / p).exists())
    assert not missing, f"{page_id(page)} names paths that do not exist: {missing}"


def test_the_readmes_decoder_table_lists_every_rule_in_order():
    text = README.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w-]+)` \|", text[text.index("## Decoders"):], re.M)
    assert rows == list(RULES), f"README.md's decoder table lists {rows}; pipeline/rules.py has {list(RULES)}"
