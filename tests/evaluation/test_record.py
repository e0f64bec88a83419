"""The typed decode record: every schema the project has written reads, each committed records file loads and
writes back as it was, and what is not a record is refused naming its line and field."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from evaluation.record import SCHEMA, DecodeRecord, SweepPlace, UnreadSchema

RESULTS = Path(__file__).resolve().parents[2] / "results"
COMMITTED = sorted(p for p in RESULTS.rglob("*.jsonl") if p.name.startswith("records") or "-t1" in p.name)
SINCE_3 = ("prompt", "finish_reason", "stop_reason", "stop_strings", "stop_token_ids")
SINCE_4 = ("prompt_token_ids", "load_average", "cpus", "feature_bytes", "ignore_eos", "lookup", "copied")
IN_3 = ("lend_cores", "cut_pools", "cut_weigh", "pool_depths", "drafter_window", "held_rows")  # added as 3 stood


def _decode_lines(path: Path) -> list[tuple[int, dict]]:
    lines = [(n, json.loads(line)) for n, line in enumerate(path.read_text().splitlines(), 1)]
    return [(n, obj) for n, obj in lines if obj.get("kind") == "decode"]


def test_the_committed_records_files_are_found():
    assert len(COMMITTED) >= 6 and all(_decode_lines(p) for p in COMMITTED)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_committed_records_file_loads_and_writes_back_as_it_was(path):
    for number, obj in _decode_lines(path):
        record = DecodeRecord.from_json(obj, f"{path}:{number}")
        assert json.dumps(record.to_json()) == json.dumps(obj)  # the same fields, order and types
        assert DecodeRecord.from_json(record.to_json()) == record


def test_the_committed_files_hold_every_schema_read():
    assert {obj["schema"] for p in COMMITTED for _, obj in _decode_lines(p)} == {2, 3, 4}


def test_a_new_record_writes_todays_schema_in_the_order_it_always_has(make_record):
    obj = make_record("p/0", "draft", grid_budget=8).to_json()
    assert obj["kind"] == "decode" and obj["schema"] == SCHEMA
    assert list(obj)[:4] == ["kind", "schema", "prompt_id", "category"]
    assert list(obj)[-5:] == ["finished", "grid_budget", "position", "warmup", "shard"]
    assert DecodeRecord.from_json(obj) == make_record("p/0", "draft", grid_budget=8)


def test_schema_3_reads_without_the_load_and_the_prompts_ids(make_record):
    obj = {k: v for k, v in make_record("p/0", "draft").to_json().items() if k not in SINCE_4} | {"schema": 3}
    record = DecodeRecord.from_json(obj)
    assert record.schema == 3 and record.load_average is None and record.prompt_token_ids is None
    assert record.to_json() == obj


def test_schema_2_derives_how_a_decode_ended_from_stop(make_record):
    base = make_record("p/0", "draft").to_json()
    obj = {k: v for k, v in base.items() if k not in SINCE_3 + SINCE_4 + IN_3} | {"schema": 2, "stop": "eos"}
    record = DecodeRecord.from_json(obj)
    assert (record.finish_reason, record.prompt, record.stop_strings) == ("stop", "", [])
    assert record.to_json() == obj  # schema 2 again: no field it never had
    assert DecodeRecord.from_json(obj | {"stop": "limit"}).finish_reason == "length"


def test_fields_added_while_a_schema_stood_may_be_absent(make_record):
    base = make_record("p/0", "draft").to_json()
    obj = {k: v for k, v in base.items() if k not in SINCE_3 + SINCE_4 + IN_3 + (
        "budgets", "top_k", "top_p", "min_p", "ahead", "ahead_hits", "ahead_seconds")} | {"schema": 2}
    record = DecodeRecord.from_json(obj)
    assert record.budgets is None and record.ahead_hits is None and record.to_json() == obj


@pytest.mark.parametrize("name, value, after, bad, refusal", [
    ("feature_bytes", [3072, 768], "held_rows", [1.5], "must be a list of integers"),
    ("ignore_eos", True, "stop_token_ids", 1, "must be true or false, got '1'"),
    ("lookup", 8, "feature_bytes", True, "must be an integer"),
    ("copied", [2, 0], "lookup", [0.5], "must be a list of integers"),
])
def test_fields_added_while_schema_4_stood_read_with_or_without_them(make_record, name, value, after, bad, refusal):
    sent = dataclasses.replace(make_record("p/0", "draft"), **{name: value})
    obj = sent.to_json()
    assert list(obj)[list(obj).index(after) + 1] == name
    assert DecodeRecord.from_json(obj) == sent
    before = {k: v for k, v in obj.items() if k != name}  # written before the field
    assert getattr(DecodeRecord.from_json(before), name) is None and DecodeRecord.from_json(before).to_json() == before
    with pytest.raises(ValueError, match=rf"^f:2: `{name}` {re.escape(refusal)}"):
        DecodeRecord.from_json(obj | {name: bad}, "f:2")
    with pytest.raises(ValueError, match=rf"^f:2: `{name}` is not a field of a schema 3 record$"):
        DecodeRecord.from_json({k: v for k, v in obj.items() if k not in SINCE_4} | {"schema": 3, name: value}, "f:2")


def test_schema_1_and_unknown_schemas_are_refused(make_record):
    obj = make_record("p/0", "draft").to_json()
    with pytest.raises(UnreadSchema, match=r"f:3: a record of schema 1"):
        DecodeRecord.from_json({k: v for k, v in obj.items() if k != "schema"}, "f:3")
    with pytest.raises(UnreadSchema, match="schema 9, unknown to this version"):
        DecodeRecord.from_json(obj | {"schema": 9}, "f:3")


@pytest.mark.parametrize("missing", ["prompt_id", "token_ids", "phases", "load_average", "stop_reason"])
def test_a_missing_required_field_is_named_with_its_line(make_record, missing):
    obj = {k: v for k, v in make_record("p/0", "draft").to_json().items() if k != missing}
    with pytest.raises(ValueError, match=rf"^runs/x.jsonl:7: a schema 4 record lacks `{missing}`$"):
        DecodeRecord.from_json(obj, "runs/x.jsonl:7")


@pytest.mark.parametrize("field, value, what", [
    ("turn", "0", "an integer"), ("turn", True, "an integer"), ("seconds", "1.0", "a number"),
    ("token_ids", [1, "2"], "a list of integers"), ("phases", {"wait": ["x"]}, "an object of per-phase"),
    ("ahead", 1, "true or false"), ("text", 3, "a string"), ("budget", 1.5, "an integer or a name")])
def test_a_field_of_the_wrong_type_is_named_with_its_line(make_record, field, value, what):
    obj = make_record("p/0", "draft").to_json() | {field: value}
    with pytest.raises(ValueError, match=rf"^f:2: `{field}` must be {what}"):
        DecodeRecord.from_json(obj, "f:2")


def test_a_field_no_schema_has_is_refused(make_record):
    with pytest.raises(ValueError, match=r"^f:4: `copied` is not a field of a schema 2 record$"):
        DecodeRecord.from_json(make_record("p/0", "draft").to_json() | {"schema": 2, "stop": "eos"}, "f:4")


def test_what_is_not_a_decode_record_is_refused():
    with pytest.raises(ValueError, match=r"^f:1: not a decode record \(list\)$"):
        DecodeRecord.from_json([1], "f:1")
    with pytest.raises(ValueError, match=r"^f:1: not a decode record \(kind 'run'\)$"):
        DecodeRecord.from_json({"kind": "run", "schema": 4}, "f:1")


def test_a_finish_reason_and_todays_fields_are_checked_where_a_record_is_built(make_record):
    with pytest.raises(ValueError, match="`finish_reason` must be stop or length"):
        dataclasses.replace(make_record("p/0", "draft"), finish_reason="eos")
    with pytest.raises(ValueError, match="a schema 4 record needs `cpus`"):
        dataclasses.replace(make_record("p/0", "draft"), cpus=None)
    with pytest.raises(ValueError, match=r"^f:1: `load_average` must be two numbers"):
        DecodeRecord.from_json(make_record("p/0", "draft").to_json() | {"load_average": [1.0]}, "f:1")


def test_a_sweep_and_a_benchmark_place_a_record(make_record):
    record = make_record("p/0", "ar", budget=8)
    placed = record.placed(SweepPlace("all", 3, True, "1/2"))
    assert (placed.setting_budget, placed.warmup, record.setting_budget, record.warmup) == ("all", True, 8, False)
    assert DecodeRecord.from_json(placed.to_json()).sweep == placed.sweep


def test_a_sweeps_place_is_read_whole_or_refused(make_record):
    obj = make_record("p/0", "draft", grid_budget=8).to_json()
    with pytest.raises(ValueError, match=r"^f:5: a schema 4 record lacks `shard`$"):
        DecodeRecord.from_json({k: v for k, v in obj.items() if k != "shard"}, "f:5")



def test_a_required_field_may_not_be_null_where_the_stop_reason_may(make_record):
    obj = make_record("p/0", "draft").to_json()
    with pytest.raises(ValueError, match=r"^f:6: `prompt_id` must be a string, got null$"):
        DecodeRecord.from_json(obj | {"prompt_id": None}, "f:6")
    with pytest.raises(ValueError, match=r"^f:6: `stop_reason` must be a string or an integer"):
        DecodeRecord.from_json(obj | {"stop_reason": 1.5}, "f:6")
    assert DecodeRecord.from_json(obj | {"stop_reason": 7}).stop_reason == 7
