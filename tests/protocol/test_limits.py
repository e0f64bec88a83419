"""Every size a peer controls is bounded before anything is allocated for it, and no received value, however
nested, can make the error path recurse; peer text reaches a log escaped."""

from __future__ import annotations

import dataclasses
import math

import msgpack
import numpy as np
import pytest

from protocol.codec import MAX_FRAMES, decode, encode, nesting
from protocol.errors import BadArray, LimitExceeded, MalformedMessage, PeerError, printable
from protocol.limits import MAX_CONTEXT, MAX_HEADER_BYTES, MAX_NESTING, MAX_POOL_CANDIDATES, MAX_POOL_DEPTH
from protocol.messages import PROTOCOL_VERSION, End, Hello, Kind, PoolMsg


def hello(**change) -> Hello:
    fields = dict(version=PROTOCOL_VERSION, vocab_size=64, fingerprint="f", model="m", topk=4, depth=3,
                  expand=2, capacity=256)
    fields.update(change)
    return Hello(**fields)


@pytest.mark.parametrize("depth", [5, 100, 1000], ids=["shallow", "deep", "msgpack-stack-limit"])
def test_a_deeply_nested_header_is_refused_without_recursion(depth):
    # b'\x91' * 1000 + b'\xc0' (a kilobyte) once made repr() raise RecursionError in both processes.
    frames = [b"\x91" * depth + b"\xc0"]
    with pytest.raises(MalformedMessage, match=rf"header nests {depth} levels deep; a message header nests at "
                                               rf"most {MAX_NESTING}"):
        decode(frames)


def test_nesting_inside_a_field_map_is_refused_too():
    header = {"k": int(Kind.END), "f": {"request": [[[[[1]]]]]}, "a": []}
    with pytest.raises(MalformedMessage, match=r"header nests 7 levels deep"):
        decode([msgpack.packb(header)])


def test_nesting_is_measured_without_recursion():
    value = None
    for _ in range(100_000):  # far beyond Python's recursion limit
        value = [value]
    assert nesting(value) == 100_000
    assert nesting({"a": [1, {"b": 2}]}) == 3 and nesting(7) == 0


@pytest.mark.parametrize("frames, error_type, match", [
    ([msgpack.packb({"k": int(Kind.END), "f": {"request": 1}, "a": []})] + [b""] * MAX_FRAMES, BadArray,
     rf"a message has at most {MAX_FRAMES} frames, got {MAX_FRAMES + 1}"),
    ([b"\xdb" + (2**31).to_bytes(4, "big")], MalformedMessage, r"header is not valid msgpack"),  # a 2 GiB str
    ([b"\xdd" + (2**31).to_bytes(4, "big")], MalformedMessage, r"header is not valid msgpack"),  # 2^31 items
    ([msgpack.packb({"k": int(Kind.END), "f": {"request": 1}, "a": [], "x": "\x1b[2J" * 10_000})],
     MalformedMessage, r"header must be a map with keys k, f, a; got \{'k': 6, 'f': \{\.\.\.\}, 'a': \[\.\.\.\], "),
], ids=["too-many-frames", "huge-string", "huge-array", "long-value"])
def test_sizes_inside_a_header_are_bounded(frames, error_type, match):
    with pytest.raises(error_type, match=match) as caught:
        decode(frames)
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize("change, match", [
    (dict(capacity=2**63 - 1), rf"`capacity` {2**63 - 1} is beyond the protocol's {MAX_CONTEXT} KV slots"),
    (dict(topk=2**62, expand=2**62), rf"holds {2**62 + 2 * 2**124} candidates; the protocol carries at most "
                                     rf"{MAX_POOL_CANDIDATES}"),
    (dict(depth=100_000), rf"`depth` 100000 is beyond the protocol's {MAX_POOL_DEPTH} pool levels"),
    (dict(topk=1000, depth=9, expand=10), r"a pool of `topk` 1000, `depth` 9 and `expand` 10 holds 81000"),
], ids=["capacity-2^63", "topk-expand-2^62", "depth-100000", "pool-too-large"])
def test_hello_values_beyond_the_protocol_are_refused(change, match):
    with pytest.raises(LimitExceeded, match=match):
        decode(encode(hello(**change)))


def test_the_largest_hello_within_the_limits_passes():
    largest = hello(capacity=MAX_CONTEXT, topk=MAX_POOL_CANDIDATES // 64 // 8, depth=9, expand=7)
    assert dataclasses.asdict(decode(encode(largest))) == dataclasses.asdict(largest)


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf, -0.5], ids=["nan", "inf", "-inf", "negative"])
def test_pool_timing_must_be_finite_and_non_negative(seconds):
    # It is written into records as JSON, where NaN and Infinity are not standard.
    msg = PoolMsg(1, 0, seconds, -1, 0.0, np.array([3], np.int32), np.array([-1], np.int32), np.array([-0.1], np.float32),
                  np.array([False]))
    with pytest.raises(MalformedMessage, match=rf"`seconds` must be a finite number >= 0, got {seconds!r}"):
        decode(encode(msg))


def test_a_pool_beyond_the_protocol_is_refused():
    n = MAX_POOL_CANDIDATES + 1
    msg = PoolMsg(1, 0, 0.0, -1, 0.0, np.zeros(n, np.int32), np.full(n, -1, np.int32), np.zeros(n, np.float32),
                  np.zeros(n, bool))
    with pytest.raises(LimitExceeded, match=rf"a pool of {n} candidates; the protocol carries at most"):
        decode(encode(msg))


@pytest.mark.parametrize("text, shown", [
    ("plain words, `backticks` and ünïcödé", "plain words, `backticks` and ünïcödé"),
    ("two\nlines\r", r"two\nlines\r"),
    ("\x1b[31mred\x1b[0m", r"\x1b[31mred\x1b[0m"),
    ("\u202egnp.exe", r"\u202egnp.exe"),  # a right-to-left override
    ("x" * 2000, "x" * 1000 + "..."),
], ids=["plain", "newlines", "terminal-escape", "bidi-override", "long"])
def test_peer_text_is_escaped_for_logs(text, shown):
    assert printable(text) == shown
    assert PeerError("c\nx", text).args[0] == rf"peer reported c\nx: {shown}"


def test_a_header_at_the_size_limit_is_still_read():
    header = {"k": int(Kind.END), "f": {"request": 1}, "a": []}
    packed = msgpack.packb(header)
    assert len(packed) < MAX_HEADER_BYTES
    assert isinstance(decode([packed]), End)
