"""python -m bench.protocol: what does the wire cost a round, with selection and verification?

Its results: results/bench_protocol.txt and results/bench_eagle3_wire.txt (results/benchmarks.md, with the
commands that made them); it backs docs/security.md's lines on what CURVE adds to a round trip and how long a
handshake takes (--handshake, whose figures no results file holds yet), and docs/eagle3.md's on what a head's
features add.

Round trip: a full pool (PoolConfig() defaults) sent through the project's Channel to an echo process over each
of --transports and back; one way is the echo's leg (both processes share CLOCK_MONOTONIC). Encode, decode and
the target's validation of a received pool are timed alone too. Selection + verification: every rule through the
round loop's own `select` and `verify`, on fixed (B + 1, V) logits that favour one deep path; then budget auto's
per-round work. --handshake SPEC: CURVE handshakes at a drafter process of that model while it loads and at rest;
the slowest bounds what protocol.transport.HANDSHAKE_IVL_MS must allow. The last line of the output is one JSON
document with the medians and the targets (ROUND_TRIP_TARGET_MS and the others) met."""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import bench_parser, close, command_line, ints, load_bracket, names, refuse, spread
from models.kernel_cache import usable_cpus
from pipeline.config import ConfigError, PoolConfig, check_int, split_list

ROUND_TRIP_TARGET_MS = 0.3
SELECT_VERIFY_TARGET_MS = 1.0
BUDGET_CHOICE_TARGET_MS = 0.1

# torch and pipeline are imported inside the functions that use them, so that the echo process, which
# needs only the protocol, is up in a fraction of a second.


def echo(endpoint: str, key_dir: str | None = None) -> None:
    """The peer: bind like a drafter (with CURVE when given a key directory, trusting its own key), send
    back every pool it decodes, stamped just before its encode."""
    from protocol.codec import decode
    from protocol.messages import Commit, PoolMsg, Shutdown
    from protocol.transport import Listener, Received

    reply = None  # the pool that answers Commits, grown at the first

    keys = None
    if key_dir:
        from protocol.keys import key_dir as directory, own_keys, trusted_keys
        from protocol.transport import ServerKeys

        own = own_keys(directory(key_dir))
        keys = ServerKeys(own, lambda key: key in trusted_keys(directory(key_dir)))
    listener = Listener.bind(endpoint, keys)
    try:
        while True:
            event = listener.recv()
            if not isinstance(event, Received):
                continue
            msg = decode(event.frames, expect=(PoolMsg, Commit, Shutdown))
            if isinstance(msg, Shutdown):
                return
            if isinstance(msg, Commit):  # a round's Commit (with or without features): the pool answers it
                stamp = time.perf_counter()
                reply = reply or pool_msg(full_pool(49152))
                listener.send(event.peer, PoolMsg(msg.request, msg.round, stamp, -1, 0.0, reply.token, reply.parent,
                                                  reply.logp, reply.expanded))
                continue
            listener.send(event.peer, PoolMsg(msg.request, msg.round, time.perf_counter(), -1, 0.0, msg.token,
                                              msg.parent, msg.logp, msg.expanded))
    finally:
        listener.close()


def full_pool(vocab_size: int, seed: int = 0):
    """A pool of PoolConfig() shape grown from random draft rows over `vocab_size` tokens."""
    import torch

    from pipeline.pool import grow_pool

    config = PoolConfig()
    gen = torch.Generator().manual_seed(seed)

    def rows(n: int) -> torch.Tensor:  # (n, V) draft log-probs, peaked like a language model's
        return torch.log_softmax(3.0 * torch.randn(n, vocab_size, generator=gen), -1)

    pool = grow_pool(rows(1)[0], lambda nodes, tokens, parents, depth: rows(len(nodes)), config)
    assert len(pool) == config.size, (len(pool), config.size)
    return pool


def pool_msg(pool, request: int = 1, round_: int = 0, stamp: float = 0.0):
    import numpy as np

    from protocol.messages import PoolMsg

    return PoolMsg(request, round_, stamp, -1, 0.0, pool.token.astype(np.int32), pool.parent.astype(np.int32),
                   pool.logp, pool.expanded)


def quantiles(samples_s: list[float]) -> dict[str, float]:
    """Median and quartiles in milliseconds (bench.common.spread), and the sample's size."""
    return {f"{k}_ms": 1e3 * v for k, v in spread(samples_s).items()} | {"n": len(samples_s)}


TRANSPORTS = ("ipc", "tcp", "tcp+curve")


class Echo:
    """An echo process over one transport, and this side's channel to it."""

    def __init__(self, transport: str, key_dir: str) -> None:
        from protocol.keys import key_dir as directory, own_keys
        from protocol.transport import Channel, ClientKeys, loopback_tcp_endpoint, private_ipc_endpoint

        self.endpoint = private_ipc_endpoint() if transport == "ipc" else loopback_tcp_endpoint()
        curve = transport.endswith("+curve")
        argv = [sys.executable, "-m", "bench.protocol", "--echo", self.endpoint]
        self.peer = subprocess.Popen(argv + (["--echo-keys", key_dir] if curve else []),
                                     cwd=Path(__file__).resolve().parents[1])
        own = own_keys(directory(key_dir)) if curve else None
        self.channel = Channel.connect(self.endpoint, peer="echo", keys=ClientKeys(own, own.public) if curve else None)
        self.round_trip: list[float] = []
        self.one_way: list[float] = []

    def run(self, pool, token, parent, n: int, record: bool) -> None:
        from protocol.messages import PoolMsg

        for i in range(n):
            t0 = time.perf_counter()
            self.channel.send(PoolMsg(1, i, t0, -1, 0.0, token, parent, pool.logp, pool.expanded))  # encode + send
            back = self.channel.recv(60.0, "iterations", "echo", expect=(PoolMsg,))
            t1 = time.perf_counter()  # recv + decode done
            if record:
                self.round_trip.append(t1 - t0)
                self.one_way.append(t1 - back.seconds)

    def commits(self, tokens: int, width: int, features: bool, n: int) -> tuple[list[float], list[float], int]:
        """n Commits of `tokens` tokens, with their features (bfloat16, `width` values a token) or without,
        each answered by the pool -> (round trips, the Commit's one way, the Commit's bytes)."""
        import numpy as np

        from protocol.codec import encode
        from protocol.messages import Commit, PoolMsg

        ids = np.arange(1, tokens + 1, dtype=np.int32)
        normal = np.random.default_rng(0).standard_normal(tokens * width, dtype=np.float32)  # finite, as a target sends
        rows = (normal.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8) if features else None
        extra = (rows, "bfloat16", width) if features else ()
        round_trips, one_way = [], []
        for i in range(n):
            t0 = time.perf_counter()
            self.channel.send(Commit(1, i, ids, *extra))
            back = self.channel.recv(60.0, "iterations", "echo", expect=(PoolMsg,))
            round_trips.append(time.perf_counter() - t0)
            one_way.append(back.seconds - t0)
        return round_trips, one_way, sum(len(f) for f in encode(Commit(1, 0, ids, *extra)))

    def close(self) -> None:
        from protocol.messages import Shutdown

        try:
            self.channel.send(Shutdown())
            self.peer.wait(10)
        finally:
            self.channel.close()
            if self.peer.poll() is None:
                self.peer.kill()
                self.peer.wait()
            if self.endpoint.startswith("ipc://"):
                shutil.rmtree(os.path.dirname(self.endpoint[len("ipc://"):]), ignore_errors=True)


@contextmanager
def running_echoes(transports: tuple[str, ...]) -> Iterator[dict[str, Echo]]:
    """An Echo per transport (their CURVE keys in a folder of their own), every one closed at the end."""
    with tempfile.TemporaryDirectory(prefix="bench-keys-") as keys, ExitStack() as stack:
        yield {t: stack.enter_context(closing(Echo(t, os.path.join(keys, "k")))) for t in transports}


def bench_parts(pool, iterations: int, warmup: int) -> dict[str, dict[str, float]]:
    """The parts of a round trip without the transport: what each side spends on the codec, and the target's
    validation of a received pool."""
    import numpy as np

    from pipeline.pool import Pool
    from protocol.codec import decode, encode
    from protocol.messages import PoolMsg
    from target_proc.client import shape_problem

    out = {}
    msg = PoolMsg(1, 0, 0.0, -1, 0.0, pool.token.astype(np.int32), pool.parent.astype(np.int32), pool.logp,
                  pool.expanded)
    frames = encode(msg)
    config = PoolConfig()

    def validate():  # what RemoteDrafter.pool checks of every pool
        shape_problem(Pool.from_edges(msg.token, msg.parent, msg.logp, msg.expanded, vocab_size=49152,
                                      max_depth=config.depth), config)

    parts = {"encode": lambda: encode(msg), "decode": lambda: decode(frames, (PoolMsg,)), "validate": validate}
    for name, fn in parts.items():
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        out[name] = quantiles(samples)
    out["pool"] = {"bytes": sum(len(f) for f in frames), "frames": len(frames), "candidates": len(pool)}
    return out


def bench_wire(iterations: int, warmup: int, transports: tuple[str, ...] = ("ipc",),
               blocks: int = 10) -> dict[str, dict[str, float]]:
    """Round trips over each transport, interleaved in `blocks` blocks so that a change of load on a shared
    machine falls on every transport alike; then the parts alone."""
    import numpy as np

    pool = full_pool(49152)
    token, parent = pool.token.astype(np.int32), pool.parent.astype(np.int32)
    with running_echoes(transports) as echoes:
        for echo_ in echoes.values():
            echo_.run(pool, token, parent, warmup, record=False)
        for b in range(blocks):
            for echo_ in echoes.values():
                echo_.run(pool, token, parent, iterations // blocks + (b < iterations % blocks), record=True)
    out = {}
    for transport, echo_ in echoes.items():
        suffix = "" if transport == transports[0] else f" {transport}"
        out["round trip" + suffix] = quantiles(echo_.round_trip)
        out["one way" + suffix] = quantiles(echo_.one_way)
    out.update(bench_parts(pool, iterations, warmup))
    return out


def bench_features(iterations: int, warmup: int, transports: tuple[str, ...], tokens: list[int], width: int,
                   blocks: int = 10) -> dict[str, dict[str, float]]:
    """A round's Commit and pool over each transport, the Commit with K tokens' features and without,
    interleaved in `blocks` blocks -> per case its round trip and one way (quantiles) and the Commit's bytes."""
    cases = [(t, k, f) for t in transports for k in tokens for f in (True, False)]
    samples = {c: ([], []) for c in cases}
    sizes = {}
    with running_echoes(transports) as echoes:
        for transport, k, f in cases:
            echoes[transport].commits(k, width, f, warmup)
        for b in range(blocks):
            for transport, k, f in cases:
                rt, ow, sizes[transport, k, f] = echoes[transport].commits(
                    k, width, f, iterations // blocks + (b < iterations % blocks))
                samples[transport, k, f][0].extend(rt)
                samples[transport, k, f][1].extend(ow)
    out = {}
    for transport, k, f in cases:
        name = f"commit {k} token{'s' * (k > 1)} {'with' if f else 'without'} features {transport}"
        out[name] = {"round_trip": quantiles(samples[transport, k, f][0]),
                     "one_way": quantiles(samples[transport, k, f][1]), "bytes": sizes[transport, k, f]}
    return out


def report_features(features: dict, width: int) -> dict:
    """The features' cases printed -> the summary's part: per transport and K, the Commit's bytes and what the
    features add to its one way and to the round trip (medians)."""
    print(f"\nfeatures of an EAGLE-3 drafter: {width} bfloat16 values ({width * 2} bytes) a token; a Commit of K "
          f"tokens answered by the pool")
    print(f"{'case':<48}{'bytes':>10}{'round trip ms':>15}{'commit one way ms':>19}")
    for name, r in features.items():
        print(f"{name:<48}{r['bytes']:>10}{r['round_trip']['median_ms']:>15.4f}{r['one_way']['median_ms']:>19.4f}")
    added = {}
    for name, r in features.items():
        if " with features " in name:
            without = features[name.replace(" with features ", " without features ")]
            added[name.replace(" with features", "")] = {
                "feature_bytes": r["bytes"] - without["bytes"],
                "round_trip_added_ms": r["round_trip"]["median_ms"] - without["round_trip"]["median_ms"],
                "one_way_added_ms": r["one_way"]["median_ms"] - without["one_way"]["median_ms"],
                "round_trip_without_ms": without["round_trip"]["median_ms"]}
    for name, a in added.items():
        print(f"{name}: the features add {a['feature_bytes']} bytes, {a['one_way_added_ms'] * 1e3:.0f} us to the "
              f"Commit's way, {a['round_trip_added_ms'] * 1e3:.0f} us to the round trip (without them "
              f"{a['round_trip_without_ms'] * 1e3:.0f} us)")
    return added


class SelectVerifyCase:
    """One rule's selection and verification on a fixed pool and fixed (B + 1, V) logits."""

    def __init__(self, rule: str, vocab_size: int, budget: int, temperature: float, device: str) -> None:
        import numpy as np
        import torch

        from pipeline.pool import rank
        from pipeline.select import select_draft, select_root_draw

        self.rule, self.budget, self.temperature = rule, budget, temperature
        self.pool = full_pool(vocab_size)
        self.first = np.flatnonzero(self.pool.parent < 0)
        gen = torch.Generator().manual_seed(1)
        logits = 3.0 * torch.randn(budget + 1, vocab_size, generator=gen)
        # Favour one deep path of the tree this rule will select, so that the walk goes down several levels.
        x1 = int(self.pool.token[rank(self.pool.cum, self.pool.depth, self.first)[0]])
        tree = select_draft(self.pool, budget) if rule == "draft" else select_root_draw(self.pool, budget, x1)
        path = tree.path(int(np.argmax(tree.depth)))
        logits[0, int(tree.token[path[0]])] += 30.0
        for a, b in zip(path, path[1:]):
            logits[1 + a, int(tree.token[b])] += 30.0
        self.logits = logits.to(device)
        self.generator = torch.Generator(device=device).manual_seed(2)
        self.device = torch.device(device)
        self.expected_accepted = len(path)

    def __call__(self) -> tuple[int, float]:
        """One round's rule work, through the round loop's own selection and verification -> (accepted nodes, seconds of
        selection, traversal and the draws it reaches; the root's draw before selection is left out)."""
        from pipeline.rules import RULES, RootDraw
        from pipeline.verify import draw, verify_tree

        rule, pool, budget, t, logits = RULES[self.rule], self.pool, self.budget, self.temperature, self.logits
        lazy = self.device.type == "cpu"
        clock = time.perf_counter
        if not rule.root_pass:  # row 0 is the root's
            t0 = clock()
            tree = rule.select(pool, budget, None)
            accepted, _ = verify_tree(tree, logits[: len(tree) + 1], None, t, self.generator, lazy)
            return len(accepted), clock() - t0
        first = RootDraw(int(draw(logits[:1], t, self.generator)[0]), logits[0], t)  # host-device sync
        t0 = clock()
        tree = rule.select(pool, budget, first)
        if tree.child(-1, first.token) < 0:  # `root`: the draw is off the tree, no tree pass this round
            return 0, clock() - t0
        accepted, _ = verify_tree(tree, logits[1: len(tree) + 1], first.token, t, self.generator, lazy)
        return len(accepted), clock() - t0


def bench_select_verify(vocabs: list[int], temperatures: list[float], budget: int, rounds: int, warmup: int,
                        seconds: float, device: str) -> dict[str, dict[str, float]]:
    """Per case: up to `rounds` timed rounds, fewer (at least 10) when a case would take over `seconds`."""
    import torch

    from pipeline.rules import SPECULATIVE

    out = {}
    for vocab in vocabs:
        for temperature in temperatures:
            for rule in SPECULATIVE:
                step = SelectVerifyCase(rule, vocab, budget, temperature, device)
                t_end = time.perf_counter() + seconds / 4
                for i in range(warmup):
                    if i >= 2 and time.perf_counter() > t_end:
                        break
                    step()
                samples, host, accepted = [], [], []
                t_end = time.perf_counter() + seconds
                while len(samples) < rounds and (len(samples) < 10 or time.perf_counter() < t_end):
                    if device != "cpu":
                        torch.cuda.synchronize()  # nothing queued may leak into the timed round
                    t0 = time.perf_counter()
                    n, rule_seconds = step()
                    samples.append(time.perf_counter() - t0)
                    host.append(rule_seconds)
                    accepted.append(n)
                row = quantiles(samples)
                row["host_rule_ms"] = statistics.median(host) * 1e3
                row["accepted"] = statistics.median(accepted)
                out[f"{rule} V={vocab} T={temperature:g}"] = row
    return out


def bench_budget_choice(budget: int, rounds: int) -> dict[str, float]:
    """Budget auto's work per round outside the passes: choosing the next size and folding a round into the
    estimates (a tree of `budget` nodes, its accepted ranks found from the pool's scores)."""
    import numpy as np

    from pipeline.budget import AutoBudget, PassCosts, candidate_sizes, ranks_on_path

    sizes = [b for b in candidate_sizes(budget) if b]
    auto = AutoBudget(PassCosts(0.04, 0.045, {b: 0.04 + 0.002 * b for b in sizes}), budget)
    rng = np.random.default_rng(0)
    cum, depth, index = -np.sort(rng.random(budget)), np.sort(rng.integers(1, 9, budget)), np.arange(budget)
    samples, b = [], 0
    for i in range(rounds + 50):
        t0 = time.perf_counter()
        b = auto.choose(auto.costs.switch(20) if b == 0 else 0.0, 100)  # a switch's cost, as decodes ask
        on_path = ranks_on_path(cum, depth, index, [0, 1, 2][: i % 4])
        auto.observe(on_path[: max(b, 1)] if b else on_path[:0], b, front=0.045, tree=0.05 if b else None,
                     plain=None if b else 0.04)
        if i >= 50:
            samples.append(time.perf_counter() - t0)
    return quantiles(samples)


@dataclass(frozen=True, slots=True)
class ProtocolOptions:
    """Wire and selection"""

    iterations: int = field(default=2000, metadata={"help": "timed round trips"})
    rounds: int = field(default=300, metadata={"help": "timed rounds per rule and V"})
    warmup: int = field(default=50, metadata={"help": "untimed iterations first"})
    seconds: float = field(default=2.0, metadata={
        "help": "time budget of one selection case; slow cases run fewer rounds"})
    budget: int = field(default=59, metadata={"help": "tree budget B"})
    vocab: tuple[int, ...] = field(default=(49152, 1000), metadata={
        "help": "vocabulary sizes V, comma-separated", "parse": "ints", "metavar": "V,V"})
    temperature: str = field(default="0,1", metadata={"help": "temperatures T, comma-separated", "metavar": "T,T"})
    device: str = field(default="cpu", metadata={"help": "where the logits live: cpu, cuda or cuda:N"})
    threads: int = field(default=1, metadata={"help": "intra-op CPU threads, as the target process runs"})
    transports: str = field(default="ipc", metadata={
        "help": f"round trips over each of {', '.join(TRANSPORTS)}, interleaved, comma-separated; the first is the "
                "headline figure; tcp is loopback, tcp+curve the same with CURVE", "metavar": "LIST"})
    select: bool = field(default=True, metadata={"help": "time the wire only"})
    features: tuple[int, ...] = field(default=(), metadata={
        "help": "an EAGLE-3 drafter's features: the tokens a Commit carries, comma-separated (e.g. 1,4); none: "
                "no features leg", "parse": "ints", "metavar": "K,K"})
    feature_width: int = field(default=3 * 4096, metadata={
        "help": "values of one token's features (Llama-3.1-8B: three layers of 4,096)"})
    handshake: str = field(default="", metadata={
        "help": "instead: time a target's CURVE handshake at a drafter process of this model (as its --model "
                "takes it, e.g. smollm2:int8) while it loads and at rest", "metavar": "SPEC"})
    idle: int = field(default=50, metadata={"help": "with --handshake: handshakes once the drafter serves"})
    every: float = field(default=0.05, metadata={
        "help": "with --handshake: seconds between handshakes while it loads", "metavar": "S"})

    def __post_init__(self) -> None:
        for name in ("iterations", "rounds", "budget", "threads"):
            check_int(name, getattr(self, name), 1)
        check_int("warmup", self.warmup, 0)
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ConfigError("seconds", f"must be positive, got {self.seconds}")
        ints("vocab", self.vocab, PoolConfig().topk)  # the pool's first level takes that many distinct tokens
        temperatures(self.temperature)
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError("device", f"must be cpu, cuda or cuda:N, got {self.device!r}")
        check_int("feature_width", self.feature_width, 1)
        if self.features:
            ints("features", self.features, 1)
        transports = names("transports", self.transports, TRANSPORTS)
        if len(set(transports)) != len(transports):
            raise ConfigError("transports", f"must be distinct, got {self.transports!r}")
        check_int("idle", self.idle, 1)
        if not 0 < self.every <= 10:
            raise ConfigError("every", f"must be a number of seconds in (0, 10], got {self.every}")



def temperatures(text: str) -> list[float]:
    """The temperatures of a comma-separated list, each finite and >= 0."""
    try:
        values = [float(t) for t in split_list(text)]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(t) and t >= 0 for t in values):
        raise ConfigError("temperature", f"takes finite numbers >= 0, comma-separated, got {text!r}")
    return values


def _summary(options: ProtocolOptions, wire: dict, select: dict, round_trips: dict, load, choice: dict,
             met: dict) -> dict:
    """The benchmark's last line: one JSON document."""
    shape = wire["pool"]
    return {"device": options.device, "threads": options.threads, "budget": options.budget,
            "pool_candidates": shape["candidates"], "pool_bytes": shape["bytes"],
            **{f"{k.replace(' ', '_')}_median_ms": wire[k]["median_ms"]
               for k in ("round trip", "one way", "encode", "decode", "validate")},
            "select_verify_median_ms": {k: r["median_ms"] for k, r in select.items()},
            "select_traverse_median_ms": {k: r["host_rule_ms"] for k, r in select.items()},
            "round_trip_median_ms_by_transport": round_trips, "load_average": load,
            "budget_choice_median_ms": choice["median_ms"],
            "targets_ms": {"round_trip": ROUND_TRIP_TARGET_MS, "select_verify": SELECT_VERIFY_TARGET_MS,
                           "budget_choice": BUDGET_CHOICE_TARGET_MS},
            "met": met}


HANDSHAKE_WAIT_S = 60.0  # one handshake that takes longer than this is reported as failed


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


def measure_handshakes(options: ProtocolOptions, keys_dir: Path) -> tuple[list[float], list[float], float]:
    """-> (handshake seconds while the drafter loads, at rest, seconds it took to load)."""
    import zmq

    from protocol.keys import key_dir, own_keys
    from protocol.transport import loopback_tcp_endpoint

    keys, endpoint = own_keys(key_dir(str(keys_dir))), loopback_tcp_endpoint()
    log_path = keys_dir / "drafter.err"
    context = zmq.Context()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "programs.drafter_program", "--model", options.handshake,
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


def handshakes(options: ProtocolOptions) -> int:
    """--handshake: the handshakes timed and printed, then the closing JSON line."""
    with load_bracket() as load, tempfile.TemporaryDirectory(prefix="bench-handshake-") as folder:
        print(f"load average before: {load['before']}, {usable_cpus()} CPUs")
        loading, idle, loaded = measure_handshakes(options, Path(folder) / "keys")
    rows = {}
    print(f"drafter {options.handshake}: serving {loaded:.1f} s after it was started; handshake ms, median "
          f"[quartiles], largest")
    for name, sample in (("while it loads", loading), ("at rest", idle)):
        if sample:
            rows[name] = {**{k: 1e3 * v for k, v in spread(sample).items()}, "max": 1e3 * max(sample),
                          "n": len(sample)}
            r = rows[name]
            print(f"  {name:<16}{r['median']:8.2f} [{r['q1']:.2f}, {r['q3']:.2f}]  largest {r['max']:.2f}  "
                  f"({r['n']} handshakes)")
    print(f"load average after: {load['after']}")
    close({"model": options.handshake, "load_seconds": loaded, "handshake_ms": rows, "load_average": load})
    return 0


ECHO = (("--echo", {"metavar": "ENDPOINT", "help": argparse.SUPPRESS}),  # the peer process's own flags
        ("--echo-keys", {"metavar": "DIR", "help": argparse.SUPPRESS}))


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(ProtocolOptions, __spec__.name, __doc__, extra=ECHO)


def main(argv: list[str] | None = None) -> int:
    options, ns = command_line(build_parser(), argv)
    if ns.echo:
        echo(ns.echo, ns.echo_keys)
        return 0
    if options.handshake:
        return handshakes(options)
    import torch

    if options.device.startswith("cuda") and not torch.cuda.is_available():
        refuse(__spec__.name, f"--device {options.device}: this torch has no usable CUDA")
    torch.set_num_threads(options.threads)
    transports = split_list(options.transports)
    with load_bracket() as load:
        wire = bench_wire(options.iterations, options.warmup, tuple(transports))
        select = {} if not options.select else bench_select_verify(
            list(options.vocab), temperatures(options.temperature), options.budget, options.rounds, options.warmup,
            options.seconds, options.device)
    shape = wire["pool"]
    print(f"pool: {shape['candidates']} candidates, {shape['bytes']} bytes in {shape['frames']} frames; medians "
          f"over {options.iterations} iterations, IQR in brackets; round trips over {transports[0]} unless named; "
          f"load average {load['before'][0]:.2f} {load['before'][1]:.2f} {load['before'][2]:.2f}")
    print(f"{'wire':<28}{'median ms':>10}{'IQR ms':>20}")
    for name in [k for k in wire if k != "pool"]:
        r = wire[name]
        print(f"{name:<28}{r['median_ms']:>10.4f}   [{r['q1_ms']:.4f}, {r['q3_ms']:.4f}]")
    round_trips = {t: wire["round trip" + ("" if t == transports[0] else f" {t}")]["median_ms"] for t in transports}
    added = {}
    if options.features:
        added = report_features(bench_features(options.iterations, options.warmup, tuple(transports), list(options.features),
                                               options.feature_width), options.feature_width)
    if not select:
        close({"pool_candidates": shape["candidates"], "pool_bytes": shape["bytes"], "load_average": load,
               "round_trip_median_ms": round_trips, **({"features": added} if added else {})})
        return 0
    choice, met = report_select(options, wire, select)
    close(_summary(options, wire, select, round_trips, load, choice, met) | ({"features": added} if added else {}))
    return 0


def report_select(options: ProtocolOptions, wire: dict, select: dict) -> tuple[dict, dict]:
    """Selection + verification per rule, budget auto's choice and the targets met, printed -> (the choice's
    timing, which targets were met)."""
    print(f"\nselection + verification per round, B={options.budget}, device {options.device}, {options.threads} "
          f"thread(s); 'rules ms' leaves out only the root's draw before selection")
    print(f"{'rule':<28}{'median ms':>10}{'IQR ms':>20}{'rules ms':>10}{'accepted':>10}{'rounds':>8}")
    for name, r in select.items():
        print(f"{name:<28}{r['median_ms']:>10.4f}   [{r['q1_ms']:.4f}, {r['q3_ms']:.4f}]"
              f"{r['host_rule_ms']:>10.4f}{r['accepted']:>10g}{r['n']:>8}")
    choice = bench_budget_choice(options.budget, max(options.rounds, 200))
    print(f"\nbudget auto, per round (choose the size, fold the round into the estimates): median "
          f"{choice['median_ms']:.4f} ms [{choice['q1_ms']:.4f}, {choice['q3_ms']:.4f}] over {choice['n']} rounds")
    slowest = max(select, key=lambda k: select[k]["median_ms"])
    met = {"round_trip": wire["round trip"]["median_ms"] < ROUND_TRIP_TARGET_MS,
           "select_verify": select[slowest]["median_ms"] < SELECT_VERIFY_TARGET_MS,
           "budget_choice": choice["median_ms"] < BUDGET_CHOICE_TARGET_MS}
    print(f"\nround trip target {ROUND_TRIP_TARGET_MS} ms: {'met' if met['round_trip'] else 'MISSED'}; "
          f"selection + verification target {SELECT_VERIFY_TARGET_MS} ms: "
          f"{'met' if met['select_verify'] else 'MISSED'} (slowest: {slowest}); budget auto's choice target "
          f"{BUDGET_CHOICE_TARGET_MS} ms: {'met' if met['budget_choice'] else 'MISSED'}")
    return choice, met


if __name__ == "__main__":
    sys.exit(main())
