"""Typed wire messages. Each class has a one-byte kind; array fields declare their dtype and are 1-D."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import ClassVar

import numpy as np

from pipeline.config import pool_size
from pipeline.cut import NOW, WEIGH
from protocol.errors import BadArray, BadFeatures, LimitExceeded, MalformedMessage
from protocol.limits import (MAX_ARRAY_LENGTH, MAX_CONTEXT, MAX_FEATURE_BYTES, MAX_FEATURE_WIDTH, MAX_POOL_CANDIDATES,
                             MAX_POOL_DEPTH)

PROTOCOL_VERSION = 8  # 3: Ahead and Waiting, and PoolMsg says whether its pool was grown ahead; 4: Waiting.cut;
# 5: Waiting.cut 2 (weighed cuts); 6: Ready.linear_kernels; 7: EAGLE-3 features (Hello's shape, Ready.feature_layers,
# Start's and Commit's features); 8: Hello.feature_dtype (the dtype every Start's and Commit's features then keep)
FEATURE_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}  # the dtypes a target's features travel in
# A feature is a hidden state that the target's own RMS norm squared in float32, so its magnitude is below 2^64
# (float32's largest square root), and it is finite. Per dtype: the unsigned view of its bits, the mask of its
# magnitude (all but the sign) and the bits of the first magnitude refused (2^64; float16's infinity).
FEATURE_BITS = {"float32": (np.uint32, 0x7FFFFFFF, 0x5F800000), "bfloat16": (np.uint16, 0x7FFF, 0x5F80),
                "float16": (np.uint16, 0x7FFF, 0x7C00)}
FEATURE_CHUNK = 1 << 22  # values checked at once: the check's temporaries stay a few MiB at any frame size


class Kind(IntEnum):
    HELLO = 1
    READY = 2
    START = 3
    COMMIT = 4
    POOL = 5
    END = 6
    ERROR = 7
    SHUTDOWN = 8
    AHEAD = 9
    WAITING = 10


def array(dtype: str, limit: int = MAX_ARRAY_LENGTH, empty: bool = False):
    """A 1-D array field of the given numpy dtype, of at most `limit` entries; `empty`: empty by default."""
    meta = {"dtype": np.dtype(dtype), "limit": limit}
    if empty:
        return field(default_factory=lambda: np.zeros(0, dtype), metadata=meta)
    return field(metadata=meta)


def array_limit(cls: type[Message], name: str) -> int:
    """The most entries array field `name` of `cls` may hold."""
    return next(f.metadata["limit"] for f in fields(cls) if f.name == name)


def check_features(features: np.ndarray, dtype: str, width: int, rows: int) -> None:
    """A Start's or Commit's features: none (dtype "" and width 0), or `rows` rows of `width` values of `dtype`
    as raw bytes (the target's model dtype; bfloat16 has no numpy type)."""
    if not dtype and not width and features.shape[0] == 0:
        return
    if dtype not in FEATURE_ITEMSIZE:
        raise MalformedMessage(f"`feature_dtype` must be one of {', '.join(FEATURE_ITEMSIZE)}, got {dtype!r}")
    if not 0 < width <= MAX_FEATURE_WIDTH:
        raise MalformedMessage(f"`feature_width` must be 1 to {MAX_FEATURE_WIDTH}, got {width!r}")
    if features.shape[0] != rows * width * FEATURE_ITEMSIZE[dtype]:
        raise BadArray(f"`features` holds {features.shape[0]} bytes; {rows} rows of {width} {dtype} values take "
                       f"{rows * width * FEATURE_ITEMSIZE[dtype]}")
    if (at := first_unbounded(features, dtype)) >= 0:
        raise BadFeatures(f"`features` row {at // width} holds {feature_value(features, dtype, at):.4g}: a target's "
                          f"features are finite and below 2^64 in magnitude (an RMS norm squares them in float32)")


def first_unbounded(features: np.ndarray, dtype: str) -> int:
    """(bytes,) raw features of `dtype` -> the index of the first value that is not finite or is 2^64 or more in
    magnitude; -1 when none is."""
    kind, magnitude, limit = FEATURE_BITS[dtype]
    bits = features.view(kind)
    for at in range(0, bits.shape[0], FEATURE_CHUNK):
        if len(bad := np.flatnonzero((bits[at: at + FEATURE_CHUNK] & magnitude) >= limit)):
            return at + int(bad[0])
    return -1


def feature_value(features: np.ndarray, dtype: str, at: int) -> float:
    """Value `at` of raw features of `dtype` (bfloat16 is float32's upper half)."""
    if dtype == "bfloat16":
        return float((np.array([features.view(np.uint16)[at]], np.uint32) << 16).view(np.float32)[0])
    return float(features.view(np.dtype(dtype))[at])


class Message:
    KIND: ClassVar[Kind]

    def check(self) -> None:
        """Cross-field invariants; raises a ProtocolError naming the problem."""


@dataclass(frozen=True, slots=True, eq=False)
class Hello(Message):
    """target -> drafter: who I am and what pools to grow."""

    KIND: ClassVar[Kind] = Kind.HELLO
    version: int
    vocab_size: int
    fingerprint: str
    model: str
    topk: int
    depth: int
    expand: int
    capacity: int
    hidden_size: int = 0  # the target's, with its layer count: what an EAGLE-3 drafter checks its head against
    layers: int = 0  # (0: a target without layers, the mock)
    feature_dtype: str = ""  # the target model's: what its features travel in, if a drafter takes them

    def check(self) -> None:
        """Upper bounds only, before the drafter sizes anything by these values; the drafter checks the pool
        configuration itself, and what its machine can hold."""
        if self.depth > MAX_POOL_DEPTH:
            raise LimitExceeded(f"`depth` {self.depth} is beyond the protocol's {MAX_POOL_DEPTH} pool levels")
        if self.topk > 0 and self.depth > 0 and self.expand > 0:  # exact in Python ints: no overflow
            size = pool_size(self.topk, self.depth, self.expand)
            if size > MAX_POOL_CANDIDATES:
                raise LimitExceeded(f"a pool of `topk` {self.topk}, `depth` {self.depth} and `expand` {self.expand} "
                                    f"holds {size} candidates; the protocol carries at most {MAX_POOL_CANDIDATES}")
        if self.capacity > MAX_CONTEXT:
            raise LimitExceeded(f"`capacity` {self.capacity} is beyond the protocol's {MAX_CONTEXT} KV slots")


@dataclass(frozen=True, slots=True, eq=False)
class Ready(Message):
    """drafter -> target: handshake accepted; the drafter's model (what records name it by) and tokenizer."""

    KIND: ClassVar[Kind] = Kind.READY
    version: int
    vocab_size: int
    fingerprint: str
    model: str
    revision: str = ""
    dtype: str = ""
    device: str = ""
    linear_kernels: str = ""  # the CPU linear kernels the drafter chose at load, as JSON (models.cpu_linear.tune)
    feature_layers: str = ""  # an EAGLE-3 drafter: the target layers whose inputs it takes, comma-separated

    def check(self) -> None:
        self.kernels()
        self.layers()

    def layers(self) -> tuple[int, ...]:
        """`feature_layers` read: () for a drafter that takes no features."""
        if not self.feature_layers:
            return ()
        parts = self.feature_layers.split(",")
        if len(parts) > 8 or not all(p.isdigit() and len(p) <= 6 for p in parts):
            raise MalformedMessage(f"Ready.feature_layers must list up to 8 layer numbers, got "
                                   f"{self.feature_layers[:80]!r}")
        return tuple(int(p) for p in parts)

    def kernels(self) -> dict[str, list[str]]:
        """`linear_kernels` read: {"OUTxIN": [kernel per row class]} ({} when empty)."""
        if not self.linear_kernels:
            return {}
        try:
            got = json.loads(self.linear_kernels)
        except (ValueError, RecursionError) as e:
            raise MalformedMessage(f"Ready.linear_kernels is not JSON ({type(e).__name__})") from None
        if not (isinstance(got, dict) and all(isinstance(v, list) and all(isinstance(k, str) for k in v)
                                              for v in got.values())):
            raise MalformedMessage("Ready.linear_kernels must map weight shapes to lists of kernel names")
        return got


@dataclass(frozen=True, slots=True, eq=False)
class Start(Message):
    """target -> drafter: a new request; grow the first pool from `prompt` (the context, or its last tokens
    with a drafting window), read as a prompt of its own."""

    KIND: ClassVar[Kind] = Kind.START
    request: int
    prompt: np.ndarray = array("int32")
    features: np.ndarray = array("uint8", MAX_FEATURE_BYTES, empty=True)  # for an EAGLE-3 drafter: the prompt's
    feature_dtype: str = ""  # tokens but the last, rows of feature_width values in this dtype (check_features)
    feature_width: int = 0

    def check(self) -> None:
        if self.prompt.shape[0] == 0:
            raise BadArray("`prompt` is empty")
        check_features(self.features, self.feature_dtype, self.feature_width, self.prompt.shape[0] - 1)


@dataclass(frozen=True, slots=True, eq=False)
class Commit(Message):
    """target -> drafter: the tokens round `round - 1` emitted; grow round `round`'s pool."""

    KIND: ClassVar[Kind] = Kind.COMMIT
    request: int
    round: int
    tokens: np.ndarray = array("int32")
    features: np.ndarray = array("uint8", MAX_FEATURE_BYTES, empty=True)  # for an EAGLE-3 drafter: those of
    feature_dtype: str = ""  # the token before each of `tokens` (check_features)
    feature_width: int = 0

    def check(self) -> None:
        if self.tokens.shape[0] == 0:
            raise BadArray("`tokens` is empty")
        check_features(self.features, self.feature_dtype, self.feature_width, self.tokens.shape[0])


@dataclass(frozen=True, slots=True, eq=False)
class Ahead(Message):
    """target -> drafter, no reply: round `round - 1` will most probably accept `tokens` (pipeline.ahead);
    while the target verifies, grow round `round`'s pool from there and the drafter's own most probable
    next token. The Commit of round `round` follows."""

    KIND: ClassVar[Kind] = Kind.AHEAD
    request: int
    round: int
    tokens: np.ndarray = array("int32")

    def check(self) -> None:
        if not 0 < self.tokens.shape[0] <= MAX_POOL_DEPTH:
            raise BadArray(f"`tokens` holds {self.tokens.shape[0]} tokens; a round accepts 1 to "
                           f"{MAX_POOL_DEPTH} tree tokens")


@dataclass(frozen=True, slots=True, eq=False)
class Waiting(Message):
    """target -> drafter, no reply: the target waits for round `round`'s pool with nothing else to do; a drafter on the
    target's CPU may take its cores too until it sends that pool. With `cut` 1 the target asks for the pool now, and
    takes it with the levels grown (a cut pool): the drafter ends it after the level in progress; with `cut` 2, it grows
    a further level while that brings more than its wait costs (pipeline.cut). `after` is how long after sending the
    round's Start or Commit the target asked (seconds), which a drafter times the next rounds' pools by."""

    KIND: ClassVar[Kind] = Kind.WAITING
    request: int
    round: int
    cut: int = 0
    after: float = 0.0

    def check(self) -> None:
        if self.cut not in (0, NOW, WEIGH):
            raise MalformedMessage(f"`cut` must be 0, {NOW} or {WEIGH}, got {self.cut!r}")
        if not (math.isfinite(self.after) and self.after >= 0):
            raise MalformedMessage(f"`after` must be a finite number >= 0, got {self.after!r}")


@dataclass(frozen=True, slots=True, eq=False)
class PoolMsg(Message):
    """drafter -> target: the candidate pool of one round, as edges (see pipeline.pool.Pool)."""

    KIND: ClassVar[Kind] = Kind.POOL
    request: int
    round: int
    seconds: float  # the drafter's time on this pool once the round's Commit reached it
    ahead: int  # pipeline.ahead: NOT_TRIED (-1), MISSED (0) or HIT (1), the pool grown ahead
    ahead_seconds: float  # on a hit, the drafting done before the Commit reached the drafter
    token: np.ndarray = array("int32")
    parent: np.ndarray = array("int32")
    logp: np.ndarray = array("float32")
    expanded: np.ndarray = array("bool")

    def check(self) -> None:
        for name in ("seconds", "ahead_seconds"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise MalformedMessage(f"`{name}` must be a finite number >= 0, got {getattr(self, name)!r}")
        if self.ahead not in (-1, 0, 1):
            raise MalformedMessage(f"`ahead` must be -1, 0 or 1, got {self.ahead!r}")
        n = self.token.shape[0]
        if n > MAX_POOL_CANDIDATES:
            raise LimitExceeded(f"a pool of {n} candidates; the protocol carries at most {MAX_POOL_CANDIDATES}")
        for name in ("parent", "logp", "expanded"):
            if getattr(self, name).shape[0] != n:
                raise BadArray(f"`{name}` has {getattr(self, name).shape[0]} entries, `token` has {n}")


@dataclass(frozen=True, slots=True, eq=False)
class End(Message):
    """target -> drafter: the request is over; drop its state."""

    KIND: ClassVar[Kind] = Kind.END
    request: int


@dataclass(frozen=True, slots=True, eq=False)
class Error(Message):
    """either way: the last message was refused (`code` as in protocol.errors) or the peer failed."""

    KIND: ClassVar[Kind] = Kind.ERROR
    code: str
    message: str
    request: int = -1


@dataclass(frozen=True, slots=True, eq=False)
class Shutdown(Message):
    """target -> drafter: exit cleanly."""

    KIND: ClassVar[Kind] = Kind.SHUTDOWN


MESSAGES: dict[Kind, type[Message]] = {cls.KIND: cls for cls in
                                       (Hello, Ready, Start, Commit, Ahead, Waiting, PoolMsg, End, Error,
                                        Shutdown)}


def layout(cls: type[Message]) -> tuple[list[tuple[str, type]], list[tuple[str, np.dtype]]]:
    """(scalar fields with their types, array fields with their dtypes), in declaration order."""
    scalars, arrays = [], []
    for f in fields(cls):
        if "dtype" in f.metadata:
            arrays.append((f.name, f.metadata["dtype"]))
        else:
            scalars.append((f.name, {"int": int, "float": float, "str": str}[f.type]))
    return scalars, arrays
