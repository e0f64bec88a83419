"""The results pages quote the committed JSON figure for figure.

The pages: each run folder's README.md (every folder under results/ has one, its heading naming the folder)
and the benchmark pages beside results/README.md, the index. A table that quotes a results folder's JSON names the file in its last column's heading ("from `values.jsonl`",
the file in the folder of the section's heading) and, in each row, the line and fields each figure comes from:
`KIND KEY=VALUE ...: FIELD ...`, KIND the line's `kind` and every KEY=VALUE one of its fields (values compare
as text). Each column headed "T = x" holds the figures at temperature x: its numbers, in order, are the FIELDs
that hold numbers, as printed (a percentage is the fraction times 100; as many decimals as printed), and a FIELD
that holds text appears in the cell. A "T = x" heading that names another folder (`` `FOLDER/` ``, a path under
results/) quotes the file of the same name in that folder: two recordings side by side, each figure from its own.
A report's JSON document (`report.json`, the last line a report prints) is read as lines too: one per entry of a
setting's `decoders`, `gains` and `pass_gains`, of that kind, with the setting's `temperature` and `budget` and
the entry's `name`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "results"
SECTION = re.compile(r"^#{1,2} `([\w./-]+)/`", re.M)
SOURCE = re.compile(r"from `([\w.-]+\.jsonl?)`")
CITATION = re.compile(r"^`([\w-]+)((?: [\w-]+=\S+)*): ([\w ]+)`$")
NUMBER = re.compile(r"(?<![\w.])([+-]?)(\d+(?:\.(\d+))?)(?:e([+-]?\d+))?(%?)")
TEMPERATURE = re.compile(r"\bT = (\d+(?:\.\d+)?)\b")
FOLDER = re.compile(r"`([\w.-]+(?:/[\w.-]+)*)/`")
QUOTING = ("cpu-smollm2-paper-pool", "cpu-smollm2-eagle3-paper-pool", "cpu-smollm2-eagle3-late", "cpu-smollm2-cover",
           "cpu-smollm2-eagle3-cover", "cpu-smollm2-values", "cpu-smollm2-auto-drafters/head-whole-t1",
           "cpu-smollm2-auto-drafters/head-t0-repeats",
           "cpu-smollm2-auto-drafters/ledger-int8-t0", "cpu-smollm2-lookup/head-b8-lookup8")  # every table quotes its JSON


def pages_text() -> str:
    """Every results page, one after the other (each run folder's README.md, then the pages beside the index)."""
    pages = sorted(RESULTS.glob("*/**/README.md")) + sorted(p for p in RESULTS.glob("*.md") if p.name != "README.md")
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def sections(text: str) -> dict[str, str]:
    """Each `# \\`FOLDER/\\`` or `## \\`FOLDER/\\`` section's text (to the next heading of level 1 or 2), by
    folder."""
    headings = list(re.finditer(r"^#{1,2} ", text, re.M))
    ends = [m.start() for m in headings[1:]] + [len(text)]
    return {m.group(1): text[h.start():end] for h, end in zip(headings, ends)
            if (m := SECTION.match(text, h.start()))}


def tables(section: str) -> list[list[list[str]]]:
    """The section's Markdown tables, each a list of rows of cells (the heading row first, the rule left out)."""
    out, rows = [], []
    for line in section.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows:
            out.append(rows)
            rows = []
    return out


def json_lines(path: Path) -> list[dict]:
    """A JSON-lines file's objects, or a report's JSON document as lines (see the module's words)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    lines = []
    for setting in json.loads(text)["settings"]:
        for kind in ("decoders", "gains", "pass_gains"):
            for name, figures in setting.get(kind, {}).items():
                lines.append({"kind": kind, "temperature": setting["temperature"], "budget": setting["budget"],
                              "category": setting["category"], "name": name, **figures})
    return lines


def matches(line: dict, kind: str, keys: dict[str, str]) -> bool:
    return line.get("kind") == kind and all(str(line.get(k)) == v for k, v in keys.items())


def printed(value: float, text: str) -> bool:
    """Whether `text` (one NUMBER match) is `value` as printed: scaled by 100 when it ends in %, rounded to its
    decimals (or to its mantissa's, in e-notation)."""
    m = NUMBER.fullmatch(text)
    sign, digits, decimals, exponent, percent = m.groups()
    shown = float(f"{sign}{digits}" + (f"e{exponent}" if exponent else ""))
    x = 100 * value if percent else value
    places = len(decimals or "")
    return float(f"{x:.{places}e}" if exponent else f"{x:.{places}f}") == shown


def cell_problems(cell: str, line: dict, fields: list[str]) -> list[str]:
    """What in one cell is not `line`'s `fields` as printed."""
    words = [f for f in fields if isinstance(line.get(f), str)]
    problems = [f"`{f}` is {line[f]!r}, not in the cell" for f in words if line[f] not in cell]
    for f in words:  # a text's digits are not figures
        cell = cell.replace(line[f], " ")
    numbers = [m.group(0) for m in NUMBER.finditer(cell.replace("−", "-"))]
    numeric = [f for f in fields if f not in words]
    if len(numbers) != len(numeric):
        return problems + [f"{len(numbers)} numbers for {len(numeric)} fields ({', '.join(numeric)})"]
    for text, f in zip(numbers, numeric):
        if not isinstance(line.get(f), (int, float)) or isinstance(line.get(f), bool):
            problems.append(f"`{f}` is {line.get(f)!r}")
        elif not printed(float(line[f]), text):
            problems.append(f"{text} is not `{f}` = {line[f]!r}")
    return problems


def check_table(rows: list[list[str]], lines_of, where: str) -> tuple[int, list[str]]:
    """(figures checked, problems) of one quoting table; `lines_of(folder)` reads the source's lines in a
    folder (None: the section's), or None where the file is not committed."""
    head = rows[0]
    temperatures = {i: float(m.group(1)) for i, h in enumerate(head) if (m := TEMPERATURE.search(h))}
    sources = {i: (m.group(1) if (m := FOLDER.search(head[i])) else None) for i in temperatures}
    problems, checked = [], 0
    for folder in sorted({f for f in sources.values() if f}):
        if lines_of(folder) is None:
            problems.append(f"{where}: `{folder}/` named by a column does not hold the file")
    for row in rows[1:]:
        citation = CITATION.match(row[-1])
        if not citation:
            problems.append(f"{where}: the row {row[:2]} names no JSON line and field (`KIND KEY=VALUE: FIELD`)")
            continue
        kind, keys, fields = citation.group(1), dict(k.split("=", 1) for k in citation.group(2).split()), \
            citation.group(3).split()
        for i, t in temperatures.items():
            lines = lines_of(sources[i]) or []
            found = [line for line in lines if matches(line, kind, keys) and float(line.get("temperature")) == t]
            if len(found) != 1:
                problems.append(f"{where}: {len(found)} lines are `{row[-1]}` at T = {t:g}")
                continue
            side = f" (`{sources[i]}/`)" if sources[i] else ""
            problems += [f"{where}, {row[0]} {row[1]}, T = {t:g}{side}: {p}"
                         for p in cell_problems(row[i], found[0], fields)]
            checked += 1
    return checked, problems


def check(text: str) -> tuple[int, list[str]]:
    """(figures checked, problems) of every quoting table of the results pages' `text`."""
    checked, problems = 0, []
    for folder, section in sections(text).items():
        quoting = [rows for rows in tables(section) if SOURCE.search(rows[0][-1])]
        if folder in QUOTING and (not quoting or len(quoting) < len(tables(section))):
            problems.append(f"{folder}: every table of this section must quote its JSON")
        for rows in quoting:
            source = RESULTS / folder / SOURCE.search(rows[0][-1]).group(1)
            if not source.is_file():
                problems.append(f"{folder}: {source.name} is not committed")
                continue

            read = {None: json_lines(source)}

            def lines_of(other, name=source.name, read=read):
                if other not in read:
                    path = RESULTS / other / name
                    read[other] = json_lines(path) if path.is_file() else None
                return read[other]

            n, found = check_table(rows, lines_of, f"{folder}/{source.name}")
            checked, problems = checked + n, problems + found
    return checked, problems


def pageless(results: Path) -> list[str]:
    """The folders under `results` without a page of their own: a README.md whose heading names the folder."""
    missing = []
    for folder in sorted(p for p in results.rglob("*") if p.is_dir()):
        page, name = folder / "README.md", f"# `{folder.relative_to(results).as_posix()}/`"
        if not page.is_file() or not page.read_text(encoding="utf-8").startswith(name):
            missing.append(folder.relative_to(results).as_posix())
    return missing


def test_every_run_folder_has_a_page_that_names_it():
    missing = pageless(RESULTS)
    assert not missing, f"folders under results/ without a README.md whose heading names them: {missing}"


def test_a_folder_without_its_page_is_found(tmp_path):
    (tmp_path / "run" / "sub").mkdir(parents=True)
    (tmp_path / "run" / "README.md").write_text("# `run/`: a run\n", encoding="utf-8")
    (tmp_path / "run" / "sub" / "README.md").write_text("# `other/`: misnamed\n", encoding="utf-8")
    assert pageless(tmp_path) == ["run/sub"]
    (tmp_path / "run" / "sub" / "README.md").write_text("# `run/sub/`: a part\n", encoding="utf-8")
    assert pageless(tmp_path) == []


def test_every_figure_the_results_pages_quote_is_the_committed_jsons():
    checked, problems = check(pages_text())
    assert not problems, f"{len(problems)} figures differ from the JSON they name:\n  " + "\n  ".join(problems[:20])
    assert checked >= 100  # the quoting tables are there, not left out


@pytest.mark.parametrize("old, new", [("+20.1% [+16.6%, +24.1%]", "+20.2% [+16.6%, +24.1%]"),
                                      ("+20.1% [+16.6%, +24.1%]", "+20.1% [+16.6%]")])
def test_a_changed_figure_is_caught(old, new):
    text = pages_text()
    assert old in text
    checked, problems = check(text.replace(old, new, 1))
    assert problems and "T = 0" in problems[0]


def test_a_changed_figure_of_a_side_column_is_caught_against_its_own_folder():
    text = pages_text()
    section = sections(text)["cpu-smollm2-eagle3-paper-pool"]
    row = next(line for line in section.splitlines() if "| root over draft, B = 8 |" in line)
    cells = row.split(" | ")
    assert "`cpu-smollm2-paper-pool/`" in section and cells[4] == "+20.1% [+16.6%, +24.1%]"  # int8, T = 0
    changed = " | ".join(cells[:4] + ["+20.2% [+16.6%, +24.1%]"] + cells[5:])
    checked, problems = check(text.replace(row, changed, 1))
    assert len(problems) == 1 and "(`cpu-smollm2-paper-pool/`)" in problems[0] and "T = 0" in problems[0]


def test_a_figure_is_compared_as_printed():
    assert printed(0.2014, "+20.1%") and not printed(0.2016, "+20.1%") and printed(-0.08, "-8.0%")
    assert printed(9.56e-7, "9.6e-7") and not printed(9.4e-7, "9.6e-7") and printed(15.0, "15")
    assert printed(-0.0004, "+0.0%")  # a signed zero is zero
