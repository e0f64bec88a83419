"""Properties of timing.record_store: a record is durable once appended, a torn last line is dropped and cut
off, damage elsewhere is loud, and no decode is ever recorded twice, within a file or across shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from timing.record_store import (DamagedRecords, RecordStore, load_records, read_records, record_key,
                            records_path, shard_files)


def fill(path, make_record, n: int) -> list[dict]:
    recs = [make_record(f"p/{i}", "draft") for i in range(n)]
    with RecordStore(path) as store:
        for r in recs:
            store.append(r)
    return recs


def test_appended_records_survive_reopening(tmp_path, make_record):
    path = records_path(tmp_path, 1, 1)
    recs = fill(path, make_record, 3)
    with RecordStore(path) as store:
        assert store.records == recs
        assert record_key(recs[1]) in store
        store.append(make_record("p/9", "root"))
    assert len(read_records(path)) == 4


@pytest.mark.parametrize("tail", [
    b'{"prompt_id": "p/7", "deco',  # cut mid-record
    b'{"prompt_id":"p/7","decoder":"draft","temperature":0,"budget":8,"seed":0,"warmup":false}',  # no newline
    b"\x00\x00\x00\x00",  # a block the file system never filled
    b"\x00\x00\n",  # ... even with a newline after it
])
def test_torn_last_line_is_dropped_and_cut_off(tmp_path, make_record, tail):
    path = records_path(tmp_path, 1, 1)
    fill(path, make_record, 3)
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(tail)
    assert len(read_records(path)) == 3 and path.read_bytes() == intact + tail  # reading alone changes nothing
    with RecordStore(path) as store:
        assert len(store.records) == 3
        store.append(make_record("p/7", "draft"))
    assert path.read_bytes().startswith(intact)
    assert [r.prompt_id for r in read_records(path)] == ["p/0", "p/1", "p/2", "p/7"]


def test_damage_before_the_last_line_is_an_error(tmp_path, make_record):
    path = records_path(tmp_path, 1, 1)
    fill(path, make_record, 3)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:20]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DamagedRecords, match=r"records\.shard-1-of-1\.jsonl:2: not JSON .*only the last line may be torn"):
        RecordStore(path)


def test_a_decode_is_never_recorded_twice(tmp_path, make_record):
    path = records_path(tmp_path, 1, 1)
    with RecordStore(path) as store:
        store.append(make_record("p/0", "draft"))
        with pytest.raises(ValueError, match="recorded already"):
            store.append(make_record("p/0", "draft", seconds=2.0))
        store.append(make_record("p/0", "draft", warmup=True))  # a warm-up is another decode
    line = path.read_bytes().split(b"\n")[0]
    path.write_bytes(path.read_bytes() + line + b"\n")
    with pytest.raises(DamagedRecords, match="a second record"):
        read_records(path)


def test_reports_merge_shard_files_and_refuse_a_decode_found_twice(tmp_path, make_record):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    with RecordStore(records_path(a, 1, 2)) as s1, RecordStore(records_path(b, 2, 2)) as s2:
        s1.append(make_record("p/0", "draft"))
        s2.append(make_record("p/1", "draft"))
    assert sorted(r.prompt_id for r in load_records([a, b])) == ["p/0", "p/1"]
    assert [p.name for p in shard_files(a)] == ["records.shard-1-of-2.jsonl"]
    with RecordStore(records_path(a, 2, 2)) as s3:
        s3.append(make_record("p/1", "draft"))
    with pytest.raises(DamagedRecords, match="is in both"):
        load_records([a, b])
    with pytest.raises(ValueError, match="no records.shard"):
        load_records([tmp_path])


def test_records_are_one_json_document_per_line(tmp_path, make_record):
    path = records_path(tmp_path, 1, 1)
    fill(path, make_record, 2)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["decoder"] == "draft" for line in lines)


def test_records_of_the_schema_before_stops_are_still_read_and_the_first_schema_is_refused(tmp_path, make_record):
    from timing.record_store import OldSchema

    new_fields = ("prompt", "finish_reason", "stop_reason", "stop_strings", "stop_token_ids", "prompt_token_ids",
                  "load_average", "cpus", "lend_cores", "cut_pools", "cut_weigh", "pool_depths", "drafter_window",
                  "held_rows", "feature_bytes", "ignore_eos", "lookup", "copied")
    old = [{k: v for k, v in make_record(f"p/{i}", "draft").to_json().items() if k not in new_fields} | {"schema": 2}
           for i in range(2)]
    old[1]["stop"] = "eos"
    path = records_path(tmp_path, 1, 1)
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    read = read_records(path)
    assert [r.to_json() for r in read] == old
    assert [r.finish_reason for r in read] == ["length", "stop"] and read[0].prompt == ""
    first = {k: v for k, v in old[0].items() if k != "schema"}
    path.write_text(json.dumps(first) + "\n" + json.dumps(old[1]) + "\n")
    with pytest.raises(OldSchema, match=r":1: a record of schema 1, written before outputs were cut at the limit"):
        read_records(path)


def test_the_committed_sweeps_load_through_the_records_store():
    results = Path(__file__).resolve().parents[2] / "results"
    runs = sorted({p.parent for p in results.glob("*/records.shard-*-of-*.jsonl")})
    assert len(runs) >= 6
    for run in runs:
        lines = [line for path in shard_files(run) for line in path.read_text().splitlines()]
        records = load_records([run])
        assert [json.dumps(r.to_json(), separators=(",", ":")) for r in records] == lines  # as written, byte for byte
        assert {r.schema for r in records} <= {2, 3, 4}
