"""The command line of every program: options built from dataclass fields, flag names in errors, exit codes.

A field `max_new_tokens: int = 256` becomes `--max-new-tokens N` (with an optional prefix); a bool field
defaulting to True becomes `--no-NAME`, one defaulting to False `--NAME`; a `tuple[str, ...]` field is
repeatable; a `tuple[int, ...]` field takes a comma-separated list. Metadata `{"required": True}` makes a required
option, `{"dashed": True}` one whose value may start with '-' (`args_of`), and `{"embed": (names...)}` on a field
holding another options dataclass adds those fields of it as options (RunOptions embeds DecodeConfig's). The pure
rules' settings carry no command-line words: programs.rule_options holds them.

Values are checked once, by the dataclasses' own `__post_init__`; `Flags.rewrite` turns the backticked field
names of lower layers' errors into the program's flags. Exit codes (docs/decoding.md): 0 done; 2 what the user
can fix; 3 the peer process or the wire; 128 + N stopped by signal N; 1 with a traceback for a bug."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import logging
import os
import re
import resource
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from pipeline.config import AUTO, ConfigError, InputError, split_list
from programs.rule_options import OPTIONS
from protocol.errors import PeerDied, PeerTimeout, ProtocolError
from protocol.wakeup import ending, woken_by_signals

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PEER = 0, 1, 2, 3
# A file system that refuses to write: the user frees space or names another folder; nothing is lost.
DISK_ERRORS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.EPERM, errno.EFBIG}
PERMISSION = {errno.EACCES, errno.EPERM}  # said of a file read as of one written: "open", not "write"
# A path that names no file that can be opened (a folder on its way that is a file, a name too long, a
# folder where a file is wanted): the user names another; evaluation.paths checks the named ones first.
PATH_ERRORS = {errno.ENOTDIR, errno.ENOENT, errno.ENAMETOOLONG, errno.EISDIR, errno.ENXIO, errno.ELOOP}


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, `PROG: error: MESSAGE` with exit status 2: the usage
    and the options are what --help prints."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class Flags(dict):
    """Field name -> the flag a program spells it with."""

    def rewrite(self, message: str) -> str:
        """Replace every backticked field name this program has a flag for by that flag."""
        return re.sub(r"`(\w+)`", lambda m: self.get(m.group(1), m.group(0)), message)


def parse_budget(text: str) -> int | str:
    """A budget as a command line spells it: an integer or "auto" (checked by pipeline.config.check_budget)."""
    text = text.strip()
    return AUTO if text == AUTO else int(text) if text.lstrip("-").isdigit() else text


def parse_token_ids(text: str) -> tuple[int, ...] | str:
    """Token ids as a command line spells them, comma-separated (checked by pipeline.config.check_token_ids; text that is
    not a list of integers is handed on as it is, for that check to name)."""
    items = split_list(text)
    return tuple(int(t) for t in items) if all(t.lstrip("-").isdigit() for t in items) else text


def parse_ints(text: str) -> tuple[int, ...] | str:
    """Integers as a command line spells them, comma-separated; text that is not such a list is handed on as it
    is, for the field's own check to name."""
    items = [item.strip() for item in text.split(",")]
    return tuple(int(t) for t in items) if all(t.lstrip("-").isdigit() for t in items) else text


# Option values of fields whose type is not one word
PARSERS = {"budget": parse_budget, "token_ids": parse_token_ids, "ints": parse_ints}


def flags_of(parser: argparse.ArgumentParser) -> Flags:
    if not hasattr(parser, "flags"):
        parser.flags = Flags()
    return parser.flags


def flag(name: str, prefix: str = "") -> str:
    return "--" + (prefix + name).replace("_", "-")


def _fields(cls: type, skip: tuple[str, ...]):
    """(field, its option words, the embedding field or None) for each option field of `cls`, embedded fields
    expanded."""
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        if "embed" in f.metadata:
            inner = type(f.default_factory())
            for g in dataclasses.fields(inner):
                if g.name in f.metadata["embed"]:
                    yield g, _words(inner, g), f
        else:
            yield f, _words(cls, f), None


def _words(cls: type, f: dataclasses.Field) -> dict:
    """A field's help, metavar and parser: its metadata, or for the pure rules' settings programs.rule_options."""
    return {**f.metadata, **OPTIONS[cls][1].get(f.name, {})} if cls in OPTIONS else dict(f.metadata)


def _title(cls: type) -> str:
    """The title of a dataclass's group of options: programs.rule_options', or its docstring's first line."""
    if cls in OPTIONS:
        return OPTIONS[cls][0]
    return cls.__doc__.strip().splitlines()[0] if cls.__doc__ else cls.__name__


def add_options(parser: argparse.ArgumentParser, cls: type, *, prefix: str = "", skip: tuple[str, ...] = (),
                defaults: dict[str, Any] | None = None, names: dict[str, str] | None = None) -> None:
    """Add one option per field of dataclass `cls` (and of the fields it embeds).
    defaults: shown and parsed defaults that differ from the fields'; names: field -> a flag other than the field's own
    (the launcher's --target for the target's `model`)."""
    group = parser.add_argument_group(_title(cls))
    known = flags_of(parser)
    for f, words, outer in _fields(cls, skip):
        default = (defaults or {}).get(f.name, f.default)
        help_text = ((outer.metadata.get("help") or {}).get(f.name) if outer else None) or words.get("help", "")
        option = (names or {}).get(f.name) or flag(f.name, prefix)
        dest = prefix.replace("-", "_") + f.name
        known.setdefault(f.name, option)
        if words.get("dashed"):
            parser.dashed = getattr(parser, "dashed", set()) | {option}
        if f.type in ("bool", bool):
            if default:
                option = (names or {}).get(f.name) or flag("no_" + f.name, prefix)
                group.add_argument(option, dest=dest, action="store_false", default=True, help=help_text)
            else:
                group.add_argument(option, dest=dest, action="store_true", default=False, help=help_text)
        elif f.type in ("tuple[str, ...]", "list[str]"):
            group.add_argument(option, dest=dest, action="append", default=None,
                               metavar=words.get("metavar", "TEXT"), help=help_text)
        else:  # a required one is shown as required in usage and help; its check stays the field's
            kind, required = PARSERS.get(words.get("parse")) or {"int": int, "float": float, "str": str}[f.type], \
                bool(words.get("required"))
            shown = " (required)" if required else "" if default in (None, "", (), dataclasses.MISSING) else \
                f" (default: {','.join(map(str, default)) if isinstance(default, tuple) else default})"
            group.add_argument(option, dest=dest, type=kind, default=None if required else default, required=required,
                               help=help_text + shown, metavar=words.get("metavar", f.name.split("_")[-1].upper()))


def from_options(parser: argparse.ArgumentParser, ns: argparse.Namespace, cls: type, *, prefix: str = "",
                 skip: tuple[str, ...] = (), names: dict[str, str] | None = None, **extra: Any):
    """Build `cls` (and what it embeds) from parsed options; a ConfigError becomes a usage error naming the flag."""
    values: dict[str, Any] = dict(extra)
    embedded: dict[str, dict[str, Any]] = {}
    for f, _, outer in _fields(cls, skip):
        if outer is None and f.name in extra:
            continue
        value = getattr(ns, prefix.replace("-", "_") + f.name)
        if f.type in ("tuple[str, ...]", "list[str]"):
            empty = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            value = tuple(empty if value is None else value)
        if outer is None:
            values[f.name] = value
        else:
            embedded.setdefault(outer.name, {})[f.name] = value
    local = Flags({**flags_of(parser), **{k: v for k, v in (names or {}).items()}})
    if prefix:
        local.update({f.name: flag(f.name, prefix) for f, _, _ in _fields(cls, skip)})
    try:
        return _construct(cls, values, embedded)
    except ConfigError as e:
        parser.error(local.rewrite(str(e)))


def build(cls: type, **values: Any):
    """`cls` from flat field values, as its flags would give them (embedded fields by their own names)."""
    own, embedded = {}, {}
    inner = {f.name: outer.name for f, _, outer in _fields(cls, ()) if outer is not None}
    for name, value in values.items():
        if name in inner:
            embedded.setdefault(inner[name], {})[name] = value
        else:
            own[name] = value
    return _construct(cls, own, embedded)


def _construct(cls: type, values: dict[str, Any], embedded: dict[str, dict[str, Any]]):
    for name, kwargs in embedded.items():
        base = values.get(name) or next(f.default_factory() for f in dataclasses.fields(cls) if f.name == name)
        values[name] = dataclasses.replace(base, **kwargs)
    return cls(**values)


def to_argv(obj: Any, *, prefix: str = "", skip: tuple[str, ...] = ()) -> list[str]:
    """The options that rebuild `obj` through add_options/from_options."""
    argv: list[str] = []
    for f, _, outer in _fields(type(obj), skip):
        value = getattr(getattr(obj, outer.name), f.name) if outer else getattr(obj, f.name)
        if f.type in ("bool", bool):
            if value != f.default:
                argv.append(flag(("no_" if f.default else "") + f.name, prefix))
        elif f.type in ("tuple[str, ...]", "list[str]"):
            for item in value:
                argv += _option(flag(f.name, prefix), str(item))
        elif f.type == "tuple[int, ...]":
            if value:
                argv += [flag(f.name, prefix), ",".join(str(v) for v in value)]
        else:
            argv += _option(flag(f.name, prefix), str(value))
    return argv


def _option(name: str, value: str) -> list[str]:
    """`name value`, glued as `name=value` where the value starts with '-' (a key, a prompt): argparse would
    read it as a flag."""
    return [f"{name}={value}"] if value.startswith("-") else [name, value]


_A_FLAG = re.compile(r"-[A-Za-z]|--[a-z][a-z0-9-]*(=.*)?", re.S)


def args_of(parser: argparse.ArgumentParser, argv: list[str] | None) -> list[str]:
    """`argv` (or the command line) with the value after a flag whose field says `{"dashed": True}` glued
    to it (`--drafter-key=-VX...`) where it starts with '-' but is no flag: a Z85 key may start with '-', and
    argparse would read it as a flag and say the option expects an argument."""
    argv = list(sys.argv[1:] if argv is None else argv)
    dashed = getattr(parser, "dashed", set())
    for i in range(len(argv) - 2, -1, -1):
        if argv[i] in dashed and argv[i + 1].startswith("-") and not _A_FLAG.fullmatch(argv[i + 1]):
            argv[i:i + 2] = [f"{argv[i]}={argv[i + 1]}"]
    return argv


def add_endpoint(parser: argparse.ArgumentParser, help_text: str, required: bool = True) -> None:
    parser.add_argument("--endpoint", required=required, metavar="ADDR",
                        help=help_text + (" (required)" if required else ""))
    flags_of(parser)["endpoint"] = "--endpoint"


def endpoint_option(parser: argparse.ArgumentParser, text: str) -> str:
    """A checked --endpoint value, or a usage error."""
    try:
        from protocol.transport import check_endpoint  # ZeroMQ's: a GPU image's training runs without pyzmq

        return check_endpoint(text)
    except ValueError as e:
        parser.error(flags_of(parser).rewrite(str(e)))


def option_values(obj: Any) -> dict[str, Any]:
    """Field -> value of an options dataclass, embedded fields flattened in: what its flags set."""
    return {f.name: getattr(getattr(obj, outer.name), f.name) if outer else getattr(obj, f.name)
            for f, _, outer in _fields(type(obj), ())}


class _Formatter(logging.Formatter):
    """`[prog] message`, with the level named for warnings and errors."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else record.levelname.lower() + ": "
        return f"[{self.prog}] {level}{record.getMessage()}"


class Stderr(logging.StreamHandler):
    """A handler that writes to whatever sys.stderr is when it writes (tests and notebooks swap it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(prog: str, level: str = "INFO") -> None:
    """Logs on stderr, one line each, prefixed with the program's name."""
    handler = Stderr()
    handler.setFormatter(_Formatter(prog))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def run_program(body: Callable[[], int], flags: Flags) -> int:
    """Run a program's body; an error the user or the peer caused becomes one log line and an exit code."""
    log = logging.getLogger("program")
    try:
        with woken_by_signals():  # a stop request ends a socket wait however it lands
            return body()
    except InputError as e:  # bad values, prompts, models, sizes, files or devices
        log.error("%s", flags.rewrite(str(e)))
        return EXIT_USAGE
    except (ProtocolError, PeerDied, PeerTimeout) as e:
        log.error("%s: %s", type(e).__name__, flags.rewrite(str(e)))
        return EXIT_PEER
    except BrokenPipeError:  # stdout's reader left (`| head`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush does not complain
        return 128 + signal.SIGPIPE
    except OSError as e:
        if e.errno not in DISK_ERRORS and not (e.errno in PATH_ERRORS and e.filename):
            raise
        verb = "cannot use" if e.errno in PATH_ERRORS else "cannot open" if e.errno in PERMISSION else "cannot write"
        log.error("%s %s: %s", verb, e.filename or "a file (the system did not say which)", e.strerror)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    finally:
        ending()  # a stop signal from here on ends the process quietly, wherever the teardown is


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit -> the soft limit now.
    A drafter holds a descriptor for every connection, those still in their handshake too: at the common soft limit of
    1024, a thousand connections that never finish their handshake would keep targets out until they time out
    (protocol.transport.HANDSHAKE_IVL_MS), and make the model's own files fail to open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as e:  # a system maximum below the hard limit (macOS's OPEN_MAX)
            logging.getLogger("program").debug("open-file limit kept at %d: %s", soft, e)
    return soft


@contextmanager
def uninterrupted(*signums: int) -> Iterator[None]:
    """Run the block whole (main thread only): these signals, arriving meanwhile, take effect as it ends. A stop request
    raised inside ZeroMQ's teardown leaves a context half shut, and the interpreter's exit then waits on it forever."""
    arrived: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)  # None: a handler set outside Python
        if arrived:
            signal.raise_signal(arrived[0])


def parse_program(parser: argparse.ArgumentParser, argv: list[str] | None, cls: type, prog: str):
    """A program's command line as its options dataclass, with its logs set up -> (namespace, options)."""
    ns = parser.parse_args(args_of(parser, argv))
    options = from_options(parser, ns, cls)
    setup_logging(prog, ns.log_level)
    return ns, options


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_log_level(parser: argparse.ArgumentParser, default: str = "INFO") -> None:
    parser.add_argument("--log-level", default=default, type=str.upper, choices=LOG_LEVELS,
                        help=f"what reaches stderr (default: {default})")


def files_program(prog: str, description: str, cls: type, *positionals: tuple[str, dict]) -> argparse.ArgumentParser:
    """The parser of a program over files (a report, an export): its positional arguments (name, argparse
    keywords), the options of `cls` and --log-level."""
    parser = Parser(prog=prog, description=description)
    for name, kw in positionals:
        parser.add_argument(name, **kw)
    add_options(parser, cls)
    add_log_level(parser)
    return parser


def run_files_program(parser: argparse.ArgumentParser, argv: list[str] | None, cls: type,
                      body: Callable[[argparse.Namespace, Any], int]) -> int:
    """Parse, set up logging under the program's last word, and run body(namespace, options) through
    run_program (its errors as one line and an exit status)."""
    ns, options = parse_program(parser, argv, cls, parser.prog.split()[-1])
    return run_program(lambda: body(ns, options), flags_of(parser))
