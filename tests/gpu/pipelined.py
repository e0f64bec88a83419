"""Pipelined decodes through the launcher, as a user runs them, with a live line per decode.

The launcher runs as `python -P -m launch` with this interpreter and the project on PYTHONPATH (never
launch/pair.sh, whose setup would install packages from the network).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_PHASES = ("root", "wait", "select", "tree", "commit")  # a round's steps in the target process
HOST_PHASES = ("select", "commit")  # host work between the passes


@dataclass(frozen=True, slots=True)
class Record:
    """One decode as the launcher's --json line reports it."""

    decoder: str
    prompt: str
    tokens: list[int]
    seconds: float
    phases: dict[str, list[float]]  # seconds per round, by phase name

    @property
    def rounds(self) -> int:
        return len(next(iter(self.phases.values()), []))


def read_record(line: str) -> Record | None:
    """The launcher's JSON line for one decode (evaluation.record); None for any other line. The one place
    that knows the record's field names."""
    if not line.startswith("{"):
        return None
    raw = json.loads(line)
    if raw.get("kind") != "decode":
        return None
    return Record(raw["decoder"], raw["prompt_id"], raw["token_ids"], raw["seconds"], raw["phases"])


def decoder_names() -> list[str]:
    from pipeline.rules import DECODERS

    return list(DECODERS)


def launch_command(target: str, drafter: str, gpus: str | None, prompts: tuple[str, ...], max_new: int,
                   graphs: bool) -> list[str]:
    cmd = [sys.executable, "-P", "-m", "launch", "--target", f"random:{target}", "--drafter", f"random:{drafter}",
           "--decoders", ",".join(decoder_names()), "--max-new-tokens", str(max_new), "--json"]
    for text in prompts:
        cmd += ["--prompt", text]
    if gpus is not None:
        cmd += ["--gpus", gpus]
    if not graphs:
        cmd.append("--no-graphs")
    return cmd


def child_env() -> dict[str, str]:
    """This environment with the project first on PYTHONPATH (children run with -P) and unbuffered output."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def run_pair(cmd: list[str], timeout: float, on_record: Callable[[Record], None],
             echo: Callable[[str], None]) -> tuple[int, list[Record]]:
    """Run the launcher; each record goes to on_record and every other line to echo as it comes.

    Returns (exit status, records); 124 when it ran past `timeout` and was stopped with its processes.
    """
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1, start_new_session=True, stdin=subprocess.DEVNULL)
    records: list[Record] = []

    def read_stdout() -> None:
        for line in proc.stdout:
            record = read_record(line)
            if record is None:
                echo(line.rstrip("\n"))
            else:
                records.append(record)
                on_record(record)

    readers = [threading.Thread(target=read_stdout, daemon=True),
               threading.Thread(target=lambda: [echo(line.rstrip("\n")) for line in proc.stderr], daemon=True)]
    for reader in readers:
        reader.start()
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        status = 124
    finally:  # also on KeyboardInterrupt: no process of the pair outlives the check
        stop_group(proc)
    for reader in readers:
        reader.join(5)
    return status, records


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's group (the launcher and both its processes), SIGKILL if it lingers;
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


def median_ms(values: list[float]) -> float | None:
    return 1e3 * statistics.median(values) if values else None


def summarize(records: list[Record]) -> dict[str, dict]:
    """Per decoder: tokens per second, and medians per round of its time, each phase and the host work."""
    out = {}
    for decoder in dict.fromkeys(r.decoder for r in records):
        rows = [r for r in records if r.decoder == decoder]
        names = list(dict.fromkeys(k for r in rows for k in r.phases))
        per_round = [dict(zip(names, values)) for r in rows for values in zip(*(r.phases[k] for k in names))]
        out[decoder] = {
            "tok_per_s": sum(len(r.tokens) for r in rows) / sum(r.seconds for r in rows),
            "rounds": len(per_round),
            "median_round_ms": median_ms([sum(p.get(k, 0.0) for k in TARGET_PHASES) for p in per_round]),
            **{f"median_{k}_ms": median_ms([p[k] for p in per_round]) for k in names},
            "median_host_ms": median_ms([sum(p.get(k, 0.0) for k in HOST_PHASES) for p in per_round]),
        }
    return out


def output_differences(a: list[Record], b: list[Record]) -> list[str]:
    """(decoder, prompt) pairs whose tokens differ between two runs, or that only one run has."""
    tokens_a = {(r.decoder, r.prompt): r.tokens for r in a}
    tokens_b = {(r.decoder, r.prompt): r.tokens for r in b}
    return [f"{d} prompt {p}" for d, p in sorted(tokens_a.keys() | tokens_b.keys())
            if tokens_a.get((d, p)) != tokens_b.get((d, p))]


def live_line(label: str, record: Record) -> str:
    rounds = [sum(values) for values in zip(*(record.phases.get(k, []) for k in TARGET_PHASES if k in record.phases))]
    median = f"{median_ms(rounds):.2f}" if rounds else "-"
    return (f"  {label:<9} {record.decoder:<11} prompt {record.prompt}: {len(record.tokens):4d} tokens in "
            f"{record.seconds:7.2f} s ({len(record.tokens) / record.seconds:7.1f} tok/s), {record.rounds:4d} "
            f"rounds, median round {median} ms")
