"""The one check of the paths a command names, made before any process starts (docs/decoding.md): a file that is
read must be a regular file, and where an output goes a folder must be makeable and a file writable; each problem
is an InputError of one line naming the path and the flag that named it (exit status 2).

`refuse_overwrite` is the one check every writer makes, before any work, so that a command never writes over a
file it did not just write; `replace_atomically` keeps a failed write from leaving a partial file behind."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.config import InputError

NAME_MAX = 255  # bytes of one path component, where the file system does not say


def input_file(path: str | Path, what: str) -> Path:
    """`path` as a regular file this process may read; InputError naming `what` otherwise."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise InputError(f"{what} {str(path)!r} {_missing(path, e)}") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {str(path)!r} is {_kind(mode)}, not a regular file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{what} {str(path)!r} cannot be read: permission denied")
    return path


def output_dir(path: str | Path, what: str) -> Path:
    """`path` as a folder that exists or is made now, where files can be written; InputError naming `what` otherwise."""
    path = Path(path)
    _check_names(path, what)
    if os.path.lexists(path) and not path.exists():
        raise InputError(f"{what} {path} is a link to {os.readlink(path)}, which does not exist")
    if path.exists() and not path.is_dir():
        raise InputError(f"{what} {path} is not a directory: it is {_kind(os.stat(path).st_mode)}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{what} {path} cannot be made: {_reason(e)}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{what} {path} is a directory this process cannot write in")
    return path


def output_file(path: str | Path, what: str) -> Path:
    """`path` as a file that can be written (its folder made now if missing; an existing file must be a
    regular, writable one); InputError naming `what` otherwise."""
    path = Path(path)
    _check_names(path, what)
    if os.path.lexists(path):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise InputError(f"{what} {path} is a link to {os.readlink(path)}, which does not exist") from None
        if not stat.S_ISREG(mode):
            raise InputError(f"{what} {path} is {_kind(mode)}, not a regular file")
        if not os.access(path, os.W_OK):
            raise InputError(f"{what} {path} cannot be written: permission denied")
        return path
    output_dir(path.parent, f"the folder of {what}")
    return path


def refuse_overwrite(paths: Iterable[str | Path], overwrite: bool, elsewhere: str) -> None:
    """InputError when one of `paths`, the files a command is about to write, exists already (a report, figures
    or answers written before, perhaps committed) and `overwrite` is not set. `elsewhere` names the option that
    writes them somewhere else, with its value's form ("--out NEW_DIR")."""
    held = [Path(p) for p in paths if os.path.lexists(p)]
    if not held or overwrite:
        return
    by_folder: dict[Path, list[str]] = {}
    for p in held:
        by_folder.setdefault(p.parent, []).append(p.name)
    what = "; ".join(f"{folder} holds {', '.join(names)}" for folder, names in by_folder.items())
    raise InputError(f"{what} already; write elsewhere ({elsewhere}) or give --overwrite to write over "
                     f"{'it' if len(held) == 1 else 'them'}")


@contextmanager
def replace_atomically(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write; renamed onto `path` when the block ends without error, removed
    otherwise, so that a failed write (a full disk) leaves neither a partial file nor an empty one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _check_names(path: Path, what: str) -> None:
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise InputError(f"{what} {str(path)[:60]}...: a name in it is {len(os.fsencode(part))} bytes long; "
                             f"a file system takes at most {NAME_MAX}")


def _missing(path: Path, e: OSError) -> str:
    if e.errno == errno.ENOENT and os.path.lexists(path):
        return f"is a link to {os.readlink(path)}, which does not exist"
    return {errno.ENOENT: "does not exist", errno.ENOTDIR: "does not exist (a directory on its way is a file)",
            errno.EACCES: "cannot be read: permission denied"}.get(e.errno, f"cannot be read: {e.strerror}")


def _reason(e: OSError) -> str:
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return "a directory on its way is a file"
    return e.strerror or str(e)


def _kind(mode: int) -> str:
    """What a file is, in words."""
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"
