"""The packages import downward only: pure rules and the wire at the bottom, the programs above them.

    pipeline -> protocol -> models -> evaluation -> target_proc, drafter_proc -> programs -> timing -> launch

(a package may import those left of it, never those right of it; target_proc and drafter_proc never import
each other). Every import statement counts, those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [("pipeline",), ("protocol",), ("models",), ("evaluation",), ("target_proc", "drafter_proc"), ("programs",),
          ("timing",), ("launch",)]
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
