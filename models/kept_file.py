"""One JSON file of what a machine measured once (the CPU linear kernels' choice, budget auto's pass timings),
read by later starts: entries under keys of what they depend on, in {"format": N, "entries": [...]}. Writers
merge under a lock and replace the file whole; a file that cannot be read, or is not such a file, is named in one
warning and ignored, and what it would have held is measured again."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class KeptFile:
    """One such file: `read` its entries, `add` new ones. A subclass names what it holds (`noun`), what a
    refused file costs (`redo`), and parses (`entries`) and writes (`document`) its format."""

    noun = "the file"
    redo = "what it holds is measured again"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def entries(self, document) -> dict:
        """The entries of a parsed file; ValueError, TypeError or KeyError for anything else."""
        raise NotImplementedError

    def document(self, entries: dict) -> dict:
        raise NotImplementedError

    def read(self) -> dict:
        """Every entry in the file; {} (with a warning naming the file) for a file that is not one."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            log.warning("%s %s cannot be read (%s); ignoring it: %s", self.noun, self.path,
                        getattr(e, "strerror", None) or e, self.redo)
            return {}
        try:
            return self.entries(json.loads(text))
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            log.warning("%s %s is not one this version wrote (%s); ignoring it: %s and the file rewritten",
                        self.noun, self.path, str(e)[:200], self.redo)
            return {}

    def add(self, entries: dict) -> bool:
        """Merge `entries` into the file (they replace entries under the same keys) -> whether they were kept: a
        file system that refuses is said in a warning, and the entries are only lost for later starts."""
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one writer at a time: each merges what the last one wrote
                merged = {**self._quiet_read(), **entries}
                with open(partial, "w", encoding="utf-8") as f:
                    json.dump(self.document(merged), f, indent=1)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(partial, self.path)  # readers see the old file or the new one, whole
            return True
        except OSError as e:
            with contextlib.suppress(OSError):  # a full disk's half-written copy
                partial.unlink(missing_ok=True)
            log.warning("%s could not be kept in %s (%s): at the next start %s", self.noun, self.path,
                        e.strerror or e, self.redo)
            return False

    def _quiet_read(self) -> dict:
        """What the file holds now, without warning again about a file `read` already named."""
        previous = log.disabled
        log.disabled = True
        try:
            return self.read()
        finally:
            log.disabled = previous
