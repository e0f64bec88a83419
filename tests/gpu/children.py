"""The GPU check's child processes: started in sessions of their own with the project on PYTHONPATH, their
output streamed as it comes, stopped with every process they started, and what they report read back,
also while they run (a crash or a hang then keeps what they reported last)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD_GRACE = 15.0  # seconds at most between the time a child is told to stop by and the time it is killed


def child_env(**extra: str) -> dict[str, str]:
    """This environment with the project first on PYTHONPATH (children run with -P), unbuffered output,
    and `extra` where this environment does not set those names already (a user's setting wins)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**extra, **os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def start(cmd: list[str], env: dict[str, str] | None = None, **streams) -> subprocess.Popen:
    """`cmd` in the checkout, in a session of its own (stop_group ends it with its children), no stdin."""
    streams = streams or dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return subprocess.Popen(cmd, cwd=ROOT, env=env or child_env(), text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL, **streams)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group (the process and the ones it started), SIGKILL if it lingers;
    nothing when the group is gone already."""
    if proc.poll() is not None:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def child_seconds(seconds: float) -> float:
    """The time a child is told to end by, when it is killed after `seconds`: CHILD_GRACE before, or a
    quarter of the time where that is less."""
    return seconds - min(CHILD_GRACE, seconds / 4)


def died(code: int) -> str:
    """How a child process ended, from its return code: 'was killed by SIGSEGV', 'exited with status 1'."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class ResultFile:
    """A JSON document a child rewrites (atomically) as it goes; read again only when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: int | None = None
        self.path.unlink(missing_ok=True)

    def changed(self) -> dict | None:
        try:
            stamp = self.path.stat().st_mtime_ns
            if stamp == self.seen:
                return None
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # not written yet (a rename is atomic: never half a document)
            return None
        self.seen = stamp
        return data


def write_result(path: Path, result: dict) -> None:
    """The child's side of ResultFile: the whole document, atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str), encoding="utf-8")
    os.replace(tmp, path)


def run_reporting_child(cmd: list[str], seconds: float, result_path: Path,
                        on_update: Callable[[dict], None] = lambda result: None,
                        env: dict[str, str] | None = None) -> dict:
    """The result a child process writes to result_path (JSON), its output streamed as it comes; each
    version it writes meanwhile goes to on_update. `cmd` should end by itself some seconds before `seconds`
    (child_seconds).

    A child that dies first (a segfault, an abort after a CUDA error) or runs past `seconds` (a hang) is
    reported as such, over the last figures it wrote; its process group is stopped in any case.
    """
    result = ResultFile(result_path)
    proc = start(cmd, env)
    hung = threading.Event()

    def stop() -> None:
        hung.set()
        stop_group(proc)

    timer = threading.Timer(max(seconds, 1), stop)
    timer.start()
    last: dict = {}
    try:
        for line in proc.stdout:
            print(line.rstrip("\n"))
            if (update := result.changed()) is not None:
                last = update
                on_update(update)
        code = proc.wait()
    finally:
        timer.cancel()
        stop_group(proc)
    last = result.changed() or last
    result_path.unlink(missing_ok=True)  # the report holds it: DIR keeps the check's own files alone
    if last and last.get("status") != "running":
        return last
    if hung.is_set():
        return {**last, "status": "out of time",
                "error": f"its process ran past {max(seconds, 1):.0f} s and was stopped"}
    return {**last, "status": "crashed", "error": f"its process {died(code)} before reporting"}
