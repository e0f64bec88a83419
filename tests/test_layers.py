"""The packages import downward only: pure rules and the wire at the bottom, the programs above them.

    pipeline -> protocol -> models -> evaluation -> target_proc, drafter_proc -> programs -> study, training -> timing
    -> launch
    -> bench

(a package may import those left of it, never those right of it; target_proc and drafter_proc never import
each other), and no files, inside a package or across packages, import each other in a circle. Every
import statement counts, those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [("pipeline",), ("protocol",), ("models",), ("evaluation",), ("target_proc", "drafter_proc"), ("programs",),
          ("study", "training"), ("timing",), ("launch",), ("bench",)]
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def imports_of(package: str) -> dict[str, set[str]]:
    """Project package -> the files of `package` that import it."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in LEVEL and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", list(LEVEL))
def test_imports_run_downward_only(package):
    upward = {dep: files for dep, files in imports_of(package).items()
              if LEVEL[dep] > LEVEL[package] or (LEVEL[dep] == LEVEL[package] and dep != package)}
    assert not upward, f"{package} imports {upward}"


def module_imports() -> dict[str, set[str]]:
    """Project module (a file, dotted) -> the project modules it imports, those inside functions too."""
    paths = [p for pkg in LEVEL for p in (ROOT / pkg).rglob("*.py")]
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            found.update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`: its strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_files_import_each_other_in_a_circle():
    assert cycles(module_imports()) == []


def test_a_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
