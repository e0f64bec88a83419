"""Rounds files as data a reader can trust: a damage campaign (truncations, flipped bytes, bad lengths at every
chunk boundary, valid-checksum chunks with each field wrong, a msgpack bomb, chunks and files of another run,
decodes that come twice, chunks that hold what their run could not have recorded, a file cut at a chunk
boundary) in which every case ends in a named error, a decode set aside or an announced recovery and changes
nothing of the decodes it did not damage; reopening to append loses nothing that was readable."""

from __future__ import annotations

import json
import lzma
import struct
import zlib

import msgpack
import numpy as np
import pytest

from evaluation.rounds import ROW_KINDS, DamagedRounds, RecordedRound, RetainedRows, decode_key, encode_decode
from evaluation.rounds_check import check_rounds
from evaluation.rounds_file import (HEAD, MAGIC, RoundStore, ends_early, frame, load_rounds, read_rounds,
                                    records_beside, rounds_path, scan)
from evaluation.run_identity import RunIdentity, run_identity
from pipeline.pool import Pool
from tests.conftest import synthetic_record
from timing.values import check

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
    return RecordedRound(budget=4, accepted=2, emitted=np.array([int(token[0]), int(token[3]), 9]), pool=pool,
                         edge=edge, root=5, position=3 * seed, root_argmax=7, root_entropy=2.5,
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


# -- chunks of another run, decodes that come twice, impossible chunks -----------------------------------------

def sweep_provenance(seed: int = 0, temperatures: str = "1", topk: int = 3, shard: str = "1/2") -> dict:
    """A sweep's config as a rounds file keeps it; the shard and its output directory differ between shards."""
    return {"models": {"target": {"model": "mock", "retune": shard == "2/2"}, "drafter": None},
            "pool": {"topk": topk, "depth": 3, "expand": 2},
            "sweep": {"seed": seed, "temperatures": temperatures, "budgets": "4", "budget_max": 8,
                      "budget_overrides": "", "shard": shard, "out": f"runs/{shard[0]}"},
            "prompt_set": {"count": 8, "digest": "0123456789abcdef"}}


def write_shard(directory, shard: int, prompts, provenance: dict | None = None, temperature: float = 1.0,
                vocab: int = 64) -> dict:
    """A shard's rounds file of the decodes of `prompts` -> their prints by prompt id."""
    path = rounds_path(directory, shard, 2)
    with RoundStore(path, provenance or sweep_provenance(shard=f"{shard}/2"), {}, vocab) as store:
        for p in prompts:
            store.append({**KEY, "prompt_id": p, "temperature": temperature}, [a_round(int(p[1:]) * 10 + j)
                                                                               for j in range(2)], 40)
    return {d.key["prompt_id"]: fingerprint(d) for d in read_rounds(path).decodes}


def loaded(*directories):
    """load_rounds over `directories` -> (the decodes' prints by prompt id, the decodes read, every damage)."""
    files = list(load_rounds(directories))
    decodes = [d for f in files for d in f.decodes]
    return {d.key["prompt_id"]: fingerprint(d) for d in decodes}, decodes, [d for f in files for d in f.damage]


def test_the_shards_of_one_run_read_together_whatever_differs_between_shards(tmp_path):
    one = write_shard(tmp_path, 1, ["p0", "p1"])
    two = write_shard(tmp_path, 2, ["p2", "p3"])
    got, _, damage = loaded(tmp_path)
    assert got == {**one, **two} and not damage


@pytest.mark.parametrize("other, differs", [
    (dict(provenance=sweep_provenance(seed=1, shard="2/2")), "sweep.seed 0 there, 1 here"),
    (dict(provenance=sweep_provenance(temperatures="0.5", shard="2/2"), temperature=0.5),
     "sweep.temperatures '1' there, '0.5' here"),
    (dict(provenance=sweep_provenance(topk=4, shard="2/2")), "pool.topk 3 there, 4 here")])
def test_a_shard_of_another_run_is_set_aside_decode_by_decode(tmp_path, other, differs):
    """The audit's case: another run's shard copied in as rounds.shard-2-of-2.bin doubled the rounds."""
    one = write_shard(tmp_path, 1, ["p0", "p1"])
    write_shard(tmp_path, 2, ["p2", "p3", "p4"], **other)
    got, _, damage = loaded(tmp_path)
    assert got == one
    assert len(damage) == 3 and all(d.aside and d.path.name == "rounds.shard-2-of-2.bin" for d in damage)
    for d, p in zip(damage, ["p2", "p3", "p4"]):
        assert f"prompt_id='{p}'" in str(d) and differs in str(d) and "set aside" in str(d)
        assert "of another run than" in str(d) and "rounds.shard-1-of-2.bin" in str(d)


def _old_file(path, provenance: dict, prompts) -> None:
    """A rounds file as written before chunks carried their run (schema 2)."""
    chunks = [frame(msgpack.packb({"kind": "run", "schema": 2, "provenance": provenance, "recording": {}}))]
    for p in prompts:
        body = msgpack.unpackb(encode_decode({**KEY, "prompt_id": p}, [a_round(int(p[1:]))], 40), raw=False)
        del body["run"]
        chunks.append(frame(msgpack.packb({**body, "schema": 2}, use_bin_type=True)))
    path.write_bytes(b"".join(chunks))


def test_files_written_before_chunks_carried_their_run_read_as_before_and_their_runs_are_told_apart(tmp_path):
    _old_file(rounds_path(tmp_path, 1, 2), sweep_provenance(), ["p0", "p1"])
    alone = {d.key["prompt_id"]: fingerprint(d) for d in read_rounds(rounds_path(tmp_path, 1, 2)).decodes}
    assert set(alone) == {"p0", "p1"} and not read_rounds(rounds_path(tmp_path, 1, 2)).damage
    _old_file(rounds_path(tmp_path, 2, 2), sweep_provenance(seed=7, shard="2/2"), ["p2"])
    got, _, damage = loaded(tmp_path)
    assert got == alone and len(damage) == 1 and "sweep.seed 0 there, 7 here" in str(damage[0])


def test_a_directory_named_twice_is_read_once(tmp_path):
    """The audit's case: `values DIR DIR` counted every round twice."""
    one = write_shard(tmp_path, 1, ["p0", "p1", "p2"])
    got, decodes, damage = loaded(tmp_path, tmp_path)
    assert got == one and len(decodes) == 3
    assert len(damage) == 3 and all(d.aside and "its directory is named twice" in str(d) for d in damage)
    assert sorted(d.decode for d in damage) == sorted(f"decode {d}" for d in
                                                      [f"prompt_id='p{i}' turn=0 decoder='draft' temperature=1.0 "
                                                       f"budget=4 seed=0" for i in range(3)])


def test_a_decode_in_two_shards_of_one_run_is_read_from_the_first(tmp_path):
    one = write_shard(tmp_path, 1, ["p0", "p1"])
    (tmp_path / "rounds.shard-2-of-2.bin").write_bytes((tmp_path / "rounds.shard-1-of-2.bin").read_bytes())
    got, decodes, damage = loaded(tmp_path)
    assert got == one and len(decodes) == 2 and len(damage) == 2
    assert all("comes twice: read already from" in str(d) and d.path.name == "rounds.shard-2-of-2.bin"
               for d in damage)


def _chunk_of(run: RunIdentity | None, prompt: str = "p2", temperature: float = 1.0, rounds=None) -> bytes:
    """A whole chunk of decode `prompt` as the run `run` writes it."""
    key = {**KEY, "prompt_id": prompt, "temperature": temperature}
    return frame(encode_decode(key, rounds or [a_round(77)], 40, None if run is None else run.as_dict()))


def test_a_chunk_of_another_run_appended_is_set_aside_and_the_decode_keeps_its_own(tmp_path):
    """The audit's case: the last chunk of a decode won, whichever run wrote it."""
    one = write_shard(tmp_path, 1, ["p0", "p1", "p2"])
    path = rounds_path(tmp_path, 1, 2)
    size = path.stat().st_size
    for other in (run_identity(sweep_provenance(seed=3), 64), run_identity(sweep_provenance(topk=4), 64)):
        path.write_bytes(path.read_bytes()[:size] + _chunk_of(other))
        found = read_rounds(path)
        assert {d.key["prompt_id"]: fingerprint(d) for d in found.decodes} == one
        assert len(found.damage) == 1 and found.damage[0].aside and found.damage[0].start == size
        assert "of another run" in str(found.damage[0]) and "prompt_id='p2'" in str(found.damage[0])


def test_another_runs_whole_file_appended_is_set_aside(tmp_path):
    one = write_shard(tmp_path, 1, ["p0", "p1"])
    other = tmp_path / "other"
    write_shard(other, 1, ["p0", "p1", "p5"], sweep_provenance(seed=9))
    path = rounds_path(tmp_path, 1, 2)
    path.write_bytes(path.read_bytes() + rounds_path(other, 1, 2).read_bytes())
    found = read_rounds(path)
    assert {d.key["prompt_id"]: fingerprint(d) for d in found.decodes} == one
    aside = [d for d in found.damage if d.aside]
    assert len(aside) == 3 and {d.decode.split()[1] for d in aside} == {"prompt_id='p0'", "prompt_id='p1'",
                                                                        "prompt_id='p5'"}
    assert any("a second provenance chunk" in d.reason for d in found.damage)


def test_a_decode_written_twice_by_its_run_is_read_as_its_last_chunk_and_said(tmp_path):
    write_shard(tmp_path, 1, ["p0", "p1"])
    path = rounds_path(tmp_path, 1, 2)
    run = read_rounds(path).run
    path.write_bytes(path.read_bytes() + _chunk_of(run, "p1"))
    found = read_rounds(path)
    assert [d.key["prompt_id"] for d in found.decodes] == ["p0", "p1"]
    assert found.decodes[1].rounds[0].position == 3 * 77
    assert len(found.damage) == 1 and found.damage[0].superseded and not found.damage[0].problem


def test_a_chunk_naming_no_run_in_a_file_whose_chunks_do_is_skipped(tmp_path):
    one = write_shard(tmp_path, 1, ["p0", "p1"])
    path = rounds_path(tmp_path, 1, 2)
    body = msgpack.unpackb(encode_decode({**KEY, "prompt_id": "p1"}, [a_round(5)], 40), raw=False)
    path.write_bytes(path.read_bytes() + frame(msgpack.packb({**body, "schema": 2}, use_bin_type=True)))
    found = read_rounds(path)
    assert {d.key["prompt_id"]: fingerprint(d) for d in found.decodes} == one
    assert len(found.damage) == 1 and "it names no run" in str(found.damage[0])


def _wide_round() -> RecordedRound:
    """A round whose root has 4 children: more than the run's topk of 3."""
    r = a_round(3)
    pool = Pool.from_edges(r.pool.token, np.array([-1, -1, -1, -1, 0, 0, 1]), r.pool.logp,
                           np.array([1, 1, 0, 0, 0, 0, 0], bool))
    return RecordedRound(budget=4, accepted=1, emitted=np.array([int(r.pool.token[0]), 9]), pool=pool,
                         edge=r.edge / 2)


IMPOSSIBLE = {  # well-formed chunks, valid checksums, that their run could not have written
    "every edge 1": (dict(edge=_array("edge", "<f4", lambda a: a.__setitem__(slice(None), 1.0))),
                     "children sum to 3, more than 1"),
    "a token past the vocabulary": (dict(token=_array("token", "<i4", lambda a: a.__setitem__(4, 100))),
                                    "pool token 100, outside the run's vocabulary [0, 64)"),
    "an emitted token past the vocabulary": (dict(emitted=_array("emitted", "<i4", lambda a: a.__setitem__(2, 70))),
                                             "emitted token 70, outside the run's vocabulary"),
    "an emitted token not on its pool": (dict(emitted=_array("emitted", "<i4", lambda a: a.__setitem__(1, 63))),
                                         "accepted token 63 (step 1) is not a child of its predecessor"),
    "a budget of 2^31-1": ({"key.budget": 2 ** 31 - 1}, "key field `budget` 2147483647 exceeds the run's largest "
                                                         "budget 8"),
    "a round's budget of 2^31-1": (dict(budget=_array("budget", "<i4", lambda a: a.__setitem__(0, 2 ** 31 - 1))),
                                   "a budget of 2147483647, beyond the run's largest (8)"),
    "a temperature of 1e308": ({"key.temperature": 1e308}, "temperature 1e+308 is none the run decoded at (1)"),
    "first_soft summing past 1": (dict(first_soft=_array("first_soft", "<f4", lambda a: a.__setitem__(slice(3), 0.9))),
                                  "`first_soft` sums to"),
    "a root entropy NaN of a recorded root row": (
        dict(root_entropy=_array("root_entropy", "<f4", lambda a: a.__setitem__(1, np.nan))),
        "round 1: `root_entropy` is nan where `root_argmax` is 7"),
    "a root entropy beyond log V": (dict(root_entropy=_array("root_entropy", "<f4", lambda a: a.__setitem__(0, 4.5))),
                                    "`root_entropy` 4.5, beyond log 64 = 4.15888"),
    "a root entropy without its root row": (
        dict(root_argmax=_array("root_argmax", "<i4", lambda a: a.__setitem__(0, -1))),
        "`root_entropy` is 2.5 where `root_argmax` is -1"),
    "a root entropy below 0": (dict(root_entropy=_array("root_entropy", "<f4", lambda a: a.__setitem__(0, -0.5))),
                               "`root_entropy` holds -0.5, outside [0.0, 21.4"),
    "a root entropy past log 2^31": (dict(root_entropy=_array("root_entropy", "<f4", lambda a: a.__setitem__(0, 30))),
                                     "`root_entropy` holds 30.0, outside [0.0, 21.4"),
    "seconds NaN": (dict(seconds=_array("seconds", "<f4", lambda a: a.__setitem__(0, np.nan))),
                    "`seconds` holds a value that is not finite"),
    "own tv NaN where the own row was compared": (
        dict(own_tv=_array("own_tv", "<f4", lambda a: a.__setitem__(1, np.nan))),
        "round 1: `own_tv` is nan where `own_agree` is 1"),
    "first_soft NaN of a recorded root row": (
        dict(first_soft=_array("first_soft", "<f4", lambda a: a.__setitem__(4, np.nan))),
        "round 1: `first_soft` holds"),
}


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_a_chunk_its_run_could_not_have_written_is_named_and_skipped(tmp_path, case):
    change, message = IMPOSSIBLE[case]
    write_shard(tmp_path, 1, ["p0", "p1", "p3"])
    path = rounds_path(tmp_path, 1, 2)
    data = path.read_bytes()
    offsets = [at for at, _ in scan(path, data).chunks]
    reference = {d.key["prompt_id"]: fingerprint(d) for d in read_rounds(path).decodes}
    body = {**_decode_body(**change), "run": read_rounds(path).run.as_dict()}
    got, damage = read_after(path, data + frame(msgpack.packb(body, use_bin_type=True)))
    assert got == reference and "p2" not in got
    assert len(damage) == 1 and damage[0].start == len(data) and not damage[0].tail and not damage[0].aside
    assert message in str(damage[0]) and "prompt_id='p2'" in str(damage[0]) and str(path) in str(damage[0])
    assert "skipped" in str(damage[0]) and offsets


def test_a_pool_wider_than_its_runs_is_named_and_skipped(tmp_path):
    write_shard(tmp_path, 1, ["p0"])
    path = rounds_path(tmp_path, 1, 2)
    found = read_rounds(path)
    path.write_bytes(path.read_bytes() + _chunk_of(found.run, "p2", rounds=[_wide_round()]))
    got, damage = read_after(path, path.read_bytes())
    assert set(got) == {"p0"} and len(damage) == 1
    assert "a node with 4 children in a pool of topk 3" in str(damage[0])


def _records(directory, shard: int, prompts) -> None:
    """A records file of timed decodes of `prompts` (and a warm-up), in order."""
    key = dict(decoder=KEY["decoder"], temperature=KEY["temperature"], budget=KEY["budget"], seed=KEY["seed"],
               category=KEY["category"], turn=KEY["turn"])
    records = [synthetic_record("warm", warmup=True, **key)] + [synthetic_record(p, **key) for p in prompts]
    records_beside(rounds_path(directory, shard, 2)).write_text("".join(json.dumps(r.to_json()) + "\n"
                                                                        for r in records))


def test_a_file_cut_at_a_chunk_boundary_before_its_records_decodes_is_said(tmp_path, capsys):
    """The audit's case: a truncation exactly at a chunk boundary dropped decodes without a word."""
    one = write_shard(tmp_path, 1, ["p0", "p1", "p2", "p3"])
    _records(tmp_path, 1, ["p0", "p1", "p2", "p3"])
    path = rounds_path(tmp_path, 1, 2)
    offsets = [at for at, _ in scan(path, path.read_bytes()).chunks]
    path.write_bytes(path.read_bytes()[:offsets[3]])
    found = read_rounds(path)
    assert {d.key["prompt_id"]: fingerprint(d) for d in found.decodes} == {p: one[p] for p in ("p0", "p1")}
    keys = [decode_key({**KEY, "prompt_id": p}) for p in ("p0", "p1", "p2", "p3")]
    cut = ends_early(found, keys)
    assert cut is not None and cut.cut and f"byte {offsets[3]}" in str(cut)
    assert "ends on a chunk boundary before the rounds of 2 decode(s) its records list" in str(cut)
    assert "prompt_id='p2'" in str(cut) and ends_early(found, keys[:2]) is None
    assert check([str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any("ends on a chunk boundary" in line for line in out)
    assert sum("no readable rounds for the recorded decode prompt_id='p" in line for line in out) == 2


def test_check_lists_rounds_without_records_and_speaks_json(tmp_path, capsys):
    write_shard(tmp_path, 1, ["p0", "p1", "p2"])
    _records(tmp_path, 1, ["p0", "p1"])
    assert check([str(tmp_path)], as_json=True) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["kind"] for line in lines] == ["no-record", "summary"]
    assert "prompt_id='p2'" in lines[0]["decode"] and "have no record" in lines[0]["message"]
    assert lines[0]["file"].endswith("rounds.shard-1-of-2.bin")
    assert lines[1] == {"kind": "summary", "files": 1, "decodes": 3, "records": 3, "recovered": 0, "superseded": 0,
                        "problems": 1}
    _records(tmp_path, 1, ["p0", "p1", "p2"])
    assert check([str(tmp_path), str(tmp_path)], as_json=True) == 1  # the directory twice: its decodes set aside
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["kind"] for line in lines] == ["set-aside"] * 3 + ["summary"]
    assert check([str(tmp_path)]) == 0
    assert "nothing damaged or missing" in capsys.readouterr().out


def test_check_names_a_chunk_whose_root_entropy_is_nan_as_damaged(tmp_path, capsys):
    write_shard(tmp_path, 1, ["p0", "p1"])
    _records(tmp_path, 1, ["p0", "p1", "p2"])
    path = rounds_path(tmp_path, 1, 2)
    nan = _array("root_entropy", "<f4", lambda a: a.__setitem__(0, np.nan))
    body = {**_decode_body(root_entropy=nan), "run": read_rounds(path).run.as_dict()}
    path.write_bytes(path.read_bytes() + frame(msgpack.packb(body, use_bin_type=True)))
    assert check([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "`root_entropy` is nan where `root_argmax` is 7" in out and "nothing damaged" not in out


def test_check_rounds_counts_what_it_was_given(tmp_path):
    write_shard(tmp_path, 1, ["p0"])
    checked = check_rounds(list(load_rounds([tmp_path])), {})
    assert not checked.findings and checked.decodes == 1 and checked.records == 0


def test_a_file_written_before_chunks_carried_their_run_is_resumed_under_its_own_run(tmp_path):
    path = rounds_path(tmp_path, 1, 2)
    _old_file(path, sweep_provenance(), ["p0", "p1"])
    before = {d.key["prompt_id"]: fingerprint(d) for d in read_rounds(path).decodes}
    with RoundStore(path, sweep_provenance(), {}, 64) as store:  # a resumed sweep knows its vocabulary now
        assert store.run == run_identity(sweep_provenance()) and store.run.vocab is None
        store.append({**KEY, "prompt_id": "p2"}, [a_round(2)], 40)
    found = read_rounds(path)
    assert not found.damage and [d.key["prompt_id"] for d in found.decodes] == ["p0", "p1", "p2"]
    assert {k: v for k, v in ((d.key["prompt_id"], fingerprint(d)) for d in found.decodes) if k != "p2"} == before


def test_a_packed_rounds_file_reads_as_it_is_and_its_records_are_found_beside_it(tmp_path):
    one = write_shard(tmp_path, 1, ["p0", "p1"])
    two = write_shard(tmp_path, 2, ["p2"])
    packed = rounds_path(tmp_path, 1, 2).with_name("rounds.shard-1-of-2.bin.xz")
    packed.write_bytes(lzma.compress(rounds_path(tmp_path, 1, 2).read_bytes()))
    rounds_path(tmp_path, 1, 2).unlink()
    got, _, damage = loaded(tmp_path)
    assert got == {**one, **two} and not damage
    assert records_beside(packed).name == "records.shard-1-of-2.jsonl"


def test_a_damaged_packing_is_one_named_error(tmp_path):
    write_shard(tmp_path, 1, ["p0"])
    packed = rounds_path(tmp_path, 1, 2).with_name("rounds.shard-1-of-2.bin.xz")
    packed.write_bytes(lzma.compress(rounds_path(tmp_path, 1, 2).read_bytes())[:-40])
    with pytest.raises(DamagedRounds, match=r"rounds\.shard-1-of-2\.bin\.xz: not a whole \.xz file"):
        read_rounds(packed)
