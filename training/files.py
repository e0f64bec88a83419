"""The training's own files: each written whole or not at all, a write that fails (a full disk) one NotWritten
naming the file, and a file that cannot be read back one ValueError naming it and saying to delete it.

A failed write leaves what was written before it in place (replace_atomically), so the same command resumes
once there is room; --out is refused where it holds a head this run's work folder did not write."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evaluation.paths import refuse_overwrite, replace_atomically
from pipeline.config import InputError

HEAD_FILES = ("config.json", "model.safetensors", "training.json", "loss.png")  # what --out receives


class NotWritten(Exception):
    """A file that could not be written; what was written before it is kept."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}")
        self.path = path


@contextmanager
def written(path: Path) -> Iterator[Path]:
    """A temporary path to write `path` through (replace_atomically); a write that fails is NotWritten naming
    `path`. torch's and safetensors' writers report a full disk as RuntimeError or their own error."""
    from safetensors import SafetensorError

    try:
        with replace_atomically(path) as partial:
            yield partial
    except OSError as e:
        raise NotWritten(path, e.strerror or str(e)) from None
    except (RuntimeError, SafetensorError) as e:
        raise NotWritten(path, str(e).splitlines()[0][:200] if str(e) else type(e).__name__) from None


def write_json(path: Path, value, indent: int | None = None) -> None:
    with written(path) as partial:
        partial.write_text(json.dumps(value, indent=indent) + "\n")


def read_json(path: Path, remedy: str = "delete it") -> dict:
    """The map a JSON file of this program holds ({} where there is none); ValueError naming the file and
    `remedy` where it is damaged."""
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}); {remedy}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is damaged (it holds a {type(value).__name__}, not a map); {remedy}")
    return value


def check_folder(path: Path, flag: str) -> None:
    """InputError naming `flag` where `path` cannot be a folder to write in: checked before any work, made only
    when it is written to."""
    held = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    if held.is_symlink() and not held.exists():
        raise InputError(f"{flag} {path}: {held} is a link to a file that does not exist")
    if not held.is_dir():
        raise InputError(f"{flag} {path}: {held} is a file, not a directory")


def check_out(out: Path, work: Path, overwrite: bool) -> None:
    """InputError naming --out and --overwrite (evaluation.paths.refuse_overwrite) where `out` holds a head's files that
    the run of `work` did not write (its training.json names the work folder it was trained in): another head is never
    lost to a run that did not ask for it, and a run's own head is written again when it resumes."""
    check_folder(out, "--out")
    try:
        own = json.loads((out / "training.json").read_text()).get("work") == str(work.resolve())
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        own = False
    refuse_overwrite([out / name for name in HEAD_FILES], overwrite or own, "--out NEW_DIR")
