"""Rounds files: a shard's recorded rounds as a log of chunks that a reader can trust (DESIGN.md section 8).

`rounds.shard-I-of-N.bin` is a run of chunks, each `SPR1`, the payload's length (uint64, little-endian), its
CRC-32 (uint32) and the payload (evaluation.rounds). The first chunk holds the run's provenance (`kind` "run");
each later one a whole decode (`kind` "decode"), appended with one write and an fsync before the decode's record.
Since schema 3 every chunk carries the identity of its run (evaluation.run_identity). docs/values.md says what
reading names, skips and sets aside (damaged, impossible, foreign or repeated chunks, a torn tail) and what
reopening a shard repairs: nothing is lost."""

from __future__ import annotations

import lzma
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from evaluation.paths import input_file, output_file
from evaluation.rounds import (SCHEMA, DamagedRounds, RecordedDecode, RecordedRound, decode_chunk, decode_key,
                               encode_decode, key_text, unpack)
from evaluation.run_identity import RunIdentity, differences, run_identity
from pipeline.config import InputError

MAGIC = b"SPR1"
HEAD = struct.Struct("<4sQI")  # magic, payload length, CRC-32 of the payload
MAX_CHUNK = 1 << 34  # a decode's rounds: far beyond any real one, small enough to refuse a corrupt length
_FILE = re.compile(r"rounds\.shard-(\d+)-of-(\d+)\.bin(?:\.xz)?")  # .xz: packed for committing, read as it is


def rounds_path(out: str | Path, shard: int, n_shards: int) -> Path:
    return Path(out) / f"rounds.shard-{shard}-of-{n_shards}.bin"


def records_beside(path: Path) -> Path:
    """The records file of the shard whose rounds file is `path`."""
    shard, n_shards = _FILE.fullmatch(path.name).groups()
    return path.with_name(f"records.shard-{shard}-of-{n_shards}.jsonl")


def round_files(directory: str | Path) -> list[Path]:
    """Every shard's rounds file in `directory` (`.bin`, or `.bin.xz` as committed), in shard order."""
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
    aside: bool = False  # a whole chunk of another run, or of a decode read already: not this run's data
    superseded: bool = False  # a decode's earlier chunk in its file; the later one is read
    cut: bool = False  # the file ends on a chunk boundary before decodes its records list
    key: tuple | None = None  # the decode's key (decode_key) when the chunk read far enough to say

    @property
    def problem(self) -> bool:
        """Whether it lost (or kept out) rounds: all but a recovered chunk and a superseded one."""
        return not (self.recovered or self.superseded)

    def __str__(self) -> str:
        where = f"{self.path}: bytes {self.start}-{self.end}" if not self.cut else f"{self.path}: byte {self.start}"
        what = f" ({self.decode})" if self.decode else ""
        if self.recovered:
            return f"{where}{what}: {self.reason}; its payload's checksum holds, so it was read whole"
        if self.aside:
            return f"{where}{what}: {self.reason}; set aside, not read"
        if self.superseded:
            return f"{where}{what}: {self.reason}; the later chunk is read (a decode resumed before its record)"
        if self.cut:
            return f"{where}: {self.reason}"
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
    """What one rounds file holds: the run's provenance, its decodes and what could not be read.
    spans: each decode's chunk, (start, end) byte offsets, in the order of `decodes`; run: the identity of the run that
    wrote it (None when neither its run chunk nor any decode chunk says); size: its bytes."""

    path: Path
    provenance: dict
    decodes: list[RecordedDecode]
    damage: list[Damage]
    recording: dict = field(default_factory=dict)  # how the rounds were recorded (the run chunk's `recording`)
    spans: list[tuple[int, int]] = field(default_factory=list)
    run: RunIdentity | None = None
    size: int = 0

    def set_aside(self, index: int, reason: str) -> None:
        """Move decode `index` out of the data into `damage`, named with `reason`."""
        d, (start, end) = self.decodes.pop(index), self.spans.pop(index)
        self.damage.append(Damage(self.path, start, end, reason, f"decode {key_text(d.key)}", aside=True,
                                  key=decode_key(d.key)))


def read_bytes(path: Path) -> bytes:
    """The bytes of the rounds file `path`, unpacked on the fly when it is `.xz` (byte offsets in messages are
    then offsets in the unpacked file). DamagedRounds when the packing itself is damaged."""
    if path.suffix != ".xz":
        return path.read_bytes()
    try:
        return lzma.decompress(path.read_bytes())
    except lzma.LZMAError as e:
        raise DamagedRounds(f"{path}: not a whole .xz file ({e}); unpack what remains with xz -dc") from None


def read_rounds(path: Path) -> RoundsFile:
    """The provenance and the decodes of one rounds file (the last chunk of a decode recorded twice); damaged,
    impossible and foreign chunks are left out and listed in `damage`. DamagedRounds when the file holds no
    whole chunk at all."""
    input_file(path, "the rounds file")  # a FIFO would hang the read, /dev/zero fill memory
    data = read_bytes(path)
    found = scan(path, data)
    if not found.chunks:
        raise DamagedRounds(f"{path}: no whole chunk; empty, or not a rounds file")
    damage, head, run, decodes = list(found.damage), None, None, {}
    for i, (at, payload) in enumerate(found.chunks):
        where, end, d = f"{path} byte {at}", at + HEAD.size + len(payload), None
        try:
            body = unpack(payload, where)
            if body["kind"] == "run":
                if i:
                    raise DamagedRounds(f"{where}: a second provenance chunk")
                head, run = body, _identity(body, where) or run_identity(body["provenance"])
                continue
            d = decode_chunk(body, where)
            own = _identity(body, where)
            if own is None and head is not None and head["schema"] >= 3:
                raise DamagedRounds(f"{where}: a schema {body['schema']} chunk in a file of schema "
                                    f"{head['schema']}: it names no run")
            if own is not None and run is not None and own != run:
                damage.append(Damage(path, at, end, f"of another run (run {own.id}) than its file's (run {run.id})",
                                     f"decode {key_text(d.key)}", aside=True, key=decode_key(d.key)))
                continue
            run = run or own
            if run is not None and (problem := run.problem(d)):
                raise DamagedRounds(f"{where}: impossible for its run: {problem}")
        except DamagedRounds as e:
            damage.append(Damage(path, at, end, str(e).removeprefix(where).lstrip(": "), _named(payload),
                                 key=None if d is None else decode_key(d.key)))
            continue
        key = decode_key(d.key)
        if key in decodes:
            damage.append(Damage(path, *decodes[key][1], "a later chunk of the same decode follows",
                                 f"decode {key_text(d.key)}", superseded=True, key=key))
        decodes[key] = d, (at, end)
    if head is None:
        damage.append(Damage(path, 0, 0, "the run's provenance chunk is missing or damaged"))
    damage.sort(key=lambda d: d.start)
    return RoundsFile(path, (head or {}).get("provenance", {}), [d for d, _ in decodes.values()], damage,
                      (head or {}).get("recording") or {}, [s for _, s in decodes.values()], run, len(data))


def _identity(body: dict, where: str) -> RunIdentity | None:
    """A chunk's run identity (schema 3); None for a chunk written before chunks carried one."""
    if body["schema"] < 3:
        return None
    try:
        return RunIdentity.from_dict(body.get("run"))
    except (ValueError, TypeError) as e:
        raise DamagedRounds(f"{where}: {e}") from None


def ends_early(found: RoundsFile, recorded: Sequence[tuple]) -> Damage | None:
    """A line for a file that ends on a chunk boundary before the rounds of decodes its shard's records list
    (`recorded`: the timed records' decode keys, in the records file's order); None when it does not. A chunk
    is written just before its record, so a record after the last one whose decode the file holds is a
    decode whose chunk went missing at the file's end."""
    if any(d.tail for d in found.damage):
        return None  # the torn tail is named already
    held = {decode_key(d.key) for d in found.decodes} | {d.key for d in found.damage}
    last = max((i for i, k in enumerate(recorded) if k in held), default=-1)
    after = list(recorded[last + 1:])
    if not after:
        return None
    return Damage(found.path, found.size, found.size,
                  f"the file ends on a chunk boundary before the rounds of {len(after)} decode(s) its records list "
                  f"(the first: {_key_words(after[0])}); cut short?", cut=True)


def _key_words(key: tuple) -> str:
    """A decode key tuple (decode_key) in the words key_text gives its key."""
    prompt_id, turn, decoder, temperature, budget, seed, _ = key
    return key_text(dict(prompt_id=prompt_id, turn=turn, decoder=decoder, temperature=temperature, budget=budget,
                         seed=seed))


class RoundStore:
    """One shard's rounds file, opened for appending (the shard's records lock covers it).
    vocab: the target's vocabulary size, kept in the run's identity (None: not known, tokens not checked). run: the
    identity every chunk carries: the file's own when it exists already (its provenance's for a file written before
    chunks carried one), else this run's. notes: what reopening found and did (a torn tail moved aside and cut off,
    length fields repaired, damage left in place), one line each, for the caller to log."""

    def __init__(self, path: Path, provenance: dict, recording: dict | None = None, vocab: int | None = None) -> None:
        self.path = path
        self.notes: list[str] = []
        self.run = run_identity(provenance, vocab)
        output_file(path, "the rounds file")  # its directory made; a FIFO, a device or a dangling link refused
        if path.exists() and path.stat().st_size:
            self._reopen()
        self._file = open(path, "ab", buffering=0)
        if self._file.tell() == 0:
            self._write(frame(msgpack.packb({"kind": "run", "schema": SCHEMA, "provenance": provenance,
                                             "recording": recording or {}, "run": self.run.as_dict()},
                                            use_bin_type=True)))

    def _reopen(self) -> None:
        """Make the file safe to append to, losing nothing: see the class docstring."""
        with open(self.path, "rb") as f:
            data = f.read()
        found = scan(self.path, data)
        self.run = _file_run(found) or self.run
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
        self._write(frame(encode_decode(key, rounds, prompt_tokens, self.run.as_dict())))

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


def _file_run(found: Scan) -> RunIdentity | None:
    """The run identity of a scanned file's run chunk, when that chunk is whole and says."""
    if not found.chunks or found.chunks[0][0] != 0:
        return None
    try:
        body = unpack(found.chunks[0][1], "")
        return (_identity(body, "") or run_identity(body["provenance"])) if body["kind"] == "run" else None
    except DamagedRounds:
        return None


def load_rounds(directories: Iterable[str | Path]) -> Iterator[RoundsFile]:
    """Every rounds file in `directories`, read (see read_rounds), with what belongs to another run than the
    first file's, or comes twice (a decode in two files, a file named twice), set aside in `damage`."""
    first = None  # the first file whose run is known: the run the others must be
    seen, read = {}, 0  # decode key -> (the number of the file it was read from, its path); files read
    for directory in directories:
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError(f"{directory}: not a directory; give the run's output directory")
        files = round_files(directory)
        if not files:
            raise InputError(f"{directory}: no rounds.shard-I-of-N.bin (or .bin.xz) file; was the run made with "
                             f"--record-rounds?")
        for path in files:
            found, read = read_rounds(path), read + 1
            if first is None:
                first = found if found.run is not None else None
            elif found.run is not None and found.run != first.run:
                why = "; ".join(differences(first.provenance, found.provenance)[:3]) or \
                    f"run {first.run.id} there, {found.run.id} here"
                for i in reversed(range(len(found.decodes))):
                    found.set_aside(i, f"of another run than {first.path}'s ({why})")
            for i in reversed(range(len(found.decodes))):
                number, other = seen.get(decode_key(found.decodes[i].key), (read, path))
                if number != read and _same_file(other, path):
                    found.set_aside(i, f"comes twice: {path} was read already (its directory is named twice)")
                elif number != read:
                    found.set_aside(i, f"comes twice: read already from {other}")
            seen.update({decode_key(d.key): (read, path) for d in found.decodes})
            found.damage.sort(key=lambda d: d.start)
            yield found


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False
