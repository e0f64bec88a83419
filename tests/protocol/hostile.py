"""python -m tests.protocol.hostile: a hostile peer against the real drafter and target code, and the drafter's memory
under attack.

    .venv/bin/python -m tests.protocol.hostile [--mutations 300] [--seed 0] [--memory] [--half-open]

Campaign: a real DrafterServer (mock drafter) serves on a thread; each trial runs one greedy decode of the
mock target through the real RemoteDrafter and Channel, with one message of the exchange mutated on its way
(either direction, every message type, a seeded choice among the mutations below) or one extra message
injected. A trial ends in one of: refused (a typed error: a protocol error, PeerDied, PeerTimeout or a
usage error), accepted (the decode completed, the mutation was harmless: its output must equal ar's),
wrong (it completed with another output), crashed (any other exception, or the server thread died) and
hung (past a hard bound). With --memory, the drafter process's resident memory before and after a 512 MiB
frame, eight Hellos of growing capacities up to its request limit, Hellos asking for more than that limit,
a message of two million frames and peers with long routing ids. With --half-open, how soon a target with an
authorized key is served by a CURVE drafter process started with a soft limit of 1024 open files beside
1,100 connections that never begin their handshake. The last line of the output is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import numpy as np
import torch
import zmq

from drafter_proc.server import DrafterServer
from models.load import load
from models.mock import EOS, MockModel, MockRunner
from models.options import ModelOptions
from models.tokenizers import MockTokenizer
from pipeline.config import InputError, PoolConfig
from pipeline.decode import decode
from pipeline.rules import SPECULATIVE
from pipeline.settings import DecodeConfig
from protocol.codec import encode
from protocol.errors import (AccessDenied, BadArray, DrafterBusy, InvalidPoolMessage, MalformedMessage, PeerDied,
                             PeerError, PeerTimeout, ProtocolError, UnexpectedMessage)
from protocol.limits import MAX_CONTEXT, MAX_FRAME_BYTES, REQUEST_CONTEXT, request_frame_bytes
from protocol.messages import PROTOCOL_VERSION, Error, Hello, Ready
from protocol.keys import key_dir, own_keys
from protocol.transport import (Channel, ClientKeys, EndpointError, Listener, loopback_tcp_endpoint,
                                private_ipc_endpoint)
from target_proc.client import RemoteDrafter, ask_while_busy
from target_proc.target import Target

VOCAB = ModelOptions().mock_vocab
POOL = PoolConfig(topk=4, depth=3, expand=2)
CAPACITY = 1024
MAX_NEW = 16
WAIT_S = 0.3  # the target's timeouts in a trial: a mock reply takes milliseconds
HARD_S = 20.0  # a trial still running after this is hung
OUTCOMES = ("refused", "accepted", "wrong", "crashed", "hung")
TYPES = ("Hello", "Start", "Commit", "End", "Shutdown", "Ready", "PoolMsg")  # what a trial may mutate
TO_DRAFTER = {"Hello", "Start", "Commit", "End", "Shutdown", "Error"}
EXTREMES = [0, -1, 1, 2**31 - 1, 2**31, -2**31, 2**62, 2**63 - 1, -2**63, 2**64 - 1, math.nan, math.inf, -math.inf,
            -0.0, 1e308, "", "x" * 60_000, "\x1b[2J\n", None, True, [], {}, b"\x00" * 10, [[[[[[1]]]]]]]


# -- mutations: frames -> frames, each a seeded function of a random.Random ---------------------------------

def _pick(frames, rng) -> int:
    return rng.randrange(len(frames))


def flip(frames, rng):
    frames = list(frames)
    i = _pick(frames, rng)
    data = bytearray(frames[i] or b"\x00")
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    frames[i] = bytes(data)
    return frames


def truncate(frames, rng):
    frames = list(frames)
    i = _pick(frames, rng)
    frames[i] = frames[i][:rng.randrange(len(frames[i]) + 1)]
    return frames


def extend(frames, rng):
    frames = list(frames)
    i = _pick(frames, rng)
    frames[i] += rng.randbytes(rng.randint(1, 64))
    return frames


def drop_frame(frames, rng):
    frames = list(frames)
    del frames[_pick(frames, rng)]
    return frames or [b""]


def duplicate_frame(frames, rng):
    frames = list(frames)
    i = _pick(frames, rng)
    frames.insert(i, frames[i])
    return frames


def garbage(frames, rng):
    return [rng.randbytes(rng.randint(0, 256)) for _ in range(rng.randint(1, 6))]


def _edit_header(frames, rng, edit):
    try:
        header = msgpack.unpackb(frames[0], raw=False)
        edit(header, rng)
        return [msgpack.packb(header, use_bin_type=True), *frames[1:]]
    except Exception:  # a header that no longer unpacks (or packs): fall back to flipping bits
        return flip(frames, rng)


def extreme_field(frames, rng):
    def edit(header, rng):
        names = list(header["f"]) or ["x"]
        header["f"][rng.choice(names)] = rng.choice(EXTREMES)
    return _edit_header(frames, rng, edit)


def extreme_shape(frames, rng):
    def edit(header, rng):
        if header["a"]:
            spec = rng.choice(header["a"])
            spec[1] = [rng.choice([0, -1, 2**20 + 1, 2**31, 2**63 - 1, 2**64 - 1])]
        else:
            header["a"] = [["<i4", [2**31]]]
    return _edit_header(frames, rng, edit)


def other_kind(frames, rng):
    def edit(header, rng):
        header["k"] = rng.choice([-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 255, 2**63 - 1, "1", None])
    return _edit_header(frames, rng, edit)


def nest(frames, rng):
    depth = rng.choice([5, 100, 1000, 1023])
    return [b"\x91" * depth + frames[0], *frames[1:]]


def oversize(frames, rng):
    return [frames[0], bytes(MAX_FRAME_BYTES + 1), *frames[2:]]


MUTATIONS = {f.__name__.replace("_", "-"): f for f in (flip, truncate, extend, drop_frame, duplicate_frame, garbage,
                                                       extreme_field, extreme_shape, other_kind, nest, oversize)}
EXTRA = ("inject", "replay")  # send the message, then another: a captured one of any type, or itself again


# -- a channel that tampers with one message ----------------------------------------------------------------

@dataclass
class Plan:
    """Which message to tamper with, and how."""

    type: str
    occurrence: int
    how: str
    seed: int
    injected: list[bytes] = field(default_factory=list)  # frames for "inject"
    done: bool = False


class TamperingChannel(Channel):
    """The target's Channel, tampering with one message of either direction as its plan says; it records
    every message's frames (for the captures)."""

    plan: Plan | None = None
    seen: Counter
    log: list[tuple[str, list[bytes]]]
    queued: list[list[bytes]]

    def start(self, plan: Plan | None) -> TamperingChannel:
        self.plan, self.seen, self.log, self.queued = plan, Counter(), [], []
        return self

    def _tamper(self, name: str, frames: list[bytes]) -> list[list[bytes]]:
        """The frame sets to deliver in place of one message."""
        self.log.append((name, frames))
        self.seen[name] += 1
        plan = self.plan
        if plan is None or plan.done or name != plan.type or self.seen[name] != plan.occurrence + 1:
            return [frames]
        plan.done = True
        rng = random.Random(plan.seed)
        if plan.how == "replay":
            return [frames, frames]
        if plan.how == "inject":
            return [frames, plan.injected]
        return [MUTATIONS[plan.how](frames, rng)]

    def send(self, msg) -> None:
        for frames in self._tamper(type(msg).__name__, encode(msg)):
            self.sock.send_multipart(frames, copy=True)

    def pending(self) -> bool:
        return bool(self.queued) or super().pending()

    def recv_frames(self, timeout, setting, what):
        if self.queued:
            return self.queued.pop(0)
        frames = super().recv_frames(timeout, setting, what)
        try:
            name = type(_peek(frames)).__name__
        except ProtocolError:
            name = "?"
        first, *more = self._tamper(name, frames)
        self.queued.extend(more)
        return first


def _peek(frames):
    from protocol.codec import decode as decode_frames

    return decode_frames(frames)


# -- the campaign -------------------------------------------------------------------------------------------

class Campaign:
    """A persisting DrafterServer on a thread, and trials of a target against it."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.endpoint = private_ipc_endpoint()
        self.fingerprint = MockTokenizer(VOCAB).fingerprint
        self.target = Target(MockRunner(MockModel(VOCAB, 0), CAPACITY))
        self.prompts = [[5, 17, 3], [9], [40, 2, 2, 61, 7], [11, 12]]
        # ar's stream as far as a speculative decode may run past the limit (by up to a pool's depth)
        self.reference = {tuple(p): decode(self.target, None, p, DecodeConfig("ar", 0.0, 1, MAX_NEW + POOL.depth),
                                           frozenset({EOS}), None).tokens for p in self.prompts}
        self.server_crashes = 0
        self._serve()
        self.captured = self._capture()

    def _serve(self) -> None:
        self.listener = Listener.bind(self.endpoint)
        self.server = DrafterServer(self.listener, load(ModelOptions(model="mock"), "drafter"), persist=True)
        self.thread = threading.Thread(target=self._run_server, daemon=True)
        self.thread.start()

    def _run_server(self) -> None:
        try:
            self.server.serve()
        except BaseException as e:  # the campaign counts it; the server must never die of a message
            self.server_error = e

    def _capture(self) -> dict[str, list[bytes]]:
        """One clean trial's frames of every message type (an Error made up: a clean run has none)."""
        trial = self.trial(None)
        assert trial[0] == "accepted", trial
        frames = {name: f for name, f in reversed(self.last_log)}
        frames["Error"] = encode(Error("stale", "commit for request 1 round 9, but the drafter expects round 2", 1))
        return frames

    def plan(self) -> Plan:
        rng = self.rng
        kind = rng.choice(TYPES)
        occurrence = rng.randrange(3) if kind in ("Commit", "PoolMsg") else 0
        how = rng.choice(list(MUTATIONS) + list(EXTRA))
        if how == "oversize" and kind not in TO_DRAFTER:
            how = "flip"  # incoming frames are tampered with past the socket, whose limit they never meet
        plan = Plan(kind, occurrence, how, rng.randrange(2**32))
        if how == "inject":
            name = rng.choice(sorted(self.captured))
            extra = self.captured[name]
            plan.injected = MUTATIONS[rng.choice(list(MUTATIONS))](extra, rng) if rng.random() < 0.5 else extra
        return plan

    def trial(self, plan: Plan | None) -> tuple[str, str]:
        """One decode with `plan`'s tampering -> (outcome, detail), bounded by HARD_S."""
        box: dict[str, tuple[str, str]] = {}
        worker = threading.Thread(target=lambda: box.setdefault("r", self._decode(plan)), daemon=True)
        worker.start()
        worker.join(HARD_S)
        if worker.is_alive():
            return "hung", f"still running after {HARD_S} s"
        if not self.thread.is_alive():
            self.server_crashes += 1
            detail = repr(getattr(self, "server_error", None))
            self.listener.close()
            self._serve()  # for the trials left
            return "crashed", f"drafter: {detail}"
        self._wait_released()
        return box["r"]

    def _decode(self, plan: Plan | None) -> tuple[str, str]:
        prompt = self.rng.choice(self.prompts)
        decoder = self.rng.choice(SPECULATIVE)
        channel = TamperingChannel.connect(self.endpoint, peer="drafter").start(plan)
        try:
            client = RemoteDrafter(channel, VOCAB, POOL, WAIT_S)
            client.handshake("mock", self.fingerprint, CAPACITY, WAIT_S * 10)
            result = decode(self.target, client, prompt, DecodeConfig(decoder, 0.0, 4, MAX_NEW), frozenset({EOS}),
                            torch.Generator().manual_seed(0))
            client.shutdown()
            same = result.tokens == self.reference[tuple(prompt)][:len(result.tokens)]
            return ("accepted", decoder) if same else ("wrong", f"{decoder} {prompt}: {result.tokens}")
        except (ProtocolError, PeerDied, PeerTimeout, InputError) as e:
            return "refused", type(e).__name__
        except Exception as e:  # a bug: counted, not raised, so that the campaign goes on
            return "crashed", f"target: {type(e).__name__}: {e}"
        finally:
            self.last_log = channel.log
            channel.close(0.1)

    def _wait_released(self) -> None:
        """Wait until the server has let the last trial's target go (it closed, or shut its session)."""
        deadline = time.monotonic() + 5.0
        while self.server.peer is not None and time.monotonic() < deadline:
            time.sleep(0.002)

    def run(self, mutations: int) -> dict:
        counts, kinds, examples, types = Counter(), Counter(), {}, Counter()
        for _ in range(mutations):
            plan = self.plan()
            types[plan.type] += 1
            if plan.how == "inject":
                types["injected"] += 1
            outcome, detail = self.trial(plan)
            if not plan.done:
                outcome = "untouched"  # the decode ended before the message the plan named
            counts[outcome] += 1
            if outcome == "refused":
                kinds[detail] += 1
            elif outcome != "accepted":
                examples.setdefault(outcome, f"{plan.type}#{plan.occurrence} {plan.how}: {detail}")
            if outcome == "hung":
                break  # its thread still holds the drafter
        return {"tried": sum(counts.values()), **{o: counts[o] for o in OUTCOMES}, "untouched": counts["untouched"],
                "refused_by_type": dict(kinds.most_common()), "examples": examples, "tampered_types": dict(types)}

    def close(self) -> None:
        if self.thread.is_alive():
            stop = Channel.connect(self.endpoint, peer="drafter")
            client = RemoteDrafter(stop, VOCAB, POOL, 5.0)
            client.handshake("mock", self.fingerprint, CAPACITY, 5.0)
            self.server.persist = False
            client.shutdown()
            self.thread.join(5.0)
            stop.close()
        self.listener.close()
        shutil.rmtree(os.path.dirname(self.endpoint[len("ipc://"):]), ignore_errors=True)


# -- targeted attacks: each raises the typed error that refuses it, or returns when it was accepted ----------

HEAD_CONTEXT = 256  # the KV slots of a head pair's target and its Hello
HEAD_PROMPT = [5, 17, 3, 40, 41]
HEADS = {  # drafter serving an EAGLE-3 head -> (its options, its target's)
    "eagle3:mock": (ModelOptions(model="eagle3:mock", mock_noise=0.5), ModelOptions(model="mock")),
    "random:eagle3-tiny": (ModelOptions(model="random:eagle3-tiny", head_target="random:tiny",
                                        max_context=HEAD_CONTEXT),
                           ModelOptions(model="random:tiny", max_context=HEAD_CONTEXT))}


class HeadPair:
    """A persisting DrafterServer serving an EAGLE-3 head (HEADS), and an in-process target it fits."""

    def __init__(self, arena: Arena, name: str) -> None:
        head, target = HEADS[name]
        self.server = arena.serve(f"ipc://{arena.folder}/{name.replace(':', '-')}.sock", head)
        self.loaded = load(target, "target")
        self.target = Target(self.loaded.runner(HEAD_CONTEXT))
        self.want = decode(self.target, None, HEAD_PROMPT, DecodeConfig("ar", 0.0, 1, MAX_NEW), frozenset(),
                           None).tokens

    @contextmanager
    def connected(self) -> Iterator[RemoteDrafter]:
        """A target's client after its handshake with the head, the target keeping the features it takes."""
        channel = Channel.connect(self.server.endpoint, peer="drafter")
        try:
            client = RemoteDrafter(channel, self.loaded.vocab_size, POOL, 5.0)
            ready = client.handshake(self.loaded.name, self.loaded.tokenizer.fingerprint, HEAD_CONTEXT, 5.0,
                                     shape=self.loaded.shape)
            self.target.keep_features(ready.layers())
            yield client
        finally:
            channel.close()

    def prompt_features(self, prompt=HEAD_PROMPT) -> torch.Tensor:
        """(n - 1, F) the features a Start of `prompt` carries: the target's prefill keeps them."""
        decode(self.target, None, prompt, DecodeConfig("ar", 0.0, 1, 1), frozenset(), None)
        return self.target.features(0, len(prompt) - 1)

    def decodes_as_ar(self) -> bool:
        """Whether a fresh target's greedy draft decode through the head gives ar's output."""
        _released(self.server)
        with self.connected() as client:
            got = decode(self.target, client, HEAD_PROMPT, DecodeConfig("draft", 0.0, 4, MAX_NEW), frozenset(),
                         None).tokens
            client.shutdown()
        return self.server.thread.is_alive() and got == self.want

    def close(self) -> None:
        _stop(self.server, Channel.connect(self.server.endpoint, peer="drafter"), self.loaded.vocab_size,
              self.loaded.tokenizer.fingerprint, self.loaded.shape)


def _released(server: DrafterServer) -> None:
    """Wait until `server` has let its last target go."""
    deadline = time.monotonic() + 5.0
    while server.peer is not None and time.monotonic() < deadline:
        time.sleep(0.002)


def _stop(server: DrafterServer, channel: Channel, vocab: int, fingerprint: str, shape=(0, 0)) -> None:
    """Stop a persisting server through `channel` (closed after), and close its listener."""
    server.persist = False
    if server.thread.is_alive():
        server.peer = None
        client = RemoteDrafter(channel, vocab, POOL, 5.0)
        client.handshake("closing", fingerprint, HEAD_CONTEXT, 5.0, shape=shape)
        client.shutdown()
        server.thread.join(5.0)
    channel.close()
    server.peers.listener.close()


class Arena:
    """Where targeted attacks run: a persisting DrafterServer in clear, one with CURVE (trusting only its own
    key), and fresh endpoints for fake drafters; every endpoint in a private directory."""

    def __init__(self) -> None:
        from protocol.keys import key_dir, own_keys, trusted_keys
        from protocol.transport import ServerKeys

        self.fingerprint = MockTokenizer(VOCAB).fingerprint
        self.folder = Path(private_ipc_endpoint()[len("ipc://"):]).parent
        self.keys = key_dir(str(self.folder / "keys"))
        self.own = own_keys(self.keys)
        self.contexts: list = []
        self.plain = self.serve(f"ipc://{self.folder}/plain.sock")
        trust = ServerKeys(self.own, lambda key: key in trusted_keys(self.keys))
        self.curve = self.serve(f"ipc://{self.folder}/curve.sock", keys=trust)
        self.heads = {name: HeadPair(self, name) for name in HEADS}
        self.fakes = 0

    def serve(self, endpoint: str, options: ModelOptions = ModelOptions(model="mock"), keys=None) -> DrafterServer:
        """A persisting DrafterServer of `options`' model on a thread."""
        server = DrafterServer(Listener.bind(endpoint, keys), load(options, "drafter"), persist=True)
        server.endpoint = endpoint
        server.thread = threading.Thread(target=server.serve, daemon=True)
        server.thread.start()
        return server

    def target(self, endpoint: str | None = None, keys=None) -> Channel:
        return Channel.connect(endpoint or self.plain.endpoint, peer="drafter", keys=keys)

    def client(self, channel: Channel, pool: PoolConfig = POOL) -> RemoteDrafter:
        return RemoteDrafter(channel, VOCAB, pool, 5.0)

    def shake(self, channel: Channel, pool: PoolConfig = POOL) -> RemoteDrafter:
        client = self.client(channel, pool)
        client.handshake("mock", self.fingerprint, CAPACITY, 5.0)
        return client

    @contextmanager
    def connected(self, endpoint: str | None = None, keys=None) -> Iterator[tuple[Channel, RemoteDrafter]]:
        """A target's channel to `endpoint` after its handshake, closed on leaving (what they raise passes)."""
        channel = self.target(endpoint, keys)
        try:
            yield channel, self.shake(channel)
        finally:
            channel.close()

    def handshake(self, endpoint: str | None = None, keys=None) -> None:
        with self.connected(endpoint, keys):
            pass

    def fake(self, keys=None) -> tuple[zmq.Socket, str]:
        """A bare ROUTER bound at a fresh endpoint, in clear or with CURVE `keys` (a Keypair)."""
        self.fakes += 1
        endpoint = f"ipc://{self.folder}/fake{self.fakes}.sock"
        context = zmq.Context()
        self.contexts.append(context)
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            sock.curve_server = True
            sock.curve_publickey, sock.curve_secretkey = keys.public, keys.secret
        sock.bind(endpoint)
        return sock, endpoint

    def serving(self) -> bool:
        """Every server alive, the plain one answers a fresh target once the last has gone, and each head's
        serves a fresh target's decode equal to ar's."""
        for server in (self.plain, self.curve):
            _released(server)
        channel = self.target()
        try:
            return self.plain.thread.is_alive() and self.curve.thread.is_alive() and \
                isinstance(self.shake(channel).channel, Channel) and \
                all(pair.decodes_as_ar() for pair in self.heads.values())
        except (ProtocolError, PeerDied, PeerTimeout):
            return False
        finally:
            channel.close()

    def close(self) -> None:
        from protocol.transport import ClientKeys

        _stop(self.plain, self.target(self.plain.endpoint), VOCAB, self.fingerprint)
        _stop(self.curve, self.target(self.curve.endpoint, ClientKeys(self.own, self.own.public)), VOCAB,
              self.fingerprint)
        for pair in self.heads.values():
            pair.close()
        for context in self.contexts:
            context.destroy(0)
        shutil.rmtree(self.folder, ignore_errors=True)


def _raw(channel: Channel, frames: list[bytes]):
    """Send crafted frames; the reply, an Error reply raised as PeerError."""
    channel.sock.send_multipart(frames)
    reply = channel.recv(5.0, "drafter_timeout", "reply")
    if isinstance(reply, Error):
        raise PeerError(reply.code, reply.message)
    return reply


def _answer(sock: zmq.Socket, *replies: list[bytes]) -> threading.Thread:
    """On a thread: receive one message on a fake drafter, then send it each of `replies` (frames)."""
    def run() -> None:
        try:
            if sock.poll(5000):
                peer, *_ = sock.recv_multipart()
                for frames in replies:
                    sock.send_multipart([peer, *frames])
        except zmq.ZMQError:  # the arena closed its fakes first: the attack was over
            pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _ready(arena: Arena) -> list[bytes]:
    return encode(Ready(PROTOCOL_VERSION, VOCAB, arena.fingerprint, "fake"))


def _pool(seconds: float = 0.001, config: PoolConfig = POOL):
    """A full pool of `config`'s shape for request 1 round 0, grown from the mock drafter's rows."""
    from drafter_proc.drafter import Drafter
    from protocol.messages import PoolMsg

    drafter = Drafter(MockRunner(MockModel(VOCAB, 0, 1.0), CAPACITY), config)
    pool = drafter.start([5, 17, 3]).pool
    return PoolMsg(1, 0, seconds, -1, 0.0, pool.token.astype(np.int32), pool.parent.astype(np.int32), pool.logp,
                   pool.expanded)


def nested_header_to_the_drafter(arena: Arena) -> None:
    channel = arena.target()
    try:
        _raw(channel, [b"\x91" * 1000 + b"\xc0"])
    finally:
        channel.close()


def nested_header_to_the_target(arena: Arena) -> None:
    sock, endpoint = arena.fake()
    _answer(sock, [b"\x91" * 1000 + b"\xc0"])
    arena.handshake(endpoint)


def oversized_frame_to_the_drafter(arena: Arena) -> None:
    with arena.connected() as (channel, _):
        _raw(channel, [encode(Error("x", "y"))[0], bytes(64 << 20)])


def oversized_frame_to_the_target(arena: Arena) -> None:
    sock, endpoint = arena.fake()
    _answer(sock, [_ready(arena)[0], bytes(64 << 20)])
    arena.handshake(endpoint)


def _hello_with(**change):
    def attack(arena: Arena) -> None:
        fields = dict(version=PROTOCOL_VERSION, vocab_size=VOCAB, fingerprint=arena.fingerprint, model="attacker",
                      topk=4, depth=3, expand=2, capacity=256)
        fields.update(change)
        channel = arena.target()
        try:
            _raw(channel, encode(Hello(**fields)))
        finally:
            channel.close()
    attack.__name__ = "hello_with_" + "_".join(f"{k}_{v}" for k, v in change.items())
    return attack


def squatter_in_clear(arena: Arena) -> None:
    from protocol.transport import ClientKeys

    sock, endpoint = arena.fake()
    _answer(sock, _ready(arena))
    arena.handshake(endpoint, ClientKeys(arena.own, arena.own.public))


def squatter_with_other_keys(arena: Arena) -> None:
    from protocol.keys import Keypair
    from protocol.transport import ClientKeys

    sock, endpoint = arena.fake(Keypair(*zmq.curve_keypair()))
    _answer(sock, _ready(arena))
    arena.handshake(endpoint, ClientKeys(arena.own, arena.own.public))


def squatter_seen_by_the_launcher(arena: Arena) -> None:
    from protocol.transport import endpoint_in_use

    sock, endpoint = arena.fake()
    if reason := endpoint_in_use(endpoint):
        raise EndpointError(f"--endpoint {endpoint}: {reason}")


def second_target(arena: Arena) -> None:
    first, second = arena.target(), arena.target()
    try:
        arena.shake(first)
        arena.shake(second)
    finally:
        first.close()
        second.close()


def unknown_key(arena: Arena) -> None:
    from protocol.keys import Keypair
    from protocol.transport import ClientKeys

    arena.handshake(arena.curve.endpoint, ClientKeys(Keypair(*zmq.curve_keypair()), arena.own.public))


def no_key_for_a_curve_drafter(arena: Arena) -> None:
    arena.handshake(arena.curve.endpoint)


def unsolicited_pool_before_start(arena: Arena) -> None:
    sock, endpoint = arena.fake()
    _answer(sock, _ready(arena), encode(_pool()))
    with arena.connected(endpoint) as (_, client):
        time.sleep(0.2)  # the unasked pool arrives
        client.start([5, 17, 3])


def end_for_another_request(arena: Arena) -> None:
    from protocol.messages import Commit, End, PoolMsg, Start

    with arena.connected() as (channel, _):
        assert isinstance(_raw(channel, encode(Start(1, np.array([5, 17, 3], np.int32)))), PoolMsg)
        channel.send(End(7))
        refusal = channel.recv(5.0, "drafter_timeout", "reply")
        reply = _raw(channel, encode(Commit(1, 1, np.array([4], np.int32))))
        assert isinstance(reply, PoolMsg) and reply.round == 1, reply  # request 1 is still open
        if isinstance(refusal, Error):
            raise PeerError(refusal.code, refusal.message)


def shutdown_before_the_handshake(arena: Arena) -> None:
    from protocol.messages import Shutdown

    channel = arena.target()
    try:
        _raw(channel, encode(Shutdown()))
    finally:
        channel.close()


def _fake_pool(pool_msg):
    def attack(arena: Arena) -> None:
        sock, endpoint = arena.fake()
        channel = arena.target(endpoint)
        try:
            _answer(sock, _ready(arena))
            client = arena.shake(channel)
            _answer(sock, encode(pool_msg()))
            client.start([5, 17, 3])
            client.pool()
        finally:
            channel.close()
    return attack


def terminal_escapes_in_an_error(arena: Arena) -> None:
    sock, endpoint = arena.fake()
    _answer(sock, encode(Error("x\x1b[2J", "\x1b[31mred\nline")))
    arena.handshake(endpoint)


# -- features on the wire: a head must refuse what it cannot take before any of its rows is written ---------

TINY = "random:eagle3-tiny"


def _spoiled(features: torch.Tensor, value: float, at: tuple | None = None) -> torch.Tensor:
    """`features` with `value` at `at` (every value when None)."""
    out = features.clone()
    if at is None:
        out.fill_(value)
    else:
        out[at] = value
    return out


def _start_with(value: float, at: tuple | None = None, head: str = TINY):
    """A Start whose features hold `value` at `at` (everywhere when None)."""
    def attack(arena: Arena) -> None:
        pair = arena.heads[head]
        features = _spoiled(pair.prompt_features(), value, at)
        with pair.connected() as client:
            client.start(HEAD_PROMPT, features)
            client.pool()
    return attack


def _round_one(pair: HeadPair, client: RemoteDrafter, commit_features: torch.Tensor | None = None):
    """Start HEAD_PROMPT and commit its next token with the target's features (or `commit_features`) -> the
    pool of round 1, or the PeerError that refused the Commit."""
    features = pair.prompt_features(HEAD_PROMPT + [pair.want[len(HEAD_PROMPT)]])
    client.start(HEAD_PROMPT, features[:-1])
    client.pool()
    client.commit(pair.want[len(HEAD_PROMPT):][:1], features[-1:] if commit_features is None else commit_features)
    try:
        return client.pool()
    except PeerError as e:
        return e


def _commit_with(value: float, retry: bool = False):
    """A valid Start, then a Commit whose features are all `value`; with `retry`, the same Commit with the
    target's features next, whose pool must be the one an undisturbed request gets."""
    def attack(arena: Arena) -> None:
        pair = arena.heads[TINY]
        with pair.connected() as client:
            clean = _round_one(pair, client)
            client.end()
            got = _round_one(pair, client, torch.full((1, pair.target.features(0, 1).shape[1]), value))
            if retry:
                client.round -= 1
                features = pair.prompt_features(HEAD_PROMPT + [pair.want[len(HEAD_PROMPT)]])
                client.commit(pair.want[len(HEAD_PROMPT):][:1], features[-1:])
                again = client.pool()
                assert np.array_equal(again.pool.token, clean.pool.token) and \
                    np.array_equal(again.pool.logp, clean.pool.logp), "the retried Commit's pool differs"
        if isinstance(got, PeerError):
            raise got
    return attack


def _to_the_mock_head(convert):
    """A Start and Commit to the mock head with the target's features converted: legal values it must take,
    the pools being those of the same values in float32."""
    def attack(arena: Arena) -> None:
        pair = arena.heads["eagle3:mock"]
        with pair.connected() as client:
            features = convert(pair.prompt_features())
            client.start(HEAD_PROMPT, features)
            got = client.pool()
            client.end()
            client.start(HEAD_PROMPT, features.float())
            want = client.pool()
        assert np.array_equal(got.pool.token, want.pool.token) and np.array_equal(got.pool.logp, want.pool.logp)
    return attack


def features_to_a_standalone_drafter(message: str):
    def attack(arena: Arena) -> None:
        with arena.connected() as (channel, client):
            features = torch.zeros(2, 16)
            if message == "Start":
                client.start([5, 17, 3], features)
            else:
                client.start([5, 17, 3])
                client.pool()
                client.commit([4, 4], features)
            client.pool()
    return attack


def commit_features_of_another_dtype(arena: Arena) -> None:
    pair = arena.heads[TINY]
    with pair.connected() as client:
        got = _round_one(pair, client, pair.prompt_features(HEAD_PROMPT + [7])[-1:].to(torch.bfloat16))
    if isinstance(got, PeerError):
        raise got


def _head_fc_beyond_float32(arena: Arena) -> None:
    _start_with(1.5e19)(arena)


# -- raw ZMTP: peers libzmq's own sockets would not be --------------------------------------------------------

ZMTP1_GREETING = bytes([5, 0]) + b"V1ID" + bytes([2, 0]) + b"x"  # identity "V1ID", then a one-byte message
ZMTP2_GREETING = b"\xff" + bytes(8) + b"\x7f" + bytes([1, 5, 0, 0]) + bytes([0, 1]) + b"x"  # revision 1, DEALER


def zmtp3_null_dealer(identity: bytes = b"") -> tuple[bytes, bytes]:
    """A ZMTP 3.0 DEALER's greeting and READY command in clear (NULL), with this routing id."""
    greeting = b"\xff" + bytes(8) + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\x00") + bytes(32)

    def prop(name: bytes, value: bytes) -> bytes:
        return bytes([len(name)]) + name + len(value).to_bytes(4, "big") + value

    body = b"\x05READY" + prop(b"Socket-Type", b"DEALER") + prop(b"Identity", identity)
    size = bytes([4, len(body)]) if len(body) < 256 else b"\x06" + len(body).to_bytes(8, "big")  # short or long
    return greeting, size + body


def empty_frames(header: bytes, count: int) -> bytes:
    """One message on the wire: `header`, then `count` - 1 empty frames."""
    return bytes([1, len(header)]) + header + b"\x01\x00" * (count - 2) + b"\x00\x00"


def _raw_connect(endpoint: str, identity: bytes | None = None):
    """A unix socket connected to `endpoint`; with `identity`, past a ZMTP 3 handshake as a DEALER."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HARD_S)
    sock.connect(endpoint[len("ipc://"):])
    if identity is not None:
        greeting, ready = zmtp3_null_dealer(identity)
        got = b""  # the drafter's greeting, then its READY once its ZAP handler admitted this peer
        try:
            sock.sendall(greeting)
            sock.sendall(ready)
            while b"READY" not in got[64:] and (data := sock.recv(4096)):
                got += data
        except ConnectionError:  # refused at the handshake: the caller finds the connection closed
            pass
    return sock


def _closed_by_peer(sock, seconds: float) -> bool:
    """Whether the other end closes the connection within `seconds` (what it sends meanwhile is read)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def _legacy(greeting: bytes):
    def attack(arena: Arena) -> None:
        sock = _raw_connect(arena.plain.endpoint)
        try:
            sock.sendall(greeting)
            if _closed_by_peer(sock, 5.0):
                raise PeerDied("the drafter closed the connection of a pre-ZMTP 3 peer")
        finally:
            sock.close()
    return attack


def many_frames(count: int):
    def attack(arena: Arena) -> None:
        sock = _raw_connect(arena.plain.endpoint, b"")
        try:
            sock.sendall(empty_frames(encode(Error("x", "y"))[0], count))
            wanted, seen = f"got {count}".encode(), b""
            while wanted not in seen:
                if not (data := sock.recv(4096)):
                    return  # closed without a refusal: accepted
                seen = seen[-64:] + data
            raise BadArray(f"peer reported bad-array: a message has at most 5 frames, got {count}")
        finally:
            sock.close()
    return attack


@dataclass(frozen=True)
class Attack:
    name: str
    run: object  # Callable[[Arena], None]
    error: type | None  # the typed error that refuses it; None: legal, it must be accepted
    match: str  # a regular expression its message matches


ATTACKS = [
    Attack("ZMTP 1.0 greeting to the drafter", _legacy(ZMTP1_GREETING), PeerDied,
           r"closed the connection of a pre-ZMTP 3 peer"),
    Attack("ZMTP 2.0 greeting to the drafter", _legacy(ZMTP2_GREETING), PeerDied,
           r"closed the connection of a pre-ZMTP 3 peer"),
    Attack("100,000-frame message to the drafter", many_frames(100_000), BadArray,
           r"at most 5 frames, got 100000"),
    Attack("nested header to the drafter", nested_header_to_the_drafter, PeerError,
           r"peer reported malformed: header nests 1000 levels deep"),
    Attack("nested header to the target", nested_header_to_the_target, MalformedMessage,
           r"header nests 1000 levels deep"),
    Attack("64 MiB frame to the drafter", oversized_frame_to_the_drafter, PeerDied,
           r"the drafter process closed its connection"),
    Attack("64 MiB frame to the target", oversized_frame_to_the_target, PeerDied,
           r"the drafter process closed its connection"),
    Attack("Hello with capacity 2^63 - 1", _hello_with(capacity=2**63 - 1), PeerError,
           rf"peer reported limit: `capacity` {2**63 - 1} is beyond the protocol's"),
    Attack("Hello beyond the drafter's request limit", _hello_with(capacity=REQUEST_CONTEXT + 1), PeerError,
           rf"peer reported limit: `capacity` {REQUEST_CONTEXT + 1} is beyond this drafter's {REQUEST_CONTEXT} KV "
           rf"slots \(its --max-request-context\)"),
    Attack("Hello with topk and expand 2^62", _hello_with(topk=2**62, expand=2**62), PeerError,
           rf"peer reported limit: a pool of `topk` {2**62}, `depth` 3 and `expand` {2**62} holds"),
    Attack("Hello with depth 100000", _hello_with(depth=100_000), PeerError,
           r"peer reported limit: `depth` 100000 is beyond the protocol's 64 pool levels"),
    Attack("Hello with topk beyond the vocabulary", _hello_with(topk=100, expand=1), PeerError,
           rf"peer reported limit: `topk` 100 is beyond the drafter's vocabulary of {VOCAB}"),
    Attack("squatter in clear, target with the drafter's key", squatter_in_clear, AccessDenied,
           r"the secure handshake with ipc://\S+ failed: the process there does not hold the secret key"),
    Attack("squatter with its own keys", squatter_with_other_keys, AccessDenied,
           r"the secure handshake with ipc://\S+ failed"),
    Attack("squatter seen by the launcher", squatter_seen_by_the_launcher, EndpointError,
           r"--endpoint ipc://\S+: another process listens on"),
    Attack("second target", second_target, DrafterBusy, r"the drafter serves another target"),
    Attack("unknown CURVE key", unknown_key, AccessDenied, r"refused this side's key: on its host, run "
           r"launch/pair.sh keys --allow"),
    Attack("no CURVE key for a CURVE drafter", no_key_for_a_curve_drafter, AccessDenied,
           r"the process there expects CURVE keys \(name the drafter's public key with `drafter_key`\)"),
    Attack("unsolicited pool before Start", unsolicited_pool_before_start, UnexpectedMessage,
           r"the drafter sent a PoolMsg before this side's Start, unasked"),
    Attack("End for another request", end_for_another_request, PeerError,
           r"peer reported stale: end of request 7, but request 1 is open"),
    Attack("Shutdown before the handshake", shutdown_before_the_handshake, PeerError,
           r"peer reported unexpected: Shutdown before the handshake \(Hello\)"),
    Attack("pool of another shape than the handshake's", _fake_pool(lambda: _pool(config=PoolConfig(4, 2, 2))),
           InvalidPoolMessage, r"pool for round 0: 12 candidates on levels of \[4, 8\]; the handshake's pool"),
    Attack("NaN timing in a pool", _fake_pool(lambda: _pool(seconds=math.nan)), MalformedMessage,
           r"`seconds` must be a finite number >= 0, got nan"),
    Attack("terminal escapes in an Error", terminal_escapes_in_an_error, PeerError,
           r"peer reported x\\x1b\[2J: \\x1b\[31mred\\nline$"),
    Attack("Start with every feature NaN to a head", _start_with(math.nan), PeerError,
           r"peer reported features: `features` row 0 holds nan: a target's features are finite and below 2\^64"),
    Attack("Start with every feature +Inf to a head", _start_with(math.inf), PeerError,
           r"peer reported features: `features` row 0 holds inf"),
    Attack("Start with one NaN feature to a head", _start_with(math.nan, (2, 5)), PeerError,
           r"peer reported features: `features` row 2 holds nan"),
    Attack("Commit with NaN features to a head", _commit_with(math.nan), PeerError,
           r"peer reported features: `features` row 0 holds nan"),
    Attack("Commit with NaN features to a head, then a valid retry", _commit_with(math.nan, retry=True),
           PeerError, r"peer reported features: `features` row 0 holds nan"),
    Attack("Commit with +Inf features to a head", _commit_with(math.inf), PeerError,
           r"peer reported features: `features` row 0 holds inf"),
    Attack("Start with features of 1e38 to a head", _start_with(1e38), PeerError,
           r"peer reported features: `features` row 0 holds 1e\+38"),
    Attack("Start with features of 1.5e19 to a head", _head_fc_beyond_float32, PeerError,
           r"peer reported features: `features` row 0 gives the head's fc a row beyond float32's range"),
    Attack("Commit with features of another dtype than its Start's", commit_features_of_another_dtype, PeerError,
           r"peer reported features: the Commit's features are bfloat16; its request's Start sent float32"),
    Attack("bfloat16 features to the mock head", _to_the_mock_head(lambda f: f.to(torch.bfloat16)), None, ""),
    Attack("features that are not whole numbers 0-255 to the mock head", _to_the_mock_head(lambda f: f * 0.37 - 9),
           None, ""),
    Attack("Start with features to a standalone drafter", features_to_a_standalone_drafter("Start"), PeerError,
           r"peer reported features: the drafter is a standalone model, not an EAGLE-3 head: it takes no features; "
           r"the Start carries 16 values a token"),
    Attack("Commit with features to a standalone drafter", features_to_a_standalone_drafter("Commit"), PeerError,
           r"the Commit carries 16 values a token"),
]


def attack(arena: Arena, case: Attack) -> tuple[str, str]:
    """Run one attack -> (outcome, detail): refused when it raised its typed error, and the drafters still
    serve; accepted when it returned; crashed or hung otherwise."""
    box: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            case.run(arena)
            box["error"] = None
        except BaseException as e:  # judged below
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HARD_S)
    if worker.is_alive():
        return "hung", f"still running after {HARD_S} s"
    error = box["error"]
    if not arena.serving():
        return "crashed", f"a drafter stopped serving ({error!r})"
    if error is None:
        return "accepted", "no error"
    typed = isinstance(error, (ProtocolError, PeerDied, PeerTimeout, InputError))
    if typed and isinstance(error, case.error) and re.search(case.match, str(error)):
        return "refused", type(error).__name__
    return ("refused" if typed else "crashed"), f"{type(error).__name__}: {error}"


# -- the drafter's memory under attack ----------------------------------------------------------------------

def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextmanager
def drafter_process() -> Iterator[tuple[str, subprocess.Popen, zmq.Context]]:
    """A persisting mock drafter process bound at a private ipc endpoint, and a context for its peers ->
    (endpoint, process, context); the process is killed on leaving."""
    endpoint = private_ipc_endpoint()
    folder = Path(endpoint[len("ipc://"):]).parent
    log = open(folder / "drafter.err", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "programs.drafter_program", "--model", "mock", "--endpoint",
                             endpoint, "--persist", "--log-level", "WARNING"], stderr=log,
                            cwd=Path(__file__).resolve().parents[1])
    context = zmq.Context()
    try:
        _wait_bound(endpoint, proc)
        if not _handshake(context, endpoint, [256]):  # it binds before loading: memory at rest is the loaded one
            raise RuntimeError("the drafter did not answer a handshake")
        yield endpoint, proc, context
    finally:
        context.destroy(0)
        proc.kill()
        proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def curve_drafter_process(keys: Path, soft_files: int) -> Iterator[tuple[str, subprocess.Popen]]:
    """A persisting mock drafter process on loopback tcp with CURVE (its keys and the target's in `keys`),
    started with a soft open-file limit of `soft_files` -> (endpoint, process) once it serves; killed on
    leaving."""
    endpoint = loopback_tcp_endpoint()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    log_path = keys / "drafter.err"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "programs.drafter_program", "--model", "mock", "--endpoint",
                                 endpoint, "--persist"], stderr=log, cwd=Path(__file__).resolve().parents[2],
                                env={**os.environ, "SPECPAIR_KEYS": str(keys)},
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft_files, hard)))
    try:
        deadline = time.monotonic() + 120
        while b"serving on" not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the drafter did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        yield endpoint, proc
    finally:
        proc.kill()
        proc.wait()


def open_files(pid: int) -> tuple[int, int]:
    """(descriptors a process holds, its soft limit on them)."""
    limit = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
                 if line.startswith("Max open files"))
    return len(os.listdir(f"/proc/{pid}/fd")), int(limit.split()[3])


def half_open(endpoint: str, pid: int, count: int, batch: int = 100, within_s: float = 3.0) -> list[socket.socket]:
    """`count` TCP connections to `endpoint` that never send a byte, made `batch` at a time, each batch once
    the drafter (process `pid`) holds the last or `within_s` s are spent -> the sockets (close them)."""
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    made: list[socket.socket] = []
    base, deadline = open_files(pid)[0], time.monotonic() + within_s
    while len(made) < count:
        for _ in range(min(batch, count - len(made))):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex((host, int(port)))
            made.append(sock)
        while open_files(pid)[0] < base + len(made) and time.monotonic() < deadline:
            time.sleep(0.01)
    return made


def served_beside_half_open(connections: int = 1100, soft_files: int = 1024, ready_s: float = 5.0) -> dict:
    """A CURVE drafter process started with a soft limit of `soft_files` open files, `connections` connections
    that never begin their handshake, then a target with an authorized key: how many descriptors the drafter
    held, its limit, and the seconds until the target's Ready (None: none within `ready_s`)."""
    with tempfile.TemporaryDirectory(prefix="half-open-") as folder:
        keys = Path(folder) / "keys"
        own = own_keys(key_dir(str(keys)))
        with curve_drafter_process(keys, soft_files) as (endpoint, proc):
            before, limit = open_files(proc.pid)
            socks = half_open(endpoint, proc.pid, connections)
            try:
                held = open_files(proc.pid)[0] - before
                channel = Channel.connect(endpoint, peer="drafter", keys=ClientKeys(own, own.public))
                t0 = time.perf_counter()
                try:
                    RemoteDrafter(channel, VOCAB, POOL, WAIT_S).handshake("mock", MockTokenizer(VOCAB).fingerprint,
                                                                          CAPACITY, ready_s)
                    seconds = time.perf_counter() - t0
                except (PeerTimeout, PeerDied, AccessDenied):
                    seconds = None
                finally:
                    channel.close()
            finally:
                for sock in socks:
                    sock.close()
    return {"connections": connections, "soft_files_given": soft_files, "soft_files": limit, "held": held,
            "ready_s": seconds}


def memory_under_attack(frame_mib: int = 512, hellos: int = 8) -> dict:
    """A mock drafter process's RSS (MiB) at rest, after an oversized frame, after `hellos` Hellos of growing
    capacity (the last at its request limit), under Hellos beyond that limit, a many-frame message and long
    routing ids; and whether it still served a handshake after each attack."""
    with drafter_process() as (endpoint, proc, context):
        out = {"rest_mib": rss_mib(proc.pid)}
        attacker = _dealer(context, endpoint)
        header = encode(Hello(PROTOCOL_VERSION, VOCAB, "x", "attacker", 4, 3, 2, 256))[0]
        attacker.send_multipart([header, bytes(frame_mib << 20)], copy=False)
        time.sleep(1.0)
        attacker.close(0)
        out[f"after_{frame_mib}_mib_frame_mib"] = rss_mib(proc.pid)
        out["served_after_frame"] = _handshake(context, endpoint, [256])
        out[f"after_{hellos}_hellos_mib"] = (_handshake(context, endpoint, [REQUEST_CONTEXT >> (hellos - 1 - i)
                                                                            for i in range(hellos)])
                                             and rss_mib(proc.pid))
        out.update(memory_requests_cost(context, endpoint, proc.pid))
        out["served_after_requests"] = _handshake(context, endpoint, [256])
        out.update(many_frames_cost(endpoint, proc.pid))
        out.update(long_ids_cost(endpoint, proc.pid))  # beyond the frame limit of its request limit
        out.update(long_ids_cost(endpoint, proc.pid, id_bytes=request_frame_bytes(REQUEST_CONTEXT) - 64))  # within
        out["served_after_ids"] = _handshake(context, endpoint, [256])
        out["alive"] = proc.poll() is None
        return out


@contextmanager
def peak_rss(pid: int) -> Iterator[list[float]]:
    """The process's largest RSS (MiB) while the block runs, sampled every 10 ms, in the list yielded."""
    peak, done = [rss_mib(pid)], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mib(pid))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()


BUSY_RETRY_S = 5.0  # how long a Hello told `busy` is sent again (an earlier peer's departure not yet seen)


def memory_requests_cost(context, endpoint: str, pid: int, count: int = 200) -> dict:
    """`count` Hellos from one authorized peer asking for KV caches beyond the drafter's request limit, up to
    the largest the protocol carries: the drafter's RSS before, at its peak and after, the seconds they took,
    and how many were answered by a typed `limit` refusal (a Hello told `busy` is sent again: `_ask`)."""
    fingerprint = MockTokenizer(VOCAB).fingerprint
    capacities = np.linspace(REQUEST_CONTEXT + 1, MAX_CONTEXT, 8).astype(int).tolist()
    sock, before, refused = _dealer(context, endpoint), rss_mib(pid), 0
    t0 = time.perf_counter()
    try:
        with peak_rss(pid) as peak:
            for i in range(count):
                capacity = capacities[i % len(capacities)]
                reply = _ask(sock, Hello(PROTOCOL_VERSION, VOCAB, fingerprint, "mock", 4, 3, 2, capacity))
                if reply is None:
                    break
                refused += isinstance(reply, Error) and reply.code == "limit" and str(REQUEST_CONTEXT) in reply.message
    finally:
        sock.close(0)
    name = f"requests_{count}"
    return {f"{name}_refused": refused, f"{name}_seconds": round(time.perf_counter() - t0, 2),
            f"{name}_before_mib": before, f"{name}_peak_mib": peak[0], f"{name}_after_mib": rss_mib(pid)}


def many_frames_cost(endpoint: str, pid: int, count: int = 2_000_000) -> dict:
    """One message of `count` frames from a raw ZMTP 3 peer: the drafter's RSS before, at its peak and after
    its refusal, and the seconds from the last byte sent to the refusal received."""
    sock = _raw_connect(endpoint, b"")
    before = rss_mib(pid)
    try:
        with peak_rss(pid) as peak:
            sock.sendall(empty_frames(encode(Error("x", "y"))[0], count))
            t0, seen, wanted = time.perf_counter(), b"", f"got {count}".encode()
            while wanted not in seen and (data := sock.recv(4096)):
                seen = seen[-64:] + data
            seconds = time.perf_counter() - t0
    finally:
        sock.close()
    return {f"frames_{count}_refused": wanted in seen, f"frames_{count}_seconds": round(seconds, 2),
            f"frames_{count}_before_mib": before, f"frames_{count}_peak_mib": peak[0],
            f"frames_{count}_after_mib": rss_mib(pid)}


def long_ids_cost(endpoint: str, pid: int, peers: int = 300, id_bytes: int = 1 << 20) -> dict:
    """`peers` raw peers, each with a routing id of `id_bytes`, connected at once and each sending one
    message, then leaving: how many the drafter kept connected, and its RSS before, at its peak (all
    connected) and after (2.5 s after they left: a quiet second after many departures hands memory back)."""
    before, held = rss_mib(pid), []
    name = f"ids_{peers}x{id_bytes >> 10}_kib"
    try:
        with peak_rss(pid) as peak:
            for i in range(peers):
                sock = _raw_connect(endpoint, i.to_bytes(4, "big") * (id_bytes // 4))
                held.append(sock)
                try:
                    sock.sendall(empty_frames(encode(Error("x", "y"))[0], 2))
                except OSError:  # the drafter closed the connection at its handshake
                    pass
            time.sleep(1.0)
            kept = sum(_still_open(sock) for sock in held)
    finally:
        for sock in held:
            sock.close()
    time.sleep(2.5)
    return {f"{name}_kept": kept, f"{name}_before_mib": before, f"{name}_peak_mib": peak[0],
            f"{name}_after_mib": rss_mib(pid)}


def _still_open(sock) -> bool:
    """Whether the other end has not closed the connection (what it sent is read, without waiting)."""
    sock.setblocking(False)
    try:
        while sock.recv(1 << 16):
            pass
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def _dealer(context, endpoint: str):
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _wait_bound(endpoint: str, proc) -> None:
    path = endpoint[len("ipc://"):]
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the drafter did not start")
        time.sleep(0.05)


def _handshake(context, endpoint: str, capacities: list[int]) -> bool:
    """Hellos of these capacities from one fresh target -> whether each got a Ready."""
    sock = _dealer(context, endpoint)
    try:
        fingerprint = MockTokenizer(VOCAB).fingerprint
        return all(isinstance(_ask(sock, Hello(PROTOCOL_VERSION, VOCAB, fingerprint, "mock", 4, 3, 2, capacity)),
                              Ready) for capacity in capacities)
    finally:
        sock.close(0)


def _ask(sock: zmq.Socket, msg) -> object:
    """Send `msg` and return the drafter's reply (None after 30 s). One told `busy` is sent again for up to
    BUSY_RETRY_S: the drafter learns that an earlier peer left a moment after it has (a closed connection
    is reported by its monitor), and a new peer's request in that moment is refused as a second target's."""
    from protocol.codec import decode as decode_frames

    def ask():
        sock.send_multipart(encode(msg))
        return decode_frames(sock.recv_multipart()) if sock.poll(30_000) else None

    return ask_while_busy(ask, BUSY_RETRY_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.protocol.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutations", type=int, default=300, help="trials of the campaign (default: 300)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the campaign's choices (default: 0)")
    parser.add_argument("--memory", action="store_true",
                        help="also measure a drafter process's memory under a 512 MiB frame, Hellos within and "
                             "beyond its request limit, two million frames and long routing ids")
    parser.add_argument("--half-open", action="store_true",
                        help="also start a CURVE drafter process with a soft limit of 1024 open files, make 1,100 "
                             "connections that never begin their handshake, and time a keyed target's Ready")
    ns = parser.parse_args(argv)
    if ns.mutations < 0:
        parser.error(f"--mutations must be >= 0, got {ns.mutations}")
    torch.set_num_threads(1)
    logging.disable(logging.CRITICAL)  # every refusal is logged by the side that refused it
    t0 = time.perf_counter()
    arena = Arena()
    try:
        targeted = {case.name: attack(arena, case) for case in ATTACKS}
    finally:
        arena.close()
    campaign = Campaign(ns.seed)
    try:
        result = campaign.run(ns.mutations)
    finally:
        campaign.close()
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"targeted attacks: {len(targeted)}")
    for name, (outcome, detail) in targeted.items():
        print(f"  {outcome:<10}{name}: {detail}")
    result["targeted"] = {"tried": len(targeted), **Counter(o for o, _ in targeted.values()),
                          "cases": {name: outcome for name, (outcome, _) in targeted.items()}}
    print(f"campaign: {result['tried']} tampered decodes in {result['seconds']} s (seed {ns.seed})")
    for outcome in OUTCOMES + ("untouched",):
        print(f"  {outcome:<10}{result[outcome]:>6}")
    print("  refused with: " + ", ".join(f"{k} {v}" for k, v in result["refused_by_type"].items()))
    for outcome, example in result["examples"].items():
        print(f"  first {outcome}: {example}")
    if ns.memory:
        result["memory"] = memory_under_attack()
        print("drafter RSS (MiB): " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in result["memory"].items()))
    if ns.half_open:
        result["half_open"] = served_beside_half_open()
        print("half-open connections: " + ", ".join(f"{k} {v}" for k, v in result["half_open"].items()))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
