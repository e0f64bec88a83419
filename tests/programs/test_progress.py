"""A run of several decodes says its count and time left: in each log line, and as a bar on a terminal."""

from __future__ import annotations

import io
import re

from programs.options import RunOptions
from programs.progress import Progress
from programs.target_program import decode_count, load_note, plan_text
from evaluation.prompts import Prompt
from pipeline.settings import DecodeConfig


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_lines_carry_the_count_and_the_time_left():
    stream = io.StringIO()
    with Progress(3, stream=stream) as progress:
        texts = [progress.step() for _ in range(3)]
    assert re.fullmatch(r"1/3, about \d+ s left", texts[0]) and texts[2] == "3/3"
    assert stream.getvalue() == ""  # not a terminal: no bar


def test_a_terminal_gets_a_bar_and_one_decode_gets_nothing():
    terminal = Terminal()
    with Progress(4, stream=terminal) as progress:
        progress.step("prompt/0 ar")
    assert "1/4" in terminal.getvalue() and "prompt/0 ar" in terminal.getvalue()
    alone = Terminal()
    with Progress(1, stream=alone) as progress:
        assert progress.step() == ""
    assert alone.getvalue() == ""


def test_the_plan_counts_turns_decoders_and_seeds():
    prompts = [Prompt("a", "c", "x"), Prompt("b", "c", "y", ("z",))]
    run = RunOptions(decode=DecodeConfig(), decoders="ar,root-draw", num_seeds=2)
    assert decode_count(prompts, run) == 3 * 2 * 2
    assert plan_text(prompts, run, 12) == ("2 prompts (3 turns) x 2 decoders x 2 seeds = 12 decodes of up to 256 new "
                                           "tokens (3,072 in all); the time left follows each decode")


def test_a_busy_machine_is_said_before_the_first_decode():
    assert load_note(2.9, 2) == ""  # the pair keeps 3 busy on 2 CPUs: no other work
    busy = load_note(7.8, 2)
    assert busy.startswith("; the machine is busy (load average 7.8 on 2 CPUs, the pair keeps 3 busy itself)")
    assert "take longer than on a quiet machine" in busy


def test_a_process_knows_how_long_ago_it_started():
    import subprocess
    import sys

    code = "import time; time.sleep(0.5); from programs.progress import process_age; print(process_age())"
    from tests.processes.proc_tools import ROOT

    age = float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                               timeout=60).stdout)
    assert 0.5 <= age < 60


def test_budget_autos_timing_runs_before_the_first_decode_and_out_of_the_time_left(mock_session, monkeypatch, caplog):
    """`ar` first, then two decodes of budget auto: the passes are timed before `ar`'s decode, once, and the
    time left after each decode counts decodes only (a clock that the timing moves by 1000 s, a decode by 1 s)."""
    from pipeline.budget import MeasuredPasses, candidate_sizes
    from programs import decodes, progress

    clock, events = [0.0], []
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    session = mock_session()
    sizes = dict.fromkeys(candidate_sizes(8)[1:], 1e-3)

    def measure(cap):
        events.append("timing")
        clock[0] += 1000
        return MeasuredPasses(1.0, 1e-3, sizes, sizes, 0.0, 0.0)

    def decode(*args, **kw):
        events.append("decode")
        clock[0] += 1
        return inner(*args, **kw)

    session.budgets.measure, inner, session.decode = measure, session.decode, decode
    todo = [decodes.Decode(Prompt(f"p{i}", "c", "Once upon a time"), DecodeConfig(d, 0.0, "auto", 8, budget_max=8))
            for i, d in enumerate(["ar", "root-draw", "draft"])]
    with caplog.at_level("INFO", logger="target"), Progress(3) as counter:
        assert len(list(decodes.run_decodes(session, todo, counter))) == 3
    assert events == ["timing", "decode", "decode", "decode"]
    said = [r.getMessage() for r in caplog.records if r.name == "target"]
    assert [s[s.index("["):] for s in said] == ["[1/3, about 2 s left]", "[2/3, about 1 s left]", "[3/3]"]
