"""Every command that writes files never writes over one it did not just write: each option that names a place
(a DIR or FILE) of every program is found here and sorted into what it writes, what it appends to (a sweep
resuming its own records), what it reads or names only; each writer refuses a target that exists, in one line
naming the flag that writes elsewhere and --overwrite, leaving it as it was, and writes over it when told to."""

from __future__ import annotations

import json
from importlib import import_module

import pytest

from bench.__main__ import BENCHMARKS
from launch.pair import plan
from pipeline.config import InputError
from tests.timing.conftest import make_options, sweep  # noqa: F401  (pytest finds fixtures by their names)
from timing.__main__ import PROGRAMS

# (program, option's dest): each writer with what it writes, planted before the run (a name beside the place)
WRITERS = {
    ("timing report", "out"): ("--out", "report.md"),
    ("timing export", "out_dir"): ("OUT_DIR", "smollm2-draft-temperature-0-budget-4.jsonl"),
    ("timing values", "out"): ("--out", "values.md"),
    ("launch/pair.sh", "record_rounds"): ("--record-rounds", "rounds.shard-1-of-1.bin"),
}
APPENDS = {("timing sweep", "out"), ("launch/pair.sh sweep", "out")}  # resume their own records, refuse others'
NAMES_ONLY = {("timing matched", "out")}  # the directory of the command it prints; it writes nothing
TRAINING = {("train-head", "work"), ("train-head", "out")}  # its work folder resumes; tests/training check both
READS = {"dirs", "run_dir", "runs", "recording", "key_dir", "echo_keys", "short"}  # inputs; keys are made once, kept


def parsers() -> dict:
    """Every program's parser: the timing programs, the benchmarks, the launcher's decode and sweep and its
    other routes."""
    from launch.pair import build_parser
    from programs import drafter_program, keys_program, pool_program
    from training import cli

    found = {f"timing {name}": import_module(f"timing.{name}").build_parser() for name in PROGRAMS}
    found |= {f"bench {name}": import_module(f"bench.{name}").build_parser() for name in BENCHMARKS}
    return found | {"launch/pair.sh": build_parser("decode"), "launch/pair.sh sweep": build_parser("sweep"),
                    "pool": pool_program.build_parser("pool"), "keys": keys_program.build_parser("keys"),
                    "drafter": drafter_program.build_parser(), "train-head": cli.build_parser("train-head")}


def places(parser) -> set[str]:
    """The dests of a parser's options and arguments that name a file or a folder."""
    return {a.dest for a in parser._actions
            if any(word in str(a.metavar or "") for word in ("DIR", "FILE", "PATH", "RUN"))
            or a.dest in ("out", "work")}


def test_every_option_naming_a_place_is_a_writer_that_refuses_or_is_known_not_to_write_over():
    found = {(name, dest) for name, parser in parsers().items() for dest in places(parser)}
    known = set(WRITERS) | APPENDS | NAMES_ONLY | TRAINING
    unsorted = {p for p in found if p not in known and p[1] not in READS}
    assert not unsorted, f"options naming a place, neither writers checked here nor known readers: {unsorted}"
    assert known <= found
    every = parsers()
    assert all("--overwrite" in every[name]._option_string_actions for name, _ in WRITERS)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, mock_session, make_options, sweep):
    """A mock sweep with its rounds recorded: what report, export and values read."""
    out = tmp_path_factory.mktemp("recorded")
    sweep(mock_session(), make_options(out, decoders="draft,root-draw", temperatures="0", budgets="4", warmup=1,
                                       record_rounds=True))
    return out


def run_writer(program: str, place, recorded, overwrite: bool) -> int:
    """Run `program` writing at `place` -> its exit status (2: refused)."""
    more = ["--overwrite"] if overwrite else []
    if program == "timing report":
        return import_module("timing.report").main([str(recorded), "--out", str(place), "--no-plots", *more])
    if program == "timing export":
        return import_module("timing.export").main([str(recorded), str(place), "--model-id", "smollm2", *more])
    if program == "timing values":
        return import_module("timing.values").main([str(recorded), "--out", str(place), "--no-plots", "--budgets", "4",
                                                    "--resamples", "20", *more])
    return _decode_run(place, more)


def _decode_run(place, more: list[str]) -> int:
    """The launcher's checks, then the target program's opening of the rounds file."""
    from programs.options import RunOptions
    from programs.target_program import _round_store

    try:
        plan(["--target", "mock", "--record-rounds", str(place), *more])
    except SystemExit as e:
        return e.code
    with _round_store(RunOptions(record_rounds=str(place), overwrite=bool(more)), {"kind": "run"}, 32):
        pass
    return 0


@pytest.mark.parametrize("writer", sorted(WRITERS), ids=lambda w: f"{w[0]} {w[1]}")
def test_each_writer_refuses_what_exists_and_writes_over_it_when_told_to(writer, recorded, tmp_path, capsys):
    flag, name = WRITERS[writer]
    (tmp_path / name).write_bytes(b"written before")
    assert run_writer(writer[0], tmp_path, recorded, overwrite=False) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"holds {name} already" in err[0], err
    assert flag in err[0] and "--overwrite" in err[0]
    assert (tmp_path / name).read_bytes() == b"written before"
    assert run_writer(writer[0], tmp_path, recorded, overwrite=True) == 0
    assert (tmp_path / name).read_bytes() != b"written before"


def test_a_report_over_its_own_run_directory_is_refused_the_second_time(recorded, capsys):
    """The report's default place is the sweep's own directory: the second report there would replace the
    first (perhaps committed) without a word."""
    report = import_module("timing.report")
    target = recorded / "report.md"
    target.unlink(missing_ok=True)
    assert report.main([str(recorded), "--no-plots"]) == 0
    first = target.read_text()
    capsys.readouterr()
    assert report.main([str(recorded), "--no-plots", "--resamples", "10"]) == 2
    assert "--out NEW_DIR" in capsys.readouterr().err and target.read_text() == first
    target.unlink()


def test_a_sweep_resumes_its_own_records_and_refuses_another_sweeps(recorded, mock_session, make_options, sweep):
    files = {p.name: p.read_bytes() for p in recorded.glob("records.*")}
    with pytest.raises(InputError, match="holds a sweep with other settings; use another `out`"):
        sweep(mock_session(), make_options(recorded, decoders="draft", temperatures="0", budgets="8", warmup=1))
    assert {p.name: p.read_bytes() for p in recorded.glob("records.*")} == files
    json.loads((recorded / "config.json").read_text())  # its config intact


def test_a_sweep_names_overwrite_in_its_next_commands_where_they_would_write_over(tmp_path, make_options):
    """A resumed sweep's directory may hold the report of its first records: the command it suggests then says
    --overwrite, since without it the report refuses."""
    from timing.sweep import next_commands

    options = make_options(tmp_path / "run", record_rounds=True)
    assert not any("--overwrite" in c for c in next_commands(options))
    (tmp_path / "run").mkdir()
    for name in ("report.md", "values.md"):
        (tmp_path / "run" / name).write_text("an earlier report\n")
    (tmp_path / "run-spec-bench").mkdir()
    (tmp_path / "run-spec-bench" / "smollm2-ar-temperature-0.jsonl").write_text("{}\n")
    report, export, values = (c for c in next_commands(options) if "matched" not in c)
    assert all(" --overwrite" in c.split("#")[0] for c in (report, export, values))
