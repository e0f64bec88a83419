"""Passages of text found on this machine, for prompts that hand the target a context to work from.

The texts are what any Linux machine with Python holds and no evaluated set does: the docstrings of Python's
standard library, the licences in /usr/share/common-licenses and beside installed Python packages, and the
copyright and README files of /usr/share/doc (gzipped ones too). They are read in sorted order and cut at
paragraphs into passages of at most PASSAGE_CHARS, so the same machine gives the same passages."""

from __future__ import annotations

import ast
import gzip
import inspect
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from training.prompts import PASSAGE_CHARS

MIN_CHARS = 300  # a passage shorter than this says too little to summarize or question
DOC_FILES = re.compile(r"^(copyright|README(\.\w+)?|NEWS)(\.gz)?$")
LICENCE_FILES = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)(\.\w+)?$", re.IGNORECASE)
MAX_FILE = 200_000  # bytes read of a file at most


def _read(path: Path) -> str:
    """A text file's text (gzip when named .gz), or '' where it is not UTF-8 text or cannot be read."""
    try:
        raw = (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")).read(MAX_FILE)
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return ""


def docstrings(root: Path) -> Iterator[str]:
    """The module, class and function docstrings of the .py files under `root` (tests left out)."""
    for path in sorted(root.rglob("*.py")):
        if "test" in path.relative_to(root).as_posix() or "site-packages" in path.parts:
            continue
        try:
            tree = ast.parse(_read(path))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield inspect.cleandoc(doc)


def documents() -> Iterator[str]:
    """Licences and installed documentation: the common licences, Python packages' licence files, and each
    /usr/share/doc package's copyright, README and NEWS."""
    site = Path(sysconfig.get_paths()["purelib"])
    for pattern, root in ((None, Path("/usr/share/common-licenses")), (LICENCE_FILES, site),
                          (DOC_FILES, Path("/usr/share/doc"))):
        if not root.is_dir():
            continue
        files = root.iterdir() if pattern is None else (p for p in root.rglob("*") if pattern.match(p.name))
        for path in sorted(files):
            if path.is_file() and not path.is_symlink():
                yield _read(path)


def cut(text: str, limit: int = PASSAGE_CHARS) -> list[str]:
    """`text` in passages of whole paragraphs, each at most `limit` characters (a longer paragraph is cut at a
    word) and at least MIN_CHARS; lines within a paragraph joined by spaces."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    out, now = [], ""
    for p in filter(None, paragraphs):
        p = p if len(p) <= limit else p[:limit].rsplit(" ", 1)[0]
        if now and len(now) + 2 + len(p) > limit:
            out.append(now)
            now = ""
        now = f"{now}\n\n{p}" if now else p
    out.append(now)
    return [p for p in out if len(p) >= MIN_CHARS]


def machine_passages() -> list[str]:
    """Every passage of this machine's texts (docstrings, then documents), in a fixed order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [p for texts in (docstrings(stdlib), documents()) for text in texts for p in cut(text)]
