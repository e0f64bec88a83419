"""Rounds files: a shard's recorded rounds as a log of chunks that a reader can trust (DESIGN.md section 8).

`rounds.shard-I-of-N.bin` is a run of chunks, each `SPR1`, the payload's length (uint64, little-endian), its
CRC-32 (uint32) and the payload (evaluation.rounds). The first chunk holds the run's provenance (`kind` "run");
each later one a whole decode (`kind` "decode"). A chunk is appended with one write and an fsync before the
decode's record, so a decode with a record has its rounds, and a decode recorded twice (a resumed decode that
had no record yet) is read as its last chunk.

Reading never takes damage for the end of the file. A chunk whose length, checksum or contents are wrong is
named (file, byte offset, the decode it held when its payload still says) and skipped, and reading goes on at
the next whole chunk; a chunk whose length field alone is wrong is read back whole, its payload's checksum
proving it. Only an unreadable tail with nothing whole after it (a process killed mid-write) ends the file,
and it is named too. Reopening a shard to append moves such a tail into a file beside it before cutting it
off, repairs length fields proven wrong, and leaves damage in the middle where it is: nothing is lost.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from evaluation.rounds import (SCHEMA, DamagedRounds, RecordedDecode, RecordedRound, decode_chunk, decode_key,
                               encode_decode, key_text, unpack)
from pipeline.config import InputError

MAGIC = b"SPR1"
HEAD = struct.Struct("<4sQI")  # magic, payload length, CRC-32 of the payload
MAX_CHUNK = 1 << 34  # a decode's rounds: far beyond any real one, small enough to refuse a corrupt length
_FILE = re.compile(r"rounds\.shard-(\d+)-of-(\d+)\.bin")


def rounds_path(out: str | Path, shard: int, n_shards: int) -> Path:
    return Path(out) / f"rounds.shard-{shard}-of-{n_shards}.bin"


def round_files(directory: str | Path) -> list[Path]:
    """Every shard's rounds file in `directory`, in shard order."""
    return files_by_shard(directory, _FILE)


def files_by_shard(directory: str | Path, name: re.Pattern) -> list[Path]:
    """The files of `directory` whose names match `name` (groups: shard I, count N), ordered by N then I."""
    found = [(tuple(map(int, m.groups()))[::-1], p) for p in Path(directory).iterdir()
             if (m := name.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def frame(payload: bytes) -> bytes:
    return HEAD.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


@dataclass(frozen=True, slots=True)
class Damage:
    """A stretch of a rounds file that did not read as a whole, valid chunk."""

    path: Path
    start: int  # byte offsets [start, end)
    end: int
    reason: str
    decode: str = ""  # the decode it held, in words, when its payload still says; else its neighbours
    tail: bool = False  # nothing whole follows it: a torn last chunk (or damage at the very end)
    recovered: bool = False  # only its length field was wrong: the chunk was read back whole

    def __str__(self) -> str:
        where = f"{self.path}: bytes {self.start}-{self.end}"
        what = f" ({self.decode})" if self.decode else ""
        if self.recovered:
            return f"{where}{what}: {self.reason}; its payload's checksum holds, so it was read whole"
        if self.tail:
            return (f"{where}{what}: {self.reason}; a torn last chunk, dropped (the decode it held runs again when "
                    f"the sweep resumes, unless it has a record: `values --check` lists those)")
        return f"{where}{what}: {self.reason}; skipped, the chunks after it are read"


@dataclass(slots=True)
class Scan:
    """A file's whole chunks (offset, payload) and the damage between and after them."""

    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    repairs: list[tuple[int, int]] = field(default_factory=list)  # (offset, true payload length) of recovered chunks


def _frame_at(data: bytes, at: int) -> tuple[int, bytes] | str:
    """(end, payload) of the whole, valid chunk at `at`, or why there is none."""
    if len(data) - at < HEAD.size:
        return "a torn chunk head"
    magic, length, crc = HEAD.unpack_from(data, at)
    if magic != MAGIC:
        return "no chunk starts there"
    end = at + HEAD.size + length
    if length > MAX_CHUNK or end > len(data):
        return f"its length field ({length}) runs past the end of the file"
    payload = data[at + HEAD.size: end]
    if zlib.crc32(payload) != crc:
        return "it fails its checksum"
    return end, payload


def _next_frame(data: bytes, start: int) -> int:
    """The offset of the first whole, valid chunk at or after `start`; len(data) when there is none."""
    at = data.find(MAGIC, start)
    while at >= 0:
        if not isinstance(_frame_at(data, at), str):
            return at
        at = data.find(MAGIC, at + 1)
    return len(data)


def scan(path: Path, data: bytes) -> Scan:
    """Every whole chunk of a file's bytes, resynchronising after damage at the next chunk."""
    out, at = Scan(), 0
    while at < len(data):
        found = _frame_at(data, at)
        if not isinstance(found, str):
            out.chunks.append((at, found[1]))
            at = found[0]
            continue
        valid = _next_frame(data, at + 1)
        end = _recovered_end(data, at, valid)
        if end is not None:  # the length field alone is wrong: the checksum proves the payload
            payload = data[at + HEAD.size: end]
            out.chunks.append((at, payload))
            out.repairs.append((at, len(payload)))
            out.damage.append(Damage(path, at, end, found, _named(payload), recovered=True))
        else:  # up to the next chunk head, whole or not: a damaged neighbour is a stretch of its own
            nxt = data.find(MAGIC, at + 1, valid)
            end = valid if nxt < 0 else nxt
            out.damage.append(Damage(path, at, end, found, _named(data[at + HEAD.size: end]), tail=end == len(data)))
        at = end
    return out


def _recovered_end(data: bytes, at: int, limit: int) -> int | None:
    """Where the chunk at `at` ends when its payload, up to a later chunk head (or `limit`), matches the checksum
    of its head: the end of a chunk whose length field alone was damaged; None otherwise."""
    if data[at: at + 4] != MAGIC or len(data) - at < HEAD.size:
        return None
    crc = HEAD.unpack_from(data, at)[2]
    end = data.find(MAGIC, at + HEAD.size, limit)
    while end >= 0:
        if zlib.crc32(data[at + HEAD.size: end]) == crc:
            return end
        end = data.find(MAGIC, end + 1, limit)
    return limit if zlib.crc32(data[at + HEAD.size: limit]) == crc else None


def _named(payload: bytes) -> str:
    """The decode a damaged chunk held, in words, when its payload still decodes far enough to say."""
    try:
        body = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        return f"decode {key_text(body['key'])}" if isinstance(body.get("key"), dict) else ""
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, msgpack.FormatError,
            msgpack.StackError):
        return ""  # damaged beyond saying


@dataclass(slots=True)
class RoundsFile:
    """What one rounds file holds: the run's provenance, its decodes and what could not be read."""

    path: Path
    provenance: dict
    decodes: list[RecordedDecode]
    damage: list[Damage]
    recording: dict = field(default_factory=dict)  # how the rounds were recorded (the run chunk's `recording`)


def read_rounds(path: Path) -> RoundsFile:
    """The provenance and the decodes of one rounds file (the last chunk of a decode recorded twice); damaged
    chunks are left out and listed in `damage`. DamagedRounds when the file holds no whole chunk at all."""
    with open(path, "rb") as f:
        data = f.read()
    found = scan(path, data)
    if not found.chunks:
        raise DamagedRounds(f"{path}: no whole chunk; empty, or not a rounds file")
    damage, head, decodes = list(found.damage), None, {}
    for i, (at, payload) in enumerate(found.chunks):
        where = f"{path} byte {at}"
        try:
            body = unpack(payload, where)
            if body["kind"] == "run":
                if i:
                    raise DamagedRounds(f"{where}: a second provenance chunk")
                head = body
                continue
            d = decode_chunk(body, where)
        except DamagedRounds as e:
            damage.append(Damage(path, at, at + HEAD.size + len(payload), str(e).removeprefix(where).lstrip(": "),
                                 _named(payload)))
            continue
        decodes[decode_key(d.key)] = d
    if head is None:
        damage.append(Damage(path, 0, 0, "the run's provenance chunk is missing or damaged"))
    damage.sort(key=lambda d: d.start)
    return RoundsFile(path, (head or {}).get("provenance", {}), list(decodes.values()), damage,
                      (head or {}).get("recording") or {})


class RoundStore:
    """One shard's rounds file, opened for appending (the shard's records lock covers it).

    notes: what reopening found and did (a torn tail moved aside and cut off, length fields repaired, damage
    left in place), one line each, for the caller to log.
    """

    def __init__(self, path: Path, provenance: dict, recording: dict | None = None) -> None:
        self.path = path
        self.notes: list[str] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size:
            self._reopen()
        self._file = open(path, "ab", buffering=0)
        if self._file.tell() == 0:
            self._write(frame(msgpack.packb({"kind": "run", "schema": SCHEMA, "provenance": provenance,
                                             "recording": recording or {}}, use_bin_type=True)))

    def _reopen(self) -> None:
        """Make the file safe to append to, losing nothing: see the class docstring."""
        with open(self.path, "rb") as f:
            data = f.read()
        found = scan(self.path, data)
        with open(self.path, "r+b") as f:
            for at, length in found.repairs:
                f.seek(at + 4)
                f.write(struct.pack("<Q", length))
                self.notes.append(f"{self.path}: the chunk at byte {at} had a wrong length field; repaired from its "
                                  f"checksum")
            tails = [d for d in found.damage if d.tail and not d.recovered]
            if tails:
                aside = self.path.with_name(f"{self.path.name}.torn-at-{tails[0].start}")
                aside.write_bytes(data[tails[0].start:])
                f.truncate(tails[0].start)
                self.notes.append(f"{self.path}: {len(data) - tails[0].start} unreadable bytes at its end "
                                  f"({tails[0].reason}) moved to {aside.name} and cut off; the decode they held "
                                  f"runs again unless it has a record")
            f.flush()
            os.fsync(f.fileno())
        for d in found.damage:
            if not d.tail and not d.recovered:
                self.notes.append(f"{d}; left in place (`values --check` lists what it lost)")

    def append(self, key: dict, rounds: list[RecordedRound], prompt_tokens: int = -1) -> None:
        """Write one decode's rounds and return once they are on disk."""
        self._write(frame(encode_decode(key, rounds, prompt_tokens)))

    def _write(self, data: bytes) -> None:
        size = self._file.tell()
        view = memoryview(data)
        try:
            while view:
                view = view[self._file.write(view):]
            os.fsync(self._file.fileno())
        except OSError as e:
            try:
                os.ftruncate(self._file.fileno(), size)
            except OSError:
                pass  # reopening moves a torn last chunk aside anyway
            raise InputError(f"cannot write {self.path}: {e.strerror or e}; the decodes before it are intact, "
                             f"free space and rerun the same command to resume") from None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RoundStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_rounds(directories: Iterable[str | Path]) -> Iterator[RoundsFile]:
    """Every rounds file in `directories`, read (see read_rounds)."""
    for directory in directories:
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError(f"{directory}: not a directory; give the run's output directory")
        files = round_files(directory)
        if not files:
            raise InputError(f"{directory}: no rounds.shard-I-of-N.bin file; was the run made with "
                             f"--record-rounds?")
        for path in files:
            yield read_rounds(path)
