"""A drafter alone on a "second host" (`launch/pair.sh drafter` on every interface, so CURVE only) and targets
run against it with `--drafter-at` one after another, as a user following the README would; a target whose
key the drafter does not know, or that names no key, is refused; a drafter that fails to load stops the
launcher with the drafter's own status."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess

import pytest

from evaluation.record import DecodeRecord

from tests.processes.proc_tools import PAIR_SH, START_S, Running

RUN = ["--target", "mock", "--json", "--decoders", "ar,root", "--prompt", "hi", "--max-new-tokens", "8"]


def pair(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PAIR_SH, *args], capture_output=True, text=True, timeout=2 * START_S,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def address_beyond_loopback() -> str:
    """An address of this machine that is not loopback, as a second host would reach it."""
    for far in ("10.255.255.255", "192.0.2.1", "198.51.100.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.connect((far, 9))  # no packet is sent: this only picks the outgoing interface
            except OSError:
                continue
            if not s.getsockname()[0].startswith("127."):
                return s.getsockname()[0]
    pytest.skip("no network interface besides loopback")


@pytest.fixture
def drafter_host(tmp_path):
    """`launch/pair.sh drafter` bound on every interface; yields (its running process, address, its key)."""
    address = address_beyond_loopback()
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port = s.getsockname()[1]
    key = re.search(r"public key: (\S+)", pair("keys").stdout).group(1)
    run = Running([PAIR_SH, "drafter", "--model", "mock", "--endpoint", f"tcp://0.0.0.0:{port}"], tmp_path,
                  "drafter", start_new_session=True)
    try:
        run.wait_for_log("serving on")
        yield run, f"tcp://{address}:{port}", key
    finally:
        run.kill()


@pytest.mark.slow
def test_targets_are_served_one_after_another_over_curve(drafter_host):
    run, endpoint, key = drafter_host
    assert re.search(rf"serving on tcp://0.0.0.0:\d+ \(CURVE: public key '{re.escape(key)}'", run.stderr)
    for _ in range(2):  # the drafter persists: the second target is served as the first
        done = pair(*RUN, "--drafter-at", endpoint, "--drafter-key", key)
        assert done.returncode == 0, done.stderr
        decodes = [DecodeRecord.from_json(json.loads(line)) for line in done.stdout.splitlines()
                   if '"kind": "decode"' in line]
        assert [r.decoder for r in decodes] == ["ar", "root"]
    assert run.proc.poll() is None
    os.killpg(run.pid, signal.SIGTERM)
    assert run.wait(10) == 128 + signal.SIGTERM


@pytest.mark.slow
def test_a_target_the_drafter_does_not_know_is_refused(drafter_host, tmp_path):
    run, endpoint, key = drafter_host
    done = pair(*RUN, "--drafter-at", endpoint, "--drafter-key", key, env={"SPECPAIR_KEYS": str(tmp_path / "other")})
    assert done.returncode == 3, done.stderr
    assert f"AccessDenied: the drafter at {endpoint} refused this side's key: on its host, run launch/pair.sh keys " \
           f"--allow " in done.stderr
    assert "refused a connection with an unknown key" in run.stderr
    unnamed = pair(*RUN, "--drafter-at", endpoint)
    assert unnamed.returncode == 2
    assert f"--drafter-at {endpoint} is beyond this machine: name the drafter's public key with --drafter-key" in \
        unnamed.stderr


@pytest.mark.slow
def test_a_drafter_that_fails_to_load_stops_the_launcher_with_its_status(tmp_path):
    # a missing model is said by the launcher before either process starts (tests/launch/test_pair_plan.py);
    # a directory that is there but holds no checkpoint fails in the drafter's load
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    done = pair("--target", "mock", "--drafter", str(tmp_path), "--prompt", "hi")
    assert done.returncode == 2, done.stderr
    assert f"[drafter] error: model '{tmp_path}': the directory is not a transformers checkpoint" in done.stderr
    assert "[launch] the drafter exited with status 2" in done.stderr
