"""DESIGN.md section 17 walks one decode by the names of its functions: every name it gives exists."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DESIGN = Path(__file__).resolve().parents[1] / "DESIGN.md"
PACKAGES = ("pipeline", "protocol", "models", "evaluation", "target_proc", "drafter_proc", "programs")
NAME = re.compile(r"`((?:%s)\.[\w.\s]+?)`" % "|".join(PACKAGES))


def walked_names() -> list[str]:
    text = DESIGN.read_text(encoding="utf-8")
    walk = text[text.index("## 17. One decode, function by function"):]
    return [re.sub(r"\s+", "", m.group(1)) for m in NAME.finditer(walk)]


def resolve(name: str):
    """The object a dotted name gives: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_the_walk_names_enough_functions():
    assert len(walked_names()) >= 25


@pytest.mark.parametrize("name", walked_names())
def test_every_walked_name_exists(name):
    obj = resolve(name)
    assert callable(obj) or inspect.ismodule(obj), name


def test_a_missing_name_is_found():
    with pytest.raises(AttributeError):
        resolve("pipeline.decode._Rounds.no_such_flow")
