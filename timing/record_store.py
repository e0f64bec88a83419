"""The sweep's records: one JSON line per decode, durable once written, keyed independently of shards.

A record is appended as one write of a whole line, then fsync'd, so a process killed at any moment leaves
every earlier record intact and at most one torn last line, which reopening drops. A write the file system
refuses (a full disk, a file size limit, a file system turned read-only) cuts the file back to its last
whole record, where it can, and stops the sweep with RecordsUnwritable: rerunning resumes from there."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from evaluation.record import DecodeRecord, UnreadSchema, record_key
from evaluation.rounds_file import files_by_shard
from evaluation.paths import input_file
from pipeline.config import InputError

log = logging.getLogger("timing")

_SHARD_FILE = re.compile(r"records\.shard-(\d+)-of-(\d+)\.jsonl")


class DamagedRecords(InputError):
    """A records file holds a line that is not a record before its last line, or a record twice."""


class OldSchema(DamagedRecords):
    """A record in a format this version no longer reads."""


class RecordsUnwritable(InputError):
    """The file system refused a record; the records before it are intact."""


def records_path(out: str | Path, shard: int, n_shards: int) -> Path:
    return Path(out) / f"records.shard-{shard}-of-{n_shards}.jsonl"


def shard_files(directory: str | Path) -> list[Path]:
    """Every shard's records file in `directory`, in shard order."""
    return files_by_shard(directory, _SHARD_FILE)


def read_records(path: Path, repair: bool = False) -> list[DecodeRecord]:
    """The records of one file. A torn last line (no newline, or not JSON) is dropped, and with `repair`
    cut off the file; damage anywhere else raises DamagedRecords naming the line."""
    if not os.path.lexists(path):
        return []
    input_file(path, "the records file")  # a FIFO would hang the read, /dev/zero fill memory; a dangling link
    data = path.read_bytes()
    records, seen, good = [], set(), 0
    lines = data.split(b"\n")  # the piece after the last newline is b"" for an intact file
    for number, line in enumerate(lines, 1):
        last = number == len(lines) or (number == len(lines) - 1 and lines[-1] == b"")
        if not line and number == len(lines):
            break
        where = f"{path}:{number}"
        try:
            if number == len(lines):  # complete JSON but no newline yet: the write was cut before it
                json.loads(line)
                raise ValueError(f"{where}: no newline")
            record = DecodeRecord.from_json(_json(line, where), where)
        except UnreadSchema as e:
            raise OldSchema(f"{e}; sweep again into a new directory") from None
        except ValueError as e:
            if last:
                log.warning("%s: dropping a torn last line (%d bytes, %s)", path, len(line), e)
                break
            raise DamagedRecords(f"{e}; only the last line may be torn") from None
        key = record_key(record)
        if key in seen:
            raise DamagedRecords(f"{path}:{number}: a second record of decode {key}")
        seen.add(key)
        records.append(record)
        good += len(line) + 1
    if repair and good < len(data):
        with open(path, "r+b") as f:
            f.truncate(good)
            f.flush()
            os.fsync(f.fileno())
    return records


class RecordStore:
    """One shard's records file, opened for appending; `records_by_key` holds the decodes already recorded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # One writer per shard file: a second sweep on the same --out and --shard would append the same
        # decodes again (and its repair of a torn line could cut the first one's record in half).
        self._lock = open(path.with_name(path.name + ".lock"), "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise InputError(f"another sweep is writing {path}; wait for it or use another `out` or `shard`") \
                from None
        self.records = read_records(path, repair=True)
        self.records_by_key = {record_key(r): r for r in self.records}
        new = not path.exists()
        self._file = open(path, "ab", buffering=0)  # unbuffered: nothing is left to write at close
        self._size = os.fstat(self._file.fileno()).st_size  # the end of the last whole record
        if new:
            _fsync_dir(path.parent)  # the file's name must survive a crash as well as its lines

    def __contains__(self, key: tuple) -> bool:
        return key in self.records_by_key

    def append(self, record: DecodeRecord) -> None:
        """Write one record and return only once it is on disk."""
        key = record_key(record)
        if key in self.records_by_key:
            raise ValueError(f"decode {key} is recorded already")
        line = memoryview((json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode())
        try:
            while line:  # a write may take part of the line
                line = line[self._file.write(line):]
            os.fsync(self._file.fileno())
        except OSError as e:
            self._cut_back()
            raise RecordsUnwritable(f"cannot write {self.path}: {e.strerror or e}. The {len(self.records)} "
                                    f"records before it are intact; free space (or name another `out`) and rerun "
                                    f"the same command to resume") from None
        self._size = os.fstat(self._file.fileno()).st_size
        self.records_by_key[key] = record
        self.records.append(record)

    def _cut_back(self) -> None:
        """Drop the part of a line a refused write left (reopening would drop it anyway, as a torn line)."""
        try:
            os.ftruncate(self._file.fileno(), self._size)
        except OSError as e:
            log.warning("%s: could not cut a partial line off (%s); the next run drops it", self.path, e.strerror)

    def close(self) -> None:
        self._file.close()
        self._lock.close()  # releases the lock

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_records(directories: Iterable[str | Path]) -> list[DecodeRecord]:
    """Every record of every shard file in `directories`; a decode found twice raises DamagedRecords."""
    out, where = [], {}
    for directory in directories:
        files = shard_files(directory)
        if not files:
            raise InputError(f"{directory}: no records.shard-I-of-N.jsonl file; is it a sweep's output directory?")
        for path in files:
            for record in read_records(path):
                key = record_key(record)
                if key in where:
                    raise DamagedRecords(f"decode {key} is in both {where[key]} and {path}; report those "
                                         f"directories separately")
                where[key] = path
                out.append(record)
    return out


def _json(line: bytes, where: str) -> object:
    try:
        return json.loads(line)
    except ValueError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
