"""Command-line options built from dataclass fields, so each option and default is written once.

A field `max_new_tokens: int = 256` becomes `--max-new-tokens N` (with an optional prefix); a bool field
defaulting to True becomes `--no-NAME`, one defaulting to False `--NAME`; a `list[str]` field is
repeatable. Values are checked by the dataclass's own `__post_init__`, whose ValueError is turned into a
usage error naming the option.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any


def _flag(name: str, prefix: str) -> str:
    return "--" + (prefix + name).replace("_", "-")


def add_options(parser: argparse.ArgumentParser | Any, cls: type, prefix: str = "",
                defaults: dict[str, Any] | None = None, skip: tuple[str, ...] = ()) -> None:
    """Add one option per field of dataclass `cls`; `defaults` overrides shown defaults."""
    group = parser.add_argument_group(cls.__doc__.strip().splitlines()[0] if cls.__doc__ else cls.__name__)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        default = (defaults or {}).get(f.name, f.default)
        help_text = f.metadata.get("help", "")
        dest = prefix.replace("-", "_") + f.name
        if f.type in ("bool", bool):
            if default:
                group.add_argument(_flag("no_" + f.name, prefix), dest=dest, action="store_false",
                                   default=True, help=help_text)
            else:
                group.add_argument(_flag(f.name, prefix), dest=dest, action="store_true", default=False,
                                   help=help_text)
        elif f.type in ("list[str]", "tuple[str, ...]"):
            group.add_argument(_flag(f.name, prefix), dest=dest, action="append", default=None,
                               metavar=f.metadata.get("metavar", "TEXT"), help=help_text)
        else:
            kind = {"int": int, "float": float, "str": str}[f.type] if isinstance(f.type, str) else f.type
            group.add_argument(_flag(f.name, prefix), dest=dest, type=kind, default=default,
                               metavar=f.metadata.get("metavar", f.name.split("_")[-1].upper()),
                               help=f"{help_text} (default: {default})" if default not in (None, "") else help_text)


def from_options(parser: argparse.ArgumentParser, ns: argparse.Namespace, cls: type, prefix: str = "",
                 skip: tuple[str, ...] = (), **extra: Any):
    """Build `cls` from parsed options; a ValueError from its checks becomes a usage error."""
    values = dict(extra)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init or f.name in extra:
            continue
        value = getattr(ns, prefix.replace("-", "_") + f.name)
        if value is None and f.type in ("list[str]", "tuple[str, ...]"):
            value = f.default_factory() if f.default_factory is not dataclasses.MISSING else ()
        if f.type == "tuple[str, ...]":
            value = tuple(value)
        values[f.name] = value
    try:
        return cls(**values)
    except ValueError as e:
        parser.error(_as_option(str(e), prefix))


def to_argv(obj: Any, prefix: str = "", skip: tuple[str, ...] = ()) -> list[str]:
    """The options that rebuild `obj` through add_options/from_options."""
    argv: list[str] = []
    for f in dataclasses.fields(obj):
        if f.name in skip or not f.init:
            continue
        value = getattr(obj, f.name)
        if f.type in ("bool", bool):
            if value != f.default:
                argv.append(_flag(("no_" if f.default else "") + f.name, prefix))
        elif f.type in ("list[str]", "tuple[str, ...]"):
            for item in value:
                argv += [_flag(f.name, prefix), str(item)]
        else:
            argv += [_flag(f.name, prefix), str(value)]
    return argv


def _as_option(message: str, prefix: str) -> str:
    """Rewrite "`field_name` must ..." into "--prefix-field-name must ..."."""
    if message.startswith("`") and message.count("`") >= 2:
        name, rest = message[1:].split("`", 1)
        p = prefix.replace("-", "_")
        if not name.startswith(p):
            name = p + name
        return f"--{name.replace('_', '-')}{rest}"
    return message
