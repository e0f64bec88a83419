"""The codec: every message type round-trips exactly, and every malformed frame set is refused with a typed
ProtocolError whose message names the problem."""

from __future__ import annotations

import math
import pickle
from dataclasses import fields

import msgpack
import numpy as np
import pytest

from protocol.codec import MAX_ARRAY_LENGTH, MAX_HEADER_BYTES, decode, encode
from protocol.errors import BadArray, BadFeatures, MalformedMessage, ProtocolError, UnexpectedMessage, UnknownMessage
from protocol.messages import (MESSAGES, PROTOCOL_VERSION, Ahead, Commit, End, Error, Hello, Kind, PoolMsg,
                               Ready, Shutdown, Start, Waiting)

# One instance of every message type, with no field left at a default and arrays that are not all zero.
SAMPLES = [
    Hello(PROTOCOL_VERSION, 49152, "0123abcd", "org/target-model", 10, 8, 10, 4096),
    Ready(PROTOCOL_VERSION, 49152, "0123abcd", "org/drafter-model", "sha256:00ff", "float32", "cpu",
          '{"576x576": ["transposed", "packed", "stock"]}'),
    Start(7, np.array([1, 49151, 0, 12], np.int32)),
    Commit(7, 3, np.array([5, 2**31 - 1], np.int32)),
    PoolMsg(7, 3, 0.0125, 1, 0.03, np.array([4, 9, 4], np.int32), np.array([-1, -1, 0], np.int32),
            np.array([-0.1, -2.5, -0.75], np.float32), np.array([True, False, False])),
    End(7),
    Error("token-range", "tokens[1] = 70 is outside the vocabulary [0, 64)", 7),
    Shutdown(),
    Ahead(7, 4, np.array([9, 4, 11], np.int32)),
    Waiting(7, 4),
    Hello(PROTOCOL_VERSION, 128256, "0123abcd", "org/target-model", 10, 8, 10, 4096, 4096, 32),
    Ready(PROTOCOL_VERSION, 128256, "0123abcd", "eagle3:org/head", feature_layers="2,16,29"),
    Start(7, np.array([1, 5, 9], np.int32), np.arange(2 * 3 * 2, dtype=np.uint8), "bfloat16", 3),
    Commit(7, 3, np.array([5], np.int32), np.arange(4 * 2, dtype=np.uint8), "float32", 2),
]


def assert_same_message(got, want) -> None:
    assert type(got) is type(want)
    for f in fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype, f.name
            np.testing.assert_array_equal(a, b, err_msg=f.name)
        else:
            assert type(a) is type(b) and a == b, f.name


def header_of(msg) -> dict:
    return msgpack.unpackb(encode(msg)[0])


def frames(header, *arrays: bytes) -> list[bytes]:
    return [msgpack.packb(header, use_bin_type=True), *arrays]


def test_samples_cover_every_message_kind():
    # Guards the round-trip test below: a new message type must get a sample.
    assert {type(m) for m in SAMPLES} == set(MESSAGES.values())
    assert set(MESSAGES) == set(Kind)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(msg):
    assert_same_message(decode(encode(msg)), msg)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_decoder_tied_to_expected_type_accepts_it(msg):
    assert_same_message(decode(encode(msg), expect=(type(msg),)), msg)


def test_arrays_are_sent_in_their_declared_dtype():
    # The sender may hold int64 token ids and a strided view; the wire always carries contiguous int32.
    prompt = np.arange(10, dtype=np.int64)[::3]
    got = decode(encode(Start(1, prompt)))
    assert got.prompt.dtype == np.int32
    np.testing.assert_array_equal(got.prompt, [0, 3, 6, 9])


def test_decoded_arrays_are_writable_copies():
    # Frames can be reused by zmq; a decoded array must own its memory.
    data = encode(Commit(1, 1, np.array([1, 2, 3], np.int32)))
    got = decode(data)
    assert got.tokens.flags.writeable and got.tokens.flags.owndata


def test_integer_accepted_for_a_float_field():
    # msgpack writes a whole-number float from some encoders as an int; the value is the same.
    h = header_of(SAMPLES[4])
    h["f"]["seconds"] = 2
    got = decode(frames(h, *encode(SAMPLES[4])[1:]))
    assert type(got.seconds) is float and got.seconds == 2.0


@pytest.mark.parametrize("frame_list, message", [
    ([], r"empty message: no header frame"),
    ([b"\xc1"], r"header is not valid msgpack"),
    ([b"\x93\x01"], r"header is not valid msgpack"),  # truncated array
    ([pickle.dumps(End(1))], r"header is not valid msgpack"),  # no pickle path, however the bytes look
    ([msgpack.packb([6, {"request": 1}, []])], r"header must be a map with keys k, f, a; got \[6, "),
    ([msgpack.packb({"k": 6, "f": {"request": 1}})], r"header must be a map with keys k, f, a; got \{"),
    ([msgpack.packb({"k": 6, "f": {"request": 1}, "a": [], "x": 0})], r"header must be a map with keys k, f, a"),
    ([msgpack.packb({1: 6})], r"header is not valid msgpack \(ValueError"),  # strict map keys
    ([b"\x80" * (MAX_HEADER_BYTES + 1)], rf"header frame of {MAX_HEADER_BYTES + 1} bytes exceeds {MAX_HEADER_BYTES}"),
], ids=["empty", "reserved-byte", "truncated", "pickle", "list", "missing-key", "extra-key", "int-keys",
        "oversized"])
def test_malformed_header_is_refused(frame_list, message):
    with pytest.raises(MalformedMessage, match=message):
        decode(frame_list)


@pytest.mark.parametrize("make, message", [
    (lambda: Commit(7, 3, np.array([5, 6], np.int32), np.zeros(8, np.uint8), "float32", 2),
     r"`features` holds 8 bytes; 2 rows of 2 float32 values take 16"),
    (lambda: Start(7, np.array([5, 6], np.int32), np.zeros(4, np.uint8), "int8", 4),
     r"`feature_dtype` must be one of float32, bfloat16, float16, got 'int8'"),
    (lambda: Start(7, np.array([5, 6], np.int32), np.zeros(0, np.uint8), "float32", 0),
     r"`feature_width` must be 1 to 49152, got 0"),
    (lambda: Ready(PROTOCOL_VERSION, 64, "f", "m", feature_layers="2,x"),
     r"Ready.feature_layers must list up to 8 layer numbers"),
])
def test_features_that_do_not_fit_their_tokens_are_refused(make, message):
    with pytest.raises(ProtocolError, match=message):
        decode(encode(make()))


def raw_features(values, dtype: str) -> np.ndarray:
    """(rows, width) values -> the bytes a target sends them as, in `dtype` (bfloat16's through torch)."""
    import torch

    tensor = torch.tensor(values, dtype=torch.float32).to(getattr(torch, dtype))
    return tensor.contiguous().view(torch.uint8).numpy().reshape(-1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("value, shown", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
                                          (1e38, "(1e\\+38|9.969e\\+37|inf)"), (-2.0**64, "(-1.845e\\+19|-inf)")],
                         ids=["nan", "inf", "-inf", "1e38", "-2^64"])
def test_features_not_finite_or_beyond_2_to_the_64_are_refused_naming_their_row(dtype, value, shown):
    values = [[1.0, -2.5, 3.0], [0.5, 0.25, value]]
    with pytest.raises(BadFeatures, match=rf"`features` row 1 holds {shown}: a target's features are finite and "
                                          rf"below 2\^64 in magnitude"):
        decode(encode(Commit(7, 3, np.array([5, 6], np.int32), raw_features(values, dtype), dtype, 3)))


@pytest.mark.parametrize("dtype, largest", [("float32", 1.8e19), ("bfloat16", 1.8e19), ("float16", 65504.0)])
def test_features_up_to_the_bound_pass_unchanged(dtype, largest):
    raw = raw_features([[0.0, -0.0, 1e-30], [-largest, largest, 3.5]], dtype)
    msg = decode(encode(Start(7, np.array([5, 6, 7], np.int32), raw, dtype, 3)))
    np.testing.assert_array_equal(msg.features, raw)


@pytest.mark.parametrize("kind, shown", [(99, "99"), (0, "0"), ("1", "'1'"), (True, "True"), (1.0, "1.0"),
                                         (None, "None")])
def test_unknown_message_kind_is_refused(kind, shown):
    with pytest.raises(UnknownMessage, match=rf"unknown message kind {shown}$"):
        decode(frames({"k": kind, "f": {}, "a": []}))


@pytest.mark.parametrize("change, message", [
    (lambda f: f.pop("capacity"), r"Hello needs fields \['capacity', 'depth', 'expand', 'fingerprint', 'hidden_size', "
                                  r"'layers', 'model', 'topk', 'version', 'vocab_size'\], got \['depth', .*'vocab_size'\]"),
    (lambda f: f.update(extra=1), r"Hello needs fields \[.*\], got \[.*'extra', .*\]"),
    (lambda f: f.update(version="1"), r"Hello.version must be int, got str"),
    (lambda f: f.update(version=True), r"Hello.version must be int, got bool"),
    (lambda f: f.update(vocab_size=64.0), r"Hello.vocab_size must be int, got float"),
    (lambda f: f.update(model=b"mock"), r"Hello.model must be str, got bytes"),
    (lambda f: f.update(fingerprint=None), r"Hello.fingerprint must be str, got NoneType"),
    (lambda f: f.update(topk=[10]), r"Hello.topk must be int, got list"),
], ids=["missing", "extra", "str-for-int", "bool-for-int", "float-for-int", "bytes-for-str", "nil-for-str",
        "list-for-int"])
def test_wrong_scalar_fields_are_refused(change, message):
    h = header_of(SAMPLES[0])
    change(h["f"])
    with pytest.raises(MalformedMessage, match=message):
        decode(frames(h))


def test_ready_reads_its_linear_kernels():
    assert SAMPLES[1].kernels() == {"576x576": ["transposed", "packed", "stock"]}
    assert Ready(PROTOCOL_VERSION, 64, "f", "m").kernels() == {}


@pytest.mark.parametrize("text, message", [
    ("{", r"Ready.linear_kernels is not JSON \(JSONDecodeError\)"),
    ("[" * 30_000 + "]" * 30_000, r"Ready.linear_kernels is not JSON \(RecursionError\)"),
    ('["576x576"]', r"Ready.linear_kernels must map weight shapes to lists of kernel names"),
    ('{"576x576": "packed"}', r"must map weight shapes to lists of kernel names"),
    ('{"576x576": [1, 2]}', r"must map weight shapes to lists of kernel names"),
], ids=["cut", "deep", "list", "str-for-list", "int-names"])
def test_ready_refuses_linear_kernels_it_cannot_read(text, message):
    h = header_of(SAMPLES[1])
    h["f"]["linear_kernels"] = text
    with pytest.raises(MalformedMessage, match=message):
        decode(frames(h))


def test_fields_as_a_list_are_refused():
    with pytest.raises(MalformedMessage, match=r"End needs fields \['request'\], got \[7\]"):
        decode(frames({"k": int(Kind.END), "f": [7], "a": []}))


def test_field_map_mixing_bytes_and_str_keys_is_refused():
    # The error message sorts the keys it got; bytes and str keys do not compare with each other.
    with pytest.raises(MalformedMessage, match=r"End needs fields \['request'\], got \[b'request', 'x'\]"):
        decode(frames({"k": int(Kind.END), "f": {b"request": 7, "x": 1}, "a": []}))


def test_float_field_refuses_text():
    h = header_of(SAMPLES[4])
    h["f"]["seconds"] = "0.1"
    with pytest.raises(MalformedMessage, match=r"PoolMsg.seconds must be float, got str"):
        decode(frames(h, *encode(SAMPLES[4])[1:]))


START_FIELDS = {"request": 1, "feature_dtype": "", "feature_width": 0}
NO_FEATURES = ["|u1", [0]]


def start_frames(spec, data: bytes) -> list[bytes]:
    return frames({"k": int(Kind.START), "f": START_FIELDS, "a": [spec, NO_FEATURES]}, data, b"")


TOKENS = np.array([1, 2, 3], np.int32)


@pytest.mark.parametrize("frame_list, message", [
    (start_frames(["<i8", [3]], TOKENS.astype(np.int64).tobytes()),
     r"Start.prompt must have dtype int32 \(<i4\), got '<i8'"),
    (start_frames([">i4", [3]], TOKENS.astype(">i4").tobytes()), r"must have dtype int32 \(<i4\), got '>i4'"),
    (start_frames(["<f4", [3]], TOKENS.astype(np.float32).tobytes()), r"must have dtype int32 \(<i4\), got '<f4'"),
    (start_frames(["<i4", [1, 3]], TOKENS.tobytes()),
     rf"Start.prompt must be 1-D with at most {MAX_ARRAY_LENGTH} entries, got shape \[1, 3\]"),
    (start_frames(["<i4", []], TOKENS.tobytes()), r"Start.prompt must be 1-D .*got shape \[\]"),
    (start_frames(["<i4", [-3]], TOKENS.tobytes()), r"Start.prompt must be 1-D .*got shape \[-3\]"),
    (start_frames(["<i4", [3.0]], TOKENS.tobytes()), r"Start.prompt must be 1-D .*got shape \[3.0\]"),
    (start_frames(["<i4", [MAX_ARRAY_LENGTH + 1]], TOKENS.tobytes()), r"Start.prompt must be 1-D with at most"),
    (start_frames(["<i4", [4]], TOKENS.tobytes()), r"Start.prompt: 12 bytes for 4 x int32"),
    (start_frames(["<i4", [3]], TOKENS.tobytes()[:-1]), r"Start.prompt: 11 bytes for 3 x int32"),
    (start_frames(["<i4", [0]], b""), r"`prompt` is empty"),
    (start_frames("<i4", TOKENS.tobytes()), r"Start.prompt: array spec must be \[dtype, shape\], got '<i4'"),
    (start_frames(["<i4", 3], TOKENS.tobytes()), r"array spec must be \[dtype, shape\], got \['<i4', 3\]"),
    (start_frames(["<i4", [3], 0], TOKENS.tobytes()), r"array spec must be \[dtype, shape\]"),
    (frames({"k": int(Kind.START), "f": START_FIELDS, "a": [["<i4", [3]], NO_FEATURES]}),
     r"Start carries 2 arrays; got 0 frames and 2 array specs"),
    (frames({"k": int(Kind.START), "f": START_FIELDS, "a": [["<i4", [3]], NO_FEATURES]}, TOKENS.tobytes(), b"",
            b""), r"Start carries 2 arrays; got 3 frames and 2 array specs"),
    (frames({"k": int(Kind.START), "f": START_FIELDS, "a": {}}, TOKENS.tobytes(), b""),
     r"Start carries 2 arrays; got 2 frames and no array specs"),
    (frames({"k": int(Kind.END), "f": {"request": 1}, "a": []}, b"\x00"),
     r"End carries 0 arrays; got 1 frames and 0 array specs"),
], ids=["int64", "big-endian", "float", "2-d", "0-d", "negative-length", "float-length", "too-long",
        "short-frame", "odd-bytes", "empty-prompt", "spec-not-list", "shape-not-list", "spec-too-long",
        "missing-frame", "extra-frame", "specs-not-list", "frame-for-scalar-message"])
def test_bad_array_is_refused(frame_list, message):
    with pytest.raises(BadArray, match=message):
        decode(frame_list)


def test_empty_commit_is_refused():
    with pytest.raises(BadArray, match=r"`tokens` is empty"):
        decode(encode(Commit(1, 1, np.array([], np.int32))))


def test_pool_arrays_of_different_lengths_are_refused():
    pool = SAMPLES[4]
    parts = encode(pool)
    h = header_of(pool)
    h["a"][1][1] = [2]  # `parent` claims two entries and carries two
    with pytest.raises(BadArray, match=r"`parent` has 2 entries, `token` has 3"):
        decode(frames(h, parts[1], parts[2][:8], parts[3], parts[4]))


def test_boolean_array_refuses_bytes_other_than_zero_and_one():
    parts = encode(SAMPLES[4])
    with pytest.raises(BadArray, match=r"PoolMsg.expanded: booleans must be bytes 0 or 1"):
        decode([*parts[:4], b"\x01\x02\x00"])


@pytest.mark.parametrize("msg, expect, message", [
    (SAMPLES[1], (PoolMsg, Error), r"got Ready where PoolMsg or Error was expected"),
    (SAMPLES[4], (Ready, Error), r"got PoolMsg where Ready or Error was expected"),
    (SAMPLES[7], (Start,), r"got Shutdown where Start was expected"),
])
def test_decoder_tied_to_a_type_refuses_others(msg, expect, message):
    with pytest.raises(UnexpectedMessage, match=message):
        decode(encode(msg), expect=expect)


def test_every_refusal_is_a_protocol_error_with_its_own_code():
    # The receiver puts `code` into its Error reply; the peer maps it back to a type.
    from protocol import errors

    types = [t for t in vars(errors).values() if isinstance(t, type) and issubclass(t, ProtocolError)]
    codes = [t.code for t in types]
    assert len(set(codes)) == len(codes)
    assert not issubclass(errors.PeerDied, ProtocolError) and not issubclass(errors.PeerTimeout, ProtocolError)
