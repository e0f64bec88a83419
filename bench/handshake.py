"""python -m bench.handshake: how long a target's secure handshake takes at a drafter, while it loads and idle.

python -m bench.handshake [--model smollm2:int8] [--idle 50] [--every 0.05]

Starts a drafter process (programs.drafter_program) on a loopback tcp port, which it serves with CURVE, and
from the moment it binds connects targets one after another, each with a key the drafter trusts: a ZeroMQ
DEALER socket with CURVE, connected and timed until its monitor reports the handshake done (the drafter's
ZAP handler, a thread of its own process, admits the key). A drafter binds before it loads its model, so a
target that starts with it shakes hands while the drafter imports torch and loads and tunes its model; then
--idle handshakes with the drafter at rest. What the slowest of them took bounds what the drafter's
handshake interval (protocol.transport.HANDSHAKE_IVL_MS) must allow a real target on this host. The load
average is printed before and after; the last line of the output is one JSON document.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import at_least, bench_parser, close, command_line, load_bracket, spread
from models.options import EMBEDDED, INT8_SUFFIX
from pipeline.config import ConfigError

HANDSHAKE_WAIT_S = 60.0  # one handshake that takes longer than this is reported as failed


@dataclass(frozen=True, slots=True)
class HandshakeOptions:
    """Drafter and handshakes"""

    model: str = field(default=EMBEDDED + INT8_SUFFIX, metadata={
        "help": "the drafter's model, as its --model takes it", "metavar": "SPEC"})
    idle: int = field(default=50, metadata={"help": "handshakes once the drafter serves"})
    every: float = field(default=0.05, metadata={"help": "seconds between handshakes while it loads",
                                                  "metavar": "S"})

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("model", "must name a model")
        at_least("idle", self.idle, 1)
        if not 0 < self.every <= 10:
            raise ConfigError("every", f"must be a number of seconds in (0, 10], got {self.every}")


def handshake(context, endpoint: str, keys) -> float:
    """Seconds from connecting a CURVE DEALER with `keys` (its own, trusted by the drafter) until its monitor
    reports the handshake done; RuntimeError naming the event when it failed instead."""
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = keys.public, keys.public, keys.secret
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                      | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    try:
        t0 = time.perf_counter()
        sock.connect(endpoint)
        event = recv_monitor_message(monitor)["event"] if monitor.poll(int(HANDSHAKE_WAIT_S * 1000)) else None
        seconds = time.perf_counter() - t0
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)
    if event != zmq.EVENT_HANDSHAKE_SUCCEEDED:
        raise RuntimeError(f"a handshake failed after {seconds:.2f} s (monitor event {event})")
    return seconds


def wait_bound(endpoint: str, proc: subprocess.Popen) -> None:
    """Return once something accepts connections at `endpoint` (tcp://HOST:PORT)."""
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    while True:
        with socket.socket() as probe:
            if probe.connect_ex((host, int(port))) == 0:
                return
        if proc.poll() is not None:
            raise RuntimeError("the drafter stopped before it bound its endpoint")
        time.sleep(0.01)


def measure(options: HandshakeOptions, keys_dir: Path) -> tuple[list[float], list[float], float]:
    """-> (handshake seconds while the drafter loads, at rest, seconds it took to load)."""
    import zmq

    from protocol.keys import key_dir, own_keys
    from protocol.transport import loopback_tcp_endpoint

    keys, endpoint = own_keys(key_dir(str(keys_dir))), loopback_tcp_endpoint()
    log_path = keys_dir / "drafter.err"
    context = zmq.Context()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "programs.drafter_program", "--model", options.model,
                                 "--endpoint", endpoint, "--persist"], stderr=log,
                                env={**os.environ, "SPECPAIR_KEYS": str(keys_dir)},
                                cwd=Path(__file__).resolve().parents[1])
    try:
        t0, loading = time.perf_counter(), []
        wait_bound(endpoint, proc)  # handshakes are timed from the bind: a target before it only retries
        while b"serving on" not in log_path.read_bytes():
            if proc.poll() is not None:
                raise RuntimeError(f"the drafter stopped: {log_path.read_text()[-2000:]}")
            loading.append(handshake(context, endpoint, keys))
            time.sleep(options.every)
        loaded = time.perf_counter() - t0
        idle = [handshake(context, endpoint, keys) for _ in range(options.idle)]
        return loading, idle, loaded
    finally:
        proc.kill()
        proc.wait()
        context.destroy(0)


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(HandshakeOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    with load_bracket() as load, tempfile.TemporaryDirectory(prefix="bench-handshake-") as folder:
        print(f"load average before: {load['before']}, {os.cpu_count()} cores")
        loading, idle, loaded = measure(options, Path(folder) / "keys")
    rows = {}
    print(f"drafter {options.model}: serving {loaded:.1f} s after it was started; handshake ms, median "
          f"[quartiles], largest")
    for name, sample in (("while it loads", loading), ("at rest", idle)):
        if sample:
            rows[name] = {**{k: 1e3 * v for k, v in spread(sample).items()}, "max": 1e3 * max(sample),
                          "n": len(sample)}
            r = rows[name]
            print(f"  {name:<16}{r['median']:8.2f} [{r['q1']:.2f}, {r['q3']:.2f}]  largest {r['max']:.2f}  "
                  f"({r['n']} handshakes)")
    print(f"load average after: {load['after']}")
    close({"model": options.model, "load_seconds": loaded, "handshake_ms": rows, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
