"""The house's limits, held as it grows: no function over 50 lines, no class over 200, no function that only
tests call, and no `isinstance` dispatch on the kinds of runner or drafter (they share one interface, named as
a Protocol, and a caller never asks which it holds). README.md's 150 lines: tests/test_docs.py."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "protocol", "models", "evaluation", "target_proc", "drafter_proc", "programs", "study",
            "training", "timing", "launch", "bench")
MAX_FUNCTION, MAX_CLASS = 50, 200
# Methods other libraries call by name on objects of ours: a ZAP credentials provider's (pyzmq).
CALLED_BY_NAME = {"callback"}


def sources() -> dict[str, ast.Module]:
    """Every product module's syntax tree, by its path under the repository."""
    return {str(f.relative_to(ROOT)): ast.parse(f.read_text(encoding="utf-8"))
            for package in PACKAGES for f in sorted((ROOT / package).rglob("*.py"))}


def too_long(trees: dict[str, ast.Module]) -> list[str]:
    out = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            limit = MAX_FUNCTION if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                MAX_CLASS if isinstance(node, ast.ClassDef) else None
            if limit and (n := node.end_lineno - node.lineno + 1) > limit:
                out.append(f"{path}:{node.lineno} {node.name} has {n} lines (at most {limit})")
    return out


def api_classes() -> set[str]:
    """The classes the Python API exports (launch.api): their public methods are the users' to call."""
    api = importlib.import_module("launch.api")
    return {name for name in api.__all__ if isinstance(getattr(api, name), type)}


def overrides(path: str, cls: ast.ClassDef, name: str) -> bool:
    """Whether method `name` of class `cls` overrides one of a base class (a library calls it: torch's
    extra_repr, say)."""
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return any(hasattr(base, name) for base in getattr(module, cls.name).__mro__[1:])


def uncalled(trees: dict[str, ast.Module]) -> list[str]:
    """Functions and methods no product code names (only tests would call them)."""
    named: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                named.add(node.id)
            elif isinstance(node, ast.Attribute):
                named.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                named.add(node.value)  # a name looked up by string (getattr, a registry)
    api, out = api_classes(), []
    for path, tree in trees.items():
        for cls in [None, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]:
            body = tree.body if cls is None else cls.body
            for fn in (n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                name = fn.name
                if name in named or name.startswith("__") or name == "main" or name in CALLED_BY_NAME:
                    continue
                if cls is not None and (cls.name in api and not name.startswith("_") or overrides(path, cls, name)):
                    continue
                out.append(f"{path}:{fn.lineno} {name}")
    return out


def runner_dispatch(trees: dict[str, ast.Module]) -> list[str]:
    """isinstance calls that ask which runner, model or drafter a caller holds."""
    kinds = {n.name for path, tree in trees.items() if path.startswith(("models/", "drafter_proc/"))
             for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    out = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                second = node.args[1]
                names = [getattr(x, "id", getattr(x, "attr", None))
                         for x in (second.elts if isinstance(second, ast.Tuple) else [second])]
                own = f"models/{path.split('/', 1)[-1]}"  # a class may ask about its own module's classes
                if any(n in kinds for n in names) and not path.startswith(("models/cpu_linear.py",)):
                    out.append(f"{path}:{node.lineno} {ast.unparse(node)}")
    return out


def test_no_function_or_class_is_too_long():
    problems = too_long(sources())
    assert not problems, "split these:\n  " + "\n  ".join(problems)


def test_no_function_is_called_only_from_tests():
    problems = uncalled(sources())
    assert not problems, "no product code calls these:\n  " + "\n  ".join(problems)


def test_no_caller_asks_which_runner_it_holds():
    problems = runner_dispatch(sources())
    assert not problems, "give the interface a method instead:\n  " + "\n  ".join(problems)


def test_the_checks_find_what_they_look_for():
    tree = {"models/x.py": ast.parse("class A:\n    pass\n"),
            "programs/y.py": ast.parse("def f(r):\n" + "    x = 1\n" * 50 + "    return isinstance(r, A)\n")}
    assert too_long(tree) == ["programs/y.py:1 f has 52 lines (at most 50)"]
    assert runner_dispatch(tree) == ["programs/y.py:52 isinstance(r, A)"]
    assert [p.split()[-1] for p in uncalled(tree)] == ["f"]
