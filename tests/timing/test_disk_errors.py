"""A sweep whose disk fills up, or whose file system turns read-only, stops with one line naming the file and
exit status 2; the records before the failure stay intact and rerunning resumes. A sweep refused by another
sweep's lock records nothing, not even a start."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from pipeline.config import InputError
from programs.cli import EXIT_USAGE, Flags, run_program
from timing import record_store as records_module
from timing.record_store import RecordStore, RecordsUnwritable, read_records, records_path


class FailingWrites:
    """os.fsync that fails from its (n + 1)-th call on, with `code`, as a full or read-only disk would."""

    def __init__(self, n: int, code: int) -> None:
        self.n, self.code, self.real = n, code, os.fsync

    def __call__(self, fd: int) -> None:
        if self.n == 0:
            raise OSError(self.code, os.strerror(self.code))
        self.n -= 1
        self.real(fd)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["full", "read-only"])
def test_a_refused_write_stops_the_sweep_with_one_line_and_resumes(tmp_path, mock_session, make_options, sweep,
                                                                   monkeypatch, caplog, code):
    options = make_options(tmp_path, limit_prompts=2)
    whole = sweep(mock_session(), make_options(tmp_path / "whole", limit_prompts=2))
    # the new file's directory, then 5 records land; the 6th fails
    monkeypatch.setattr(records_module.os, "fsync", FailingWrites(6, code))
    with caplog.at_level(logging.ERROR):
        status = run_program(lambda: sweep(mock_session(), options) and 0, Flags(out="--out"))
    assert status == EXIT_USAGE
    path = records_path(tmp_path, 1, 1)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert lines == [f"cannot write {path}: {os.strerror(code)}. The 5 records before it are intact; free space (or "
                     f"name another --out) and rerun the same command to resume"]
    assert len(read_records(path)) == 5 and path.read_bytes().endswith(b"\n")  # no torn line is left
    monkeypatch.undo()
    resumed = sweep(mock_session(), options)
    assert {(r.prompt_id, r.decoder, r.temperature, r.budget, r.warmup) for r in resumed.records} == \
        {(r.prompt_id, r.decoder, r.temperature, r.budget, r.warmup) for r in whole.records}


def test_a_partial_line_of_a_refused_write_is_cut_off(tmp_path, make_record, monkeypatch):
    path = tmp_path / "records.shard-1-of-1.jsonl"
    with RecordStore(path) as store:
        store.append(make_record("p", "draft"))
        size = path.stat().st_size

        def half_then_full(data):  # the disk fills in the middle of the line
            os.write(store._file.fileno(), bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(store._file, "write", half_then_full, raising=False)
        with pytest.raises(RecordsUnwritable, match=r"The 1 records before it are intact"):
            store.append(make_record("p", "pearl"))
    assert path.stat().st_size == size and len(read_records(path)) == 1


def test_a_sweep_refused_by_the_lock_records_no_start(tmp_path, mock_session, make_options, sweep):
    options = make_options(tmp_path, limit_prompts=1)
    sweep(mock_session(), options)
    before = (tmp_path / "config.json").read_text()
    with RecordStore(records_path(tmp_path, 1, 1)):  # another sweep writes this shard
        with pytest.raises(InputError, match=r"another sweep is writing .*records.shard-1-of-1.jsonl; wait for it or "
                                             r"use another `out` or `shard`"):
            sweep(mock_session(), options)
    assert (tmp_path / "config.json").read_text() == before  # no start recorded for the refused sweep
