"""Command-line endings that once were tracebacks: a reader of stdout that leaves ends the program quietly,
an unknown random model shape or a directory that holds no checkpoint is a usage error naming the option,
a drafter's address where nothing listens is said within seconds, not after the ready timeout, and a stop
request during a drafter's close takes effect once it is closed instead of leaving it hanging, and a stop
signal whose exception a finalizer dropped still stops the launcher and the drafter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from models.shapes import random_model
from pipeline.config import ConfigError, InputError

LEAVING_READER = """
import sys
from programs.cli import Flags, run_program

def body():
    for _ in range(100_000):
        print("x" * 100)
    return 0

sys.exit(run_program(body, Flags({})))
"""


def test_a_reader_that_leaves_ends_the_program_quietly_with_sigpipes_status():
    writer = subprocess.Popen([sys.executable, "-c", LEAVING_READER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    writer.stdout.read(1)
    writer.stdout.close()  # as `| head -c 1` does
    _, err = writer.communicate(timeout=60)
    assert writer.returncode == 141
    assert err == b""


def test_an_unknown_random_shape_names_the_model_option():
    with pytest.raises(ConfigError, match=r"`model` random:nope: unknown random model shape 'nope'; known: "):
        random_model("nope", "cpu", None)


def test_a_file_where_a_directory_belongs_is_a_usage_error_naming_it(tmp_path, capsys):
    from timing.export import main as export_main
    from evaluation.paths import output_dir
    from timing.report import main as report_main

    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(InputError, match=rf"--out {file} is not a directory"):
        output_dir(file, "--out")
    assert report_main([str(file)]) == 2
    assert f"the run directory {file} is not a directory" in capsys.readouterr().err
    assert export_main([str(file), str(tmp_path / "answers")]) == 2
    assert f"the run directory {file} is not a directory" in capsys.readouterr().err


def test_a_records_file_that_is_a_device_is_refused_not_read_forever(tmp_path):
    from timing.record_store import read_records

    link = tmp_path / "records.jsonl"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match=rf"^the records file '{link}' is a device, not a regular file$"):
        read_records(link)


@pytest.mark.parametrize("kind, said", [("dir", "is a directory"), ("fifo", "is a FIFO"), ("dangling", "is a link to "),
                                        ("zero", "is a device")])
def test_a_records_or_rounds_file_that_is_no_file_is_refused_in_one_line(tmp_path, kind, said):
    from evaluation.rounds_file import RoundStore, read_rounds
    from timing.record_store import read_records

    for name in ("records.jsonl", "rounds.bin"):
        path = tmp_path / name
        {"dir": path.mkdir, "fifo": lambda: os.mkfifo(path), "dangling": lambda: path.symlink_to(tmp_path / "gone"),
         "zero": lambda: path.symlink_to("/dev/zero")}[kind]()
    with pytest.raises(InputError, match=f"^the records file '{tmp_path}/records.jsonl' {said}"):
        read_records(tmp_path / "records.jsonl")
    with pytest.raises(InputError, match=f"^the rounds file '{tmp_path}/rounds.bin' {said}"):
        read_rounds(tmp_path / "rounds.bin")
    with pytest.raises(InputError, match=f"^the rounds file {tmp_path}/rounds.bin {said}"):
        RoundStore(tmp_path / "rounds.bin", {})


def test_an_unknown_random_shape_is_refused_before_anything_loads():
    from models.options import ModelOptions

    with pytest.raises(ConfigError, match=r"`model` 'random:nope': unknown random model shape 'nope'; known: "):
        ModelOptions(model="random:nope")


@pytest.mark.parametrize("content", [(), ("weights.bin",)], ids=["empty", "no-config"])
def test_a_directory_that_holds_no_checkpoint_is_refused_naming_the_flag(tmp_path, content):
    from models.options import ModelOptions

    for name in content:
        (tmp_path / name).write_text("x")
    said = "is empty" if not content else "holds no config.json"
    with pytest.raises(ConfigError, match=rf"`model` '{tmp_path}': the directory {said}: it is not a transformers "
                                          rf"checkpoint"):
        ModelOptions(model=str(tmp_path))
    with pytest.raises(ConfigError, match=rf"`model` '{tmp_path}:int8': the directory {said}"):
        ModelOptions(model=f"{tmp_path}:int8")


@pytest.mark.parametrize("flag", ["--target", "--drafter"])
def test_an_empty_directory_as_a_model_ends_the_launcher_with_one_line_naming_the_flag(tmp_path, flag):
    other = "--drafter" if flag == "--target" else "--target"
    done = subprocess.run([sys.executable, "-m", "launch", flag, str(tmp_path), other, "mock", "--prompt", "hi"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (f"launch/pair.sh: error: {flag} '{tmp_path}': the directory is "
                                                    f"empty: it is not a transformers checkpoint (a model saved with "
                                                    f"save_pretrained)")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_directory_transformers_cannot_read_is_one_line_naming_the_model(tmp_path):
    import torch

    from models.load import ModelNotFound, _load_hf_quietly

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelNotFound, match=rf"^model '{tmp_path}': the directory is not a transformers checkpoint "
                                            rf"\([^\n]+\)$"):
        _load_hf_quietly(str(tmp_path), torch.float32, False)


def test_a_target_whose_drafter_address_answers_nothing_stops_naming_it(capsys):
    from programs.target_program import main as target_main
    from protocol.transport import loopback_tcp_endpoint

    address = loopback_tcp_endpoint()
    assert target_main(["--model", "mock", "--endpoint", address, "--connect-timeout", "0.5", "--prompt", "hi"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"[target] error: nothing answers at {address} within 0.5 s: no drafter listens there (start it, or check "
        f"the address; raise --connect-timeout for one that takes longer to start)")


@pytest.mark.slow
def test_the_launcher_against_a_drafter_address_where_nothing_listens_ends_in_seconds():
    from protocol.transport import loopback_tcp_endpoint

    address = loopback_tcp_endpoint()
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "launch", "--target", "mock", "--drafter-at", address, "--prompt",
                           "hi"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and time.monotonic() - t0 < 60  # the ready timeout is 600 s
    assert done.stderr.strip().splitlines()[-1].startswith(f"[target] error: nothing answers at {address} within 5 s")


CLOSE_UNDER_SIGNAL = """
import contextlib, os, random, signal, sys, time
from programs.cli import uninterrupted
from protocol.transport import Listener, private_ipc_endpoint

def stop(signum, frame):
    raise SystemExit(143)

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGALRM, stop)
listener = Listener.bind(private_ipc_endpoint())
guarded = uninterrupted(signal.SIGTERM, signal.SIGALRM) if sys.argv[1] == "guarded" else contextlib.nullcontext()
if sys.argv[2] == "now":
    with guarded:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before the close starts
        listener.close()
        print("closed", flush=True)
    print("not reached", flush=True)
delay = float(sys.argv[2])
signal.setitimer(signal.ITIMER_REAL, delay)
end = time.perf_counter() + delay * random.random()
while time.perf_counter() < end:
    pass
with guarded:
    listener.close()
time.sleep(1.0)  # an alarm that has not come yet ends the process here
"""


def test_a_stop_request_during_the_listeners_close_takes_effect_once_it_is_closed():
    done = subprocess.run([sys.executable, "-c", CLOSE_UNDER_SIGNAL, "guarded", "now"], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout == "closed\n" and done.returncode == 143, (done.stdout, done.stderr)


@pytest.mark.slow
def test_stop_requests_at_any_moment_of_the_close_never_leave_a_drafter_hanging():
    """Unguarded, a stop request raised inside ZeroMQ's teardown left 7 of 60 such processes waiting forever."""
    for i in range(40):
        delay = f"{0.0005 + 0.0035 * i / 40:.5f}"
        done = subprocess.run([sys.executable, "-c", CLOSE_UNDER_SIGNAL, "guarded", delay], capture_output=True,
                              timeout=30)
        assert done.returncode == 143, done.stderr


class Running:
    """A child process, as the launcher's supervision sees it, that does not end."""

    returncode = None

    def poll(self):
        return None


@pytest.mark.parametrize("with_drafter", [True, False])
def test_a_stop_signal_whose_interrupt_was_dropped_still_ends_the_launchers_supervision(with_drafter):
    """The launcher's handler notes the signal and raises KeyboardInterrupt; one raised while a finalizer runs is
    dropped, and the supervision, waiting for a child to end, raises it again."""
    from launch.pair import _supervise

    stopped_by: list[int] = []
    threading.Timer(0.2, stopped_by.append, [signal.SIGTERM]).start()  # the handler ran; its exception was lost
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        _supervise(Running(), Running() if with_drafter else None, stopped_by)
    assert time.monotonic() - t0 < 5.0


def test_the_drafters_stop_signals_are_raised_again_at_its_next_wait(monkeypatch, tmp_path):
    from programs import drafter_program
    from protocol import wakeup

    handlers = {}

    def run_program(body, flags):
        handlers.update({s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)})
        return 0

    monkeypatch.setattr(drafter_program, "run_program", run_program)
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert drafter_program.main(["--model", "mock", "--endpoint", f"ipc://{tmp_path}/d.sock"]) == 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    assert handlers == {signal.SIGTERM: wakeup.stop, signal.SIGINT: wakeup.stop}


def test_a_second_stop_signal_during_shutdown_kills_the_pair_at_once_without_a_traceback():
    """The launcher stops its processes with SIGTERM and a grace period; a stop signal arriving meanwhile (a
    second Ctrl-C) kills them at once instead of raising out of the shutdown."""
    from launch import children

    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        proc.stdout.readline()  # its handler is set
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        threading.Timer(0.5, os.kill, [os.getpid(), signal.SIGINT]).start()
        t0 = time.monotonic()
        children.stop_processes(procs, take_signals=True)  # would wait GRACE_SECONDS for each without it
        assert time.monotonic() - t0 < children.GRACE_SECONDS
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for proc in procs:
            proc.kill()
    assert [proc.wait(5) for proc in procs] == [-signal.SIGKILL] * 2


@pytest.mark.parametrize("flags, message", [
    (["--pool-depth", "1000"], "--pool-depth must be at most 64 (the pool levels the protocol carries), got 1000"),
    (["--pool-topk", "100000"], "--pool-topk 100000, --pool-depth 8 and --pool-expand 10 make a pool of "),
    (["--budget", str(10**20)], "--budget must be at most 65536 (a tree holds at most a pool's candidates)"),
    (["--max-new-tokens", str(10**12)], "--max-new-tokens must be at most 1048576"),
    (["--endpoint", "tcp://999.1.1.1:5555"], "--endpoint 'tcp://999.1.1.1:5555': 999.1.1.1 is not an IP address"),
])
def test_settings_beyond_the_protocols_limits_are_usage_errors_before_any_process_starts(flags, message):
    done = subprocess.run([sys.executable, "-m", "launch", "--target", "mock", *flags], capture_output=True,
                          text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "[drafter]" not in done.stderr
