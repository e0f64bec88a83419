"""Recorded rounds (DESIGN.md section 8): per decode, every round's pool with the target's probability of
each pool edge, stored beside the records in a compact binary file.

A shard's file `rounds.shard-I-of-N.bin` is a run of chunks, each `SPR1`, the payload's length (uint64,
little-endian), its CRC-32 (uint32) and the payload, a msgpack map. The first chunk holds the run's
provenance (`kind` "run"); each later one a whole decode (`kind` "decode"): its key (the record's), and per
round the budget, the tree nodes accepted, the tokens emitted (the round's draw at the root first) and the
pool (token, parent, draft log-prob of the edge, expanded) with the target's edge probabilities, as raw
little-endian arrays laid end to end over the decode's rounds. A chunk is appended with one write and an
fsync before the decode's record, so a decode with a record always has its rounds; a torn last chunk
(a process killed mid-write) is dropped on reopening, and a decode recorded twice (a resumed decode that
had no record yet) is read as its last chunk.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from pipeline.config import InputError
from pipeline.pool import InvalidPool, Pool
from pipeline.value import Scored

MAGIC = b"SPR1"
HEAD = struct.Struct("<4sQI")  # magic, payload length, CRC-32 of the payload
SCHEMA = 1
MAX_CHUNK = 1 << 34  # a decode's rounds: far beyond any real one, small enough to refuse a corrupt length
_FILE = re.compile(r"rounds\.shard-(\d+)-of-(\d+)\.bin")
# Per-candidate arrays and their stored dtypes; `expanded` is stored bit-packed.
POOL_ARRAYS = {"token": "<i4", "parent": "<i4", "logp": "<f4", "edge": "<f4"}


class DamagedRounds(InputError):
    """A rounds file holds a chunk that is not whole or not valid before its end."""


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


@dataclass(slots=True)
class RecordedRound:
    """One round of a decode, as recorded: enough to give every rule the same pool."""

    budget: int  # the tree size cap this round ran with
    accepted: int  # tree nodes the verifier accepted (a drawn first token that is a tree node counts)
    emitted: np.ndarray  # (a + 1,) int64: the accepted path and the continuation
    token: np.ndarray  # (N,) the pool's candidates ...
    parent: np.ndarray
    logp: np.ndarray
    expanded: np.ndarray
    edge: np.ndarray  # (N,) the target's probability of each candidate's edge at the run's temperature
    seconds: float = 0.0  # what the measurement pass and its read-back took (not part of the decode's time)

    def scored(self) -> Scored:
        return Scored(Pool.from_edges(self.token, self.parent, self.logp, self.expanded), self.edge)


@dataclass(slots=True)
class RecordedDecode:
    key: dict  # prompt_id, category, turn, decoder, temperature, budget, grid_budget, seed, warmup
    rounds: list[RecordedRound]


def encode_decode(key: dict, rounds: list[RecordedRound]) -> bytes:
    """One decode's chunk payload."""
    def cat(name: str, dtype: str) -> bytes:
        parts = [getattr(r, name) for r in rounds]
        return np.concatenate(parts).astype(dtype).tobytes() if parts else b""

    body = {"kind": "decode", "schema": SCHEMA, "key": key,
            "budget": [r.budget for r in rounds], "accepted": [r.accepted for r in rounds],
            "seconds": [r.seconds for r in rounds],
            "pool_size": [len(r.token) for r in rounds], "emit_size": [len(r.emitted) for r in rounds],
            "emitted": cat("emitted", "<i4"),
            "expanded": np.packbits(np.concatenate([r.expanded for r in rounds]).astype(bool)).tobytes()
            if rounds else b""}
    body.update({name: cat(name, dtype) for name, dtype in POOL_ARRAYS.items()})
    return msgpack.packb(body, use_bin_type=True)


def decode_chunk(payload: bytes, where: str) -> dict:
    """A chunk's map; RecordedDecode for `kind` decode. Raises DamagedRounds naming `where`."""
    try:
        body = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise DamagedRounds(f"{where}: not a msgpack map ({e})") from None
    if not isinstance(body, dict) or body.get("kind") not in ("run", "decode"):
        raise DamagedRounds(f"{where}: a chunk of unknown kind")
    if body.get("schema") != SCHEMA:
        raise DamagedRounds(f"{where}: schema {body.get('schema')!r}, this version reads {SCHEMA}")
    if body["kind"] == "run":
        return body
    try:
        return _decode(body)
    except (KeyError, TypeError, ValueError, InvalidPool) as e:
        raise DamagedRounds(f"{where}: a decode chunk that does not hold its rounds ({e})") from None


def _decode(body: dict) -> RecordedDecode:
    sizes = np.asarray(body["pool_size"], np.int64)
    emits = np.asarray(body["emit_size"], np.int64)
    n = len(sizes)
    if not all(len(body[k]) == n for k in ("budget", "accepted", "seconds", "emit_size")):
        raise ValueError("per-round lists of different lengths")
    if np.any(sizes < 1) or np.any(emits < 1):
        raise ValueError("a round without candidates or without an emitted token")
    arrays = {name: np.frombuffer(body[name], dtype) for name, dtype in POOL_ARRAYS.items()}
    for name, a in arrays.items():
        if len(a) != sizes.sum():
            raise ValueError(f"`{name}` holds {len(a)} entries for {int(sizes.sum())} candidates")
    expanded = np.unpackbits(np.frombuffer(body["expanded"], np.uint8))[: sizes.sum()].astype(bool)
    emitted = np.frombuffer(body["emitted"], "<i4")
    if len(expanded) != sizes.sum() or len(emitted) != emits.sum():
        raise ValueError("`expanded` or `emitted` does not match the round sizes")
    ends, emit_ends = np.cumsum(sizes), np.cumsum(emits)
    rounds = []
    for i in range(n):
        a, b = ends[i] - sizes[i], ends[i]
        rounds.append(RecordedRound(int(body["budget"][i]), int(body["accepted"][i]),
                                    emitted[emit_ends[i] - emits[i]: emit_ends[i]].astype(np.int64),
                                    *(arrays[k][a:b] for k in ("token", "parent", "logp")), expanded[a:b],
                                    arrays["edge"][a:b], float(body["seconds"][i])))
    return RecordedDecode(dict(body["key"]), rounds)


def frame(payload: bytes) -> bytes:
    return HEAD.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def read_chunks(path: Path) -> tuple[list[bytes], int]:
    """The whole chunks' payloads of one file and the end of the last whole one. A torn last chunk is left
    out; damage before it raises DamagedRounds."""
    payloads, at = [], 0
    with open(path, "rb") as f:
        data = f.read()
    while at < len(data):
        if len(data) - at < HEAD.size:
            break  # a torn head
        magic, length, crc = HEAD.unpack_from(data, at)
        if magic != MAGIC or length > MAX_CHUNK:
            raise DamagedRounds(f"{path}: no chunk starts at byte {at}; is it a rounds file?")
        end = at + HEAD.size + length
        if end > len(data):
            break  # a torn payload
        payload = data[at + HEAD.size: end]
        if zlib.crc32(payload) != crc:
            if end == len(data):
                break  # the last chunk, half written before a crash
            raise DamagedRounds(f"{path}: the chunk at byte {at} fails its checksum")
        payloads.append(payload)
        at = end
    return payloads, at


class RoundStore:
    """One shard's rounds file, opened for appending (the shard's records lock covers it)."""

    def __init__(self, path: Path, provenance: dict) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        if not new:
            _, end = read_chunks(path)
            if end < path.stat().st_size:
                os.truncate(path, end)  # a torn last chunk: the decode it held has no record, it runs again
        self._file = open(path, "ab", buffering=0)
        if new or self._file.tell() == 0:
            self._write(frame(msgpack.packb({"kind": "run", "schema": SCHEMA, "provenance": provenance},
                                            use_bin_type=True)))

    def append(self, key: dict, rounds: list[RecordedRound]) -> None:
        """Write one decode's rounds and return once they are on disk."""
        self._write(frame(encode_decode(key, rounds)))

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
                pass  # reopening drops a torn last chunk anyway
            raise InputError(f"cannot write {self.path}: {e.strerror or e}; the decodes before it are intact, "
                             f"free space and rerun the same command to resume") from None

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RoundStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_rounds(path: Path) -> tuple[dict, list[RecordedDecode]]:
    """The provenance and the decodes of one rounds file, the last chunk of a decode recorded twice."""
    payloads, _ = read_chunks(path)
    if not payloads:
        raise DamagedRounds(f"{path}: empty; no run was recorded into it")
    head = decode_chunk(payloads[0], f"{path} chunk 0")
    if not isinstance(head, dict) or head.get("kind") != "run":
        raise DamagedRounds(f"{path}: its first chunk is not the run's provenance")
    decodes: dict[tuple, RecordedDecode] = {}
    for i, payload in enumerate(payloads[1:], 1):
        d = decode_chunk(payload, f"{path} chunk {i}")
        if not isinstance(d, RecordedDecode):
            raise DamagedRounds(f"{path} chunk {i}: a second provenance chunk")
        decodes[decode_key(d.key)] = d
    return head["provenance"], list(decodes.values())


KEY_FIELDS = ("prompt_id", "category", "turn", "decoder", "temperature", "budget", "seed")


def round_key(record: dict) -> dict:
    """The key a decode's rounds are stored under, from its record (a sweep adds where it ran)."""
    return {name: record[name] for name in KEY_FIELDS}


def decode_key(key: dict) -> tuple:
    """What makes a decode the same decode in any shard (as the records' key)."""
    budget = key.get("grid_budget", key["budget"])
    return (key["prompt_id"], int(key["turn"]), key["decoder"], float(key["temperature"]),
            budget if isinstance(budget, str) else int(budget), int(key["seed"]), bool(key.get("warmup", False)))


def load_rounds(directories: Iterable[str | Path]) -> Iterator[tuple[Path, dict, list[RecordedDecode]]]:
    """(file, provenance, decodes) of every rounds file in `directories`."""
    for directory in directories:
        directory = Path(directory)
        if not directory.is_dir():
            raise InputError(f"{directory}: not a directory; give the run's output directory")
        files = round_files(directory)
        if not files:
            raise InputError(f"{directory}: no rounds.shard-I-of-N.bin file; was the run made with "
                             f"--record-rounds?")
        for path in files:
            provenance, decodes = read_rounds(path)
            yield path, provenance, decodes
