"""The pair's child processes, as the launcher (launch.pair) and the Python API (launch.pair_api) start and stop them.

A child gets SIGTERM when the process that started it dies (PR_SET_PDEATHSIG, tied to the starting thread), and a
pair's drafter exits once its one target has gone (`drafter_command`). Stopping: each child, the last started
first, may exit on its own for `settle` seconds, then gets SIGTERM and `grace` seconds, then SIGKILL; a stop
signal arriving meanwhile (a second Ctrl-C) kills them at once. The pair's private socket folder goes last."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

from models.options import TARGET_ONLY, ModelOptions
from programs.cli import to_argv
from programs.options import KeyOptions

GRACE_SECONDS = 5.0  # how long a process may take to exit after SIGTERM (or after its peer ended)
PY = [sys.executable, "-P", "-m"]  # -P: the caller's folder (a models/, say) must not shadow our packages


def drafter_command(options: ModelOptions, endpoint: str, max_request_context: int, log_level: str,
                    keys: KeyOptions | None = None) -> list[str]:
    """The command line of a drafter private to one target: it binds `endpoint`, takes a Hello of at most
    `max_request_context` slots, and exits when its target has gone, even if its parent's death goes unsaid."""
    return PY + ["programs.drafter_program", *to_argv(options, skip=TARGET_ONLY), "--endpoint", endpoint,
                 *(to_argv(keys) if keys is not None else []), "--max-request-context", str(max_request_context),
                 "--exit-with-target", "--log-level", log_level]


class Children:
    """The processes of one pair, started to die with this process, stopped together; `folder`: the private
    socket folder removed with them. With `own_group`, each runs in a process group of its own, so that a
    terminal's Ctrl-C reaches the caller alone (the Python API's choice)."""

    def __init__(self, folder: str | None = None, *, own_group: bool = False) -> None:
        self.procs: list[subprocess.Popen] = []
        self.folder = folder
        self.own_group = own_group

    def start(self, argv: list[str], env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
        """Start `argv` with the environment's `env` overrides (other Popen arguments as given)."""
        group = {"process_group": 0} if self.own_group else {}
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, preexec_fn=die_with(os.getpid()),
                                **group, **popen)
        self.procs.append(proc)
        return proc

    def stop(self, settle: float = 0.0, grace: float = GRACE_SECONDS, *, take_signals: bool = False) -> None:
        """Stop every child (see the module docstring), then remove the socket folder."""
        try:
            stop_processes(self.procs, settle, grace, take_signals=take_signals)
        finally:
            if self.folder:
                shutil.rmtree(self.folder, ignore_errors=True)


def stop_processes(procs: list[subprocess.Popen], settle: float = 0.0, grace: float = GRACE_SECONDS, *,
                   take_signals: bool = False) -> None:
    """Let `procs` exit on their own within `settle` s, then stop each still running, the last first (SIGTERM,
    SIGKILL after `grace` s). With `take_signals`, a stop signal meanwhile kills them at once; the handlers
    before are restored after."""
    def kill_now(_signum, _frame):
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    previous = {s: signal.signal(s, kill_now) for s in (signal.SIGTERM, signal.SIGINT)} if take_signals else {}
    try:
        deadline = time.monotonic() + settle
        for proc in reversed(procs):
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in reversed(procs):
            stop_process(proc, grace)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def stop_process(proc: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM `proc` if it runs, SIGKILL after `grace` s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def die_with(parent: int):
    """A preexec_fn: the child gets SIGTERM when `parent` dies, however it dies."""
    def arm() -> None:
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def status(returncode: int) -> int:
    """A child's return code as a shell exit status (128 + N for a child killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode
