"""The CPU linear kernels chosen on this machine, kept in one JSON file so that a start reuses them.

A choice (one kernel per row class) is kept under what it depends on: the processor, the thread count, the
torch version, the dtype, the weight's shape (and bias), the row classes and the kernels offered. Writers merge
under a lock and replace the file whole; a file that cannot be read is named in a warning and ignored, and the
kernels timed again (models.kept_file). `$SPECPAIR_KERNEL_CACHE` names another file; by default it lies beside
the converted default model (models.cache_root)."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

from models.cache_root import cache_root
from models.kept_file import KeptFile

FORMAT = 1
FILE_NAME = "linear-kernels.json"
ENV = "SPECPAIR_KERNEL_CACHE"


@dataclass(frozen=True, slots=True)
class Key:
    """What a kernel choice depends on."""

    cpu: str
    threads: int
    torch: str
    dtype: str
    shape: str  # "OUTxIN", with " with bias" for layers with a bias
    rows: tuple[int, ...]  # the row classes, in order
    kernels: tuple[str, ...]  # the kernels offered

    def __post_init__(self) -> None:
        texts = (self.cpu, self.torch, self.dtype, self.shape)
        if not (all(isinstance(t, str) for t in texts) and isinstance(self.threads, int) and self.threads > 0
                and all(isinstance(r, int) and r > 0 for r in self.rows)
                and all(isinstance(k, str) for k in self.kernels)):
            raise ValueError(f"not a kernel choice's key: {self!r:.200}")


def processor() -> str:
    """The processor's model name (/proc/cpuinfo), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    """The CPUs this process may run on (taskset narrows them; os.cpu_count() counts the machine's)."""
    return len(os.sched_getaffinity(0))


def default_path() -> Path:
    return Path(os.environ.get(ENV) or cache_root() / FILE_NAME).expanduser()


class KernelCache(KeptFile):
    """One cache file: `read` the choices it holds, `add` new ones (models.kept_file)."""

    noun = "the linear kernel cache"
    redo = "the kernels are timed again"

    def __init__(self, path: Path | str | None = None) -> None:
        super().__init__(path if path is not None else default_path())

    def entries(self, document) -> dict[Key, tuple[str, ...]]:
        return _entries(document)

    def document(self, entries: dict[Key, tuple[str, ...]]) -> dict:
        return _document(entries)


def _entries(document) -> dict[Key, tuple[str, ...]]:
    """The choices of a parsed file; ValueError, TypeError or KeyError for anything else."""
    if not isinstance(document, dict) or document.get("format") != FORMAT or not isinstance(document["entries"], list):
        raise ValueError(f"expected an object with \"format\": {FORMAT} and a list of \"entries\"")
    out = {}
    for i, entry in enumerate(document["entries"]):
        if not isinstance(entry, dict) or set(entry) != {"key", "choice"} or not isinstance(entry["key"], dict):
            raise ValueError(f"entry {i} is not {{\"key\": {{...}}, \"choice\": [...]}}")
        fields = dict(entry["key"])
        key = Key(**{**fields, "rows": tuple(fields["rows"]), "kernels": tuple(fields["kernels"])})
        choice = entry["choice"]
        if not (isinstance(choice, list) and len(choice) == len(key.rows) and all(c in key.kernels for c in choice)):
            raise ValueError(f"entry {i}'s choice {choice!r:.100} is not one of its kernels per row class")
        out[key] = tuple(choice)
    return out


def _document(choices: dict[Key, tuple[str, ...]]) -> dict:
    entries = [{"key": {**asdict(k), "rows": list(k.rows), "kernels": list(k.kernels)}, "choice": list(c)}
               for k, c in choices.items()]
    return {"format": FORMAT, "entries": entries}
