"""A pair from a script: an interrupted decode never leaves a wrong answer behind, and no child process or
socket folder outlives the pair, however the script ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from launch.api import Pair, PairClosed
from launch.pair_api import CLOSE_WAIT_S
from tests.processes.proc_tools import ROOT

GONE_S = 30.0  # bound on a child's exit after its parent went


def _gone(pid: int, timeout: float = GONE_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has exited
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def _interrupted_in(obj, name: str, call: int) -> None:
    """Make obj.name raise KeyboardInterrupt on its `call`-th call (as a Ctrl-C landing there would)."""
    method, calls = getattr(obj, name), [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            setattr(obj, name, method)
            raise KeyboardInterrupt
        return method(*args, **kwargs)
    setattr(obj, name, wrapped)


def test_an_interrupted_decode_leaves_the_in_process_pair_answering_correctly():
    with Pair("mock") as pair:
        expected = pair.decode("again", decoder="root-draw", max_new_tokens=16)
        # The root pass runs while the drafter grows the round's pool: interrupted there, a pool is on its way.
        _interrupted_in(pair.session.target, "root_pass", 3)
        with pytest.raises(KeyboardInterrupt):
            pair.decode("long", decoder="root-draw", max_new_tokens=80)
        again = pair.decode("again", decoder="root-draw", max_new_tokens=16)
        assert again.token_ids == expected.token_ids and again.prompt_id == expected.prompt_id
        assert pair.decode("other", decoder="ar", max_new_tokens=8).decoder == "ar"
        children = list(pair._children.procs)
        t0 = time.monotonic()
    # the drafter exits on its Shutdown, not when close()'s wait runs out (then it is stopped: a negative status)
    assert [c.returncode for c in children] == [0] * len(children) and time.monotonic() - t0 < CLOSE_WAIT_S


def test_an_interrupted_decode_leaves_the_target_process_pair_answering_correctly():
    with Pair("mock", target_process=True) as pair:
        # A Ctrl-C while the second turn's reply is awaited: the rest of the request's lines are still to come.
        _interrupted_in(pair._target, "_answer", 2)
        with pytest.raises(KeyboardInterrupt):
            pair.chat(["long"] * 6, decoder="root-draw", max_new_tokens=200)
        outs = [pair.decode(f"again-{i}", decoder="ar", max_new_tokens=16) for i in range(2)]
        for i, out in enumerate(outs):
            assert (out.decoder, out.record.max_new_tokens, out.turn) == ("ar", 16, 0)
            assert out.prompt_id == pair.decode(f"again-{i}", decoder="ar", max_new_tokens=16).prompt_id
        assert outs[0].prompt_id != outs[1].prompt_id


class Tee:
    """A pipe's reader that keeps every line read."""

    def __init__(self, stream) -> None:
        self.stream, self.lines = stream, []

    def readline(self) -> str:
        line = self.stream.readline()
        self.lines.append(line)
        return line


def test_an_interrupted_request_stops_in_the_target_process_so_the_next_starts_at_once():
    import json

    with Pair("mock", target_process=True) as pair:
        tee = pair._target.proc.stdout = Tee(pair._target.proc.stdout)
        _interrupted_in(pair._target, "_answer", 1)  # a Ctrl-C as the caller starts waiting for the record
        with pytest.raises(KeyboardInterrupt):
            pair.decode("a long story", decoder="root-draw", max_new_tokens=1800)
        out = pair.decode("short", decoder="ar", max_new_tokens=4)
        assert len(out.token_ids) == 4
        answers = [json.loads(line) for line in tee.lines]
        first = [a["kind"] for a in answers if a.get("request") == 1]
        assert first == ["cancelled", "done"]  # stopped at its next round: no record of 1,800 tokens was made


def test_a_closed_pair_says_so():
    pair = Pair("mock")
    pair.close()
    with pytest.raises(PairClosed, match="this pair is closed"):
        pair.decode("x")
    pair.close()  # closing again does nothing


SCRIPT = """
import os, sys, time
from launch.api import Pair
pair = Pair("mock"{options})
print(*[p.pid for p in pair._children.procs], pair._children.folder, flush=True)
pair.decode("hello", max_new_tokens=4)
{ending}
"""


ENDINGS = {"exit": "sys.exit(0)", "del": "del pair; print('deleted', flush=True); time.sleep(60)", "end": "pass",
           "killed": "time.sleep(600)", "held": "pair.me = pair  # alive until the interpreter's teardown"}


@pytest.mark.parametrize("options, ending", [
    *[pytest.param("", code, id=f"in-process-{name}") for name, code in ENDINGS.items()],
    *[pytest.param(", target_process=True", code, id=f"target-process-{name}",
                   marks=() if name == "killed" else pytest.mark.slow) for name, code in ENDINGS.items()]])
def test_no_child_or_socket_folder_outlives_a_script_that_did_not_close(tmp_path, ending, options):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT.format(options=options, ending=ending)))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        *pids, folder = proc.stdout.readline().split()
        assert pids and os.path.isdir(folder)
        if ending.startswith("del"):
            assert proc.stdout.readline().strip() == "deleted"
        elif ending.startswith("time.sleep"):
            time.sleep(1.0)
            proc.send_signal(signal.SIGKILL)
        if not ending.startswith("del"):
            _, err = proc.communicate(timeout=GONE_S)
            assert ending.startswith("time.sleep") or err == "", err  # nothing said at exit, the children's included
        assert all(_gone(int(pid)) for pid in pids), "a child outlived its pair"
        if ending.startswith("time.sleep"):  # SIGKILL leaves no chance to clean up: the next pair does
            Pair("mock").close()
        assert not os.path.exists(folder)
    finally:
        proc.kill()
        proc.wait()
