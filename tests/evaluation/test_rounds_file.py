"""Rounds files as data a reader can trust: a damage campaign (truncations, flipped bytes, bad lengths at every
chunk boundary, valid-checksum chunks with each field wrong, a msgpack bomb) in which every case ends in a named
error or an announced recovery and changes nothing of the decodes it did not damage; reopening to append loses
nothing that was readable."""

from __future__ import annotations

import struct
import zlib

import msgpack
import numpy as np
import pytest

from evaluation.rounds import ROW_KINDS, DamagedRounds, RecordedRound, RetainedRows, encode_decode
from evaluation.rounds_file import HEAD, MAGIC, RoundStore, frame, read_rounds, rounds_path, scan
from pipeline.pool import Pool

KEY = dict(prompt_id="p0", category="qa", turn=0, decoder="draft", temperature=1.0, budget=4, seed=0)


def a_round(seed: int, n: int = 7) -> RecordedRound:
    """A round of a small pool: 3 first-level candidates, the first two expanded with 2 children each."""
    rng = np.random.default_rng(seed)
    token = rng.permutation(50)[:n] + 1
    parent = np.array([-1, -1, -1, 0, 0, 1, 1])[:n]
    pool = Pool.from_edges(token, parent, np.log(rng.uniform(0.05, 0.9, n)), np.array([1, 1, 0, 0, 0, 0, 0], bool)[:n])
    edge = rng.uniform(0, 0.3, n)
    k = 3
    rows = RetainedRows(kind=np.array([0, 2, 4]), tv=rng.uniform(0, 1, 3).astype(np.float32),
                        agree=np.array([True, False, True]), on_path=np.zeros(3, bool), age=np.array([-1, 2, -1]),
                        logp=np.log(rng.uniform(0.01, 1, (3, k))).astype(np.float32))
    return RecordedRound(budget=4, accepted=1, emitted=np.array([int(token[0]), 9]), pool=pool, edge=edge,
                         root=5, position=3 * seed, root_argmax=7, root_entropy=2.5,
                         first_soft=rng.uniform(0, 0.3, k), own_tv=0.001, own_agree=1, prefix_root=1, rows=rows)


def fingerprint(decode) -> tuple:
    """Everything a decode's rounds say, as plain values (what the values program reads)."""
    return (decode.key["prompt_id"], decode.prompt_tokens,
            tuple((r.budget, r.accepted, tuple(r.emitted.tolist()), tuple(r.pool.token.tolist()),
                   tuple(r.pool.parent.tolist()), tuple(np.round(r.edge, 6).tolist()), r.root, r.position,
                   tuple(np.round(r.rows.tv, 6).tolist()), tuple(r.rows.kind.tolist())) for r in decode.rounds))


@pytest.fixture
def written(tmp_path):
    """A file of the run chunk and five decodes -> (path, its bytes, each chunk's offset, the decodes' prints)."""
    path = rounds_path(tmp_path, 1, 1)
    with RoundStore(path, {"run": 1}, {"scored": 160}) as store:
        for i in range(5):
            store.append({**KEY, "prompt_id": f"p{i}"}, [a_round(10 * i + j) for j in range(i % 3 + 1)], 40 + i)
    data = path.read_bytes()
    found = read_rounds(path)
    assert not found.damage and len(found.decodes) == 5 and found.recording == {"scored": 160}
    offsets = [at for at, _ in scan(path, data).chunks]
    return path, data, offsets, {d.key["prompt_id"]: fingerprint(d) for d in found.decodes}


def read_after(path, data: bytes):
    """Write `data` and read it: the decodes by prompt id, and the damage. A file with no whole chunk left is a
    DamagedRounds (the only case that may raise)."""
    path.write_bytes(data)
    found = read_rounds(path)
    return {d.key["prompt_id"]: fingerprint(d) for d in found.decodes}, found.damage


def check_untouched(got: dict, reference: dict, damage: list, lost: set[str]) -> None:
    """Every decode not in `lost` reads exactly as before; every lost one is accounted for by named damage."""
    assert {k: v for k, v in reference.items() if k not in lost} == {k: v for k, v in got.items() if k not in lost}
    missing = set(reference) - set(got)
    assert missing <= lost
    if missing:
        assert damage, "a decode disappeared without a word"


def test_truncations_anywhere_drop_only_a_named_torn_tail(written):
    path, data, offsets, reference = written
    ends = [*offsets[1:], len(data)]  # where each chunk ends
    cuts = sorted({*offsets, *(at + 5 for at in offsets), *(at + HEAD.size + 3 for at in offsets),
                   *range(offsets[1], len(data), 97)})
    for cut in cuts:
        if cut < ends[0]:  # not even the run chunk is whole
            path.write_bytes(data[:cut])
            with pytest.raises(DamagedRounds, match="no whole chunk"):
                read_rounds(path)
            continue
        got, damage = read_after(path, data[:cut])
        whole = {f"p{i}" for i, end in enumerate(ends[1:]) if end <= cut}
        assert got == {k: v for k, v in reference.items() if k in whole}
        if cut not in ends:
            assert len(damage) == 1 and damage[0].tail and "torn last chunk" in str(damage[0])
        else:
            assert not damage


@pytest.mark.parametrize("step", [1, 37])
def test_a_flipped_byte_costs_at_most_the_chunk_it_is_in(written, step):
    path, data, offsets, reference = written
    bounds = [*offsets, len(data)]
    for at in range(0, len(data), step if step > 1 else max(1, len(data) // 400)):
        damaged = bytearray(data)
        damaged[at] ^= 0x5A
        chunk = max(i for i, o in enumerate(offsets) if o <= at)
        if chunk == 0:  # the run chunk: its provenance is named as missing; every decode still reads
            got, damage = read_after(path, bytes(damaged))
            assert got == reference and any("provenance" in d.reason or d.start == 0 for d in damage)
            continue
        got, damage = read_after(path, bytes(damaged))
        name = f"p{chunk - 1}"
        check_untouched(got, reference, damage, {name})
        if name not in got:
            assert any(d.start <= at < max(d.end, d.start + 1) or d.start == offsets[chunk] for d in damage)
        else:  # only the length field can be wrong and the decode still read: recovered by its checksum
            assert got[name] == reference[name]
        assert bounds[chunk] <= at < bounds[chunk + 1]


@pytest.mark.parametrize("length", [0, 1, 2 ** 33, 2 ** 34 + 1, -1, +1])
def test_a_wrong_length_field_is_recovered_by_the_checksum_and_never_taken_for_the_end(written, length):
    path, data, offsets, reference = written
    for chunk in range(1, len(offsets)):
        at = offsets[chunk]
        true = struct.unpack_from("<Q", data, at + 4)[0]
        value = true + length if length in (-1, 1) else length
        damaged = bytearray(data)
        struct.pack_into("<Q", damaged, at + 4, value)
        got, damage = read_after(path, bytes(damaged))
        assert got == reference, (chunk, value)  # the audit's case: nothing after it disappears
        assert len(damage) == 1 and damage[0].recovered and damage[0].start == at
        with RoundStore(path, {"run": 1}) as store:  # reopening repairs the field in place
            assert any("repaired" in note for note in store.notes)
        assert path.read_bytes() == data


def _with_payload(data: bytes, offsets: list[int], chunk: int, body: dict) -> bytes:
    """The file with chunk `chunk` replaced by a valid-checksum chunk of `body`."""
    end = offsets[chunk + 1] if chunk + 1 < len(offsets) else len(data)
    return data[:offsets[chunk]] + frame(msgpack.packb(body, use_bin_type=True)) + data[end:]


def _decode_body(**change) -> dict:
    body = msgpack.unpackb(encode_decode({**KEY, "prompt_id": "p2"}, [a_round(20), a_round(21)], 42), raw=False)
    for name, value in change.items():
        if name.startswith("key."):
            body["key"] = {**body["key"], name[4:]: value}
        else:
            body[name] = value
    return body


def _array(name: str, dtype: str, change) -> bytes:
    a = np.frombuffer(_decode_body()[name], dtype).copy()
    change(a)
    return a.tobytes()


BAD_FIELDS = {
    "key is empty": dict(key={}),
    "temperature hot": {"key.temperature": "hot"},
    "seed None": {"key.seed": None},
    "budget missing": {"key.budget": "eight"},
    "rounds count huge": dict(rounds=2 ** 63 - 1),
    "rounds not an int": dict(rounds="2"),
    "parents out of range": dict(parent=_array("parent", "<i4", lambda a: a.__setitem__(3, 40))),
    "edge NaN": dict(edge=_array("edge", "<f4", lambda a: a.__setitem__(2, np.nan))),
    "edge 1e30": dict(edge=_array("edge", "<f4", lambda a: a.__setitem__(2, 1e30))),
    "edge negative": dict(edge=_array("edge", "<f4", lambda a: a.__setitem__(0, -0.5))),
    "logp positive": dict(logp=_array("logp", "<f4", lambda a: a.__setitem__(1, 3.0))),
    "pool size huge": dict(pool_size=_array("pool_size", "<i4", lambda a: a.__setitem__(0, 2 ** 31 - 1))),
    "accepted beyond the pool": dict(accepted=_array("accepted", "<i4", lambda a: a.__setitem__(0, 500))),
    "token negative": dict(token=_array("token", "<i4", lambda a: a.__setitem__(0, -3))),
    "emitted short": dict(emitted=b"\x01\x00\x00\x00"),
    "expanded short": dict(expanded=b""),
    "row kind unknown": dict(row_kind=_array("row_kind", "<u1", lambda a: a.__setitem__(0, len(ROW_KINDS)))),
    "row tv 2": dict(row_tv=_array("row_tv", "<f4", lambda a: a.__setitem__(0, 2.0))),
    "row logp NaN": dict(row_logp=_array("row_logp", "<f4", lambda a: a.__setitem__(0, np.nan))),
    "rows count huge": dict(rows_n=_array("rows_n", "<i2", lambda a: a.__setitem__(0, 30000))),
    "entropy infinite": dict(root_entropy=_array("root_entropy", "<f4", lambda a: a.__setitem__(0, np.inf))),
    "own agreement 7": dict(own_agree=_array("own_agree", "<i1", lambda a: a.__setitem__(0, 7))),
    "first_soft 1.5": dict(first_soft=_array("first_soft", "<f4", lambda a: a.__setitem__(0, 1.5))),
    "an array as a list": dict(edge=[0.1, 0.2]),
    "prompt_tokens text": dict(prompt_tokens="many"),
    "schema unknown": dict(schema=99),
    "kind unknown": dict(kind="debris"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS))
def test_a_valid_checksum_chunk_with_a_wrong_field_is_one_named_error(written, case):
    path, data, offsets, reference = written
    got, damage = read_after(path, _with_payload(data, offsets, 3, _decode_body(**BAD_FIELDS[case])))
    check_untouched(got, reference, damage, {"p2"})
    assert "p2" not in got and len(damage) == 1 and not damage[0].tail
    assert damage[0].start == offsets[3] and "skipped" in str(damage[0])


def test_a_schema_1_chunk_with_a_huge_pool_size_is_one_named_error(written):
    path, data, offsets, reference = written
    body = {"kind": "decode", "schema": 1, "key": {**KEY, "prompt_id": "p2"}, "budget": [4], "accepted": [1],
            "seconds": [0.1], "pool_size": [2 ** 63], "emit_size": [2], "emitted": b"", "expanded": b"",
            **{name: b"" for name in ("token", "parent", "logp", "edge")}}
    got, damage = read_after(path, _with_payload(data, offsets, 3, body))
    check_untouched(got, reference, damage, {"p2"})
    assert len(damage) == 1 and "pool_size" in damage[0].reason


def test_a_provenance_chunk_without_provenance_is_named(written):
    path, data, offsets, reference = written
    got, damage = read_after(path, _with_payload(data, offsets, 0, {"kind": "run", "schema": 2}))
    assert got == reference and any("provenance" in d.reason for d in damage)


@pytest.mark.parametrize("bomb", [b"\x91" * 200_000, b"\xdd\xff\xff\xff\xff" + b"\x00" * 64,
                                  b"\xdf\xff\xff\xff\xff" + b"\xa1a" * 10, b"\xc6\xff\xff\xff\xf0abc"])
def test_a_msgpack_bomb_is_one_named_error(written, bomb):
    path, data, offsets, reference = written
    end = offsets[4]
    got, damage = read_after(path, data[:offsets[3]] + frame(bomb) + data[end:])
    check_untouched(got, reference, damage, {"p2"})
    assert len(damage) == 1 and "p2" not in got


def test_garbage_between_chunks_is_skipped_and_named(written):
    path, data, offsets, reference = written
    junk = b"garbage" * 9 + MAGIC + b"\x00" * 3
    got, damage = read_after(path, data[:offsets[2]] + junk + data[offsets[2]:])
    assert got == reference and damage and "no chunk starts there" in damage[0].reason
    assert damage[0].start == offsets[2] and damage[-1].end == offsets[2] + len(junk)


def test_reopening_moves_a_torn_tail_aside_and_keeps_damage_in_the_middle(written):
    path, data, offsets, reference = written
    damaged = bytearray(data)
    damaged[offsets[2] + HEAD.size + 10] ^= 0xFF  # inside decode p1's payload
    torn = bytes(damaged) + frame(b"\x81\xa4kind\xa6decode")[:9]  # a chunk cut by a kill
    path.write_bytes(torn)
    with RoundStore(path, {"run": 1}) as store:
        assert any("moved to" in n for n in store.notes) and any("left in place" in n for n in store.notes)
        store.append({**KEY, "prompt_id": "p9"}, [a_round(90)], 7)
    aside = [p for p in path.parent.iterdir() if ".torn-at-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes() == torn[len(data):]
    found = read_rounds(path)
    got = {d.key["prompt_id"]: fingerprint(d) for d in found.decodes}
    assert {k: v for k, v in got.items() if k != "p9"} == {k: v for k, v in reference.items() if k != "p1"}
    assert "p9" in got and len(found.damage) == 1 and found.damage[0].start == offsets[2]
    assert path.read_bytes()[: len(data)] == bytes(damaged)  # nothing it could not read was cut


def test_a_damaged_chunk_names_the_decode_it_held_when_its_payload_still_says(written):
    path, data, offsets, reference = written
    damaged = bytearray(data)
    crc_at = offsets[3] + 12  # the checksum field itself: the payload is intact
    damaged[crc_at] ^= 0x01
    _, damage = read_after(path, bytes(damaged))
    assert len(damage) == 1 and "prompt_id='p2'" in str(damage[0])
    assert zlib.crc32(data[offsets[3] + HEAD.size: offsets[4]]) != struct.unpack_from("<I", damaged, crc_at)[0]
