"""Running the processes as a user would, with a bound on every wait so that no test can hang.

Output goes to files, not pipes: a process that logs more than a pipe holds would otherwise block on a
test that reads it only at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAIR_SH = str(ROOT / "launch" / "pair.sh")
START_S = 60.0  # importing torch in two processes at once on a loaded two-core machine takes seconds
# A decode run that lasts far longer than any test: for killing, stopping and timing out a live pair.
LONG_RUN = ["--decoders", "draft", "--num-seeds", "1000", "--max-new-tokens", "200", "--prompt", "Once upon a time"]


def python_m(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _terminal_signals() -> None:
    """SIGINT and SIGQUIT as a terminal's foreground job has them: a shell starts background jobs (tests
    run with `&`) with both ignored, and the children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Running:
    """A process started with stdout and stderr in files under `directory`."""

    def __init__(self, argv: list[str], directory: Path, name: str, **popen) -> None:
        self.out_path = directory / f"{name}.out"
        self.err_path = directory / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         preexec_fn=_terminal_signals, **popen)
        self.pid = self.proc.pid

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_for_log(self, text: str, timeout: float = START_S) -> None:
        """Wait until `text` appears on stderr; fails if the process exits or the time runs out first."""
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            assert self.proc.poll() is None, f"exited with {self.proc.returncode} before {text!r}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.stderr}"
            time.sleep(0.05)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.stderr}") from None

    def kill(self) -> None:
        """Last-resort cleanup: SIGKILL (which also ends a stopped process) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def children(pid: int) -> dict[int, str]:
    """Live child processes of `pid` -> their command lines (from /proc, which every Linux has)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # exited while we looked
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # the command name in parentheses may hold spaces
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(entry)] = cmdline
    return out


def role_pids(launcher_pid: int, timeout: float = START_S) -> tuple[int, int]:
    """(drafter pid, target pid): the launcher's two children, once both exist."""
    deadline = time.monotonic() + timeout
    while True:
        kids = children(launcher_pid)
        drafter = [p for p, cmd in kids.items() if "-m programs.drafter_program" in cmd]
        target = [p for p, cmd in kids.items() if "-m programs.target_program" in cmd]
        if drafter and target:
            return drafter[0], target[0]
        assert time.monotonic() < deadline, f"the launcher's children are {kids}"
        time.sleep(0.05)


def is_gone(pid: int) -> bool:
    """The process has exited: no /proc entry, or only a zombie waiting to be reaped by its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def wait_gone(pids, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(is_gone(p) for p in pids):
        assert time.monotonic() < deadline, f"still running after {timeout} s: {[p for p in pids if not is_gone(p)]}"
        time.sleep(0.05)


def kill_leftovers(pids) -> None:
    """Cleanup after a failed test: SIGKILL whatever of `pids` still runs."""
    for pid in pids:
        if not is_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
