"""The one codec: a msgpack header frame, then one raw frame per array field. No pickle anywhere.

Header: {"k": kind, "f": {scalar field: value}, "a": [[dtype, [length]], ...]} with arrays in the
declaration order of the message class. Decoding checks every part and raises a typed ProtocolError that
names the problem; it never evaluates anything it receives, and never recurses into it: the header's
nesting is measured without recursion before anything looks inside, and error messages show received
values one level deep and cut short (protocol.limits bounds every size)."""

from __future__ import annotations

from functools import cache

import msgpack
import numpy as np

from protocol.errors import BadArray, MalformedMessage, UnexpectedMessage, UnknownMessage, VersionMismatch
from protocol.limits import MAX_ARRAY_LENGTH, MAX_HEADER_BYTES, MAX_NESTING
from protocol.messages import MESSAGES, PROTOCOL_VERSION, Hello, Kind, Message, Ready, array_limit, layout

MAX_FRAMES = 1 + max(len(layout(cls)[1]) for cls in MESSAGES.values())  # the header and the arrays
# msgpack's own bounds, so that no length it reads can make it allocate more than a header holds
_UNPACK_LIMITS = dict(max_str_len=MAX_HEADER_BYTES, max_bin_len=MAX_HEADER_BYTES, max_array_len=MAX_HEADER_BYTES,
                      max_map_len=MAX_HEADER_BYTES, max_ext_len=MAX_HEADER_BYTES)


def encode(msg: Message) -> list[bytes]:
    scalars, arrays = _layout(type(msg))
    header = {"k": int(msg.KIND), "f": {name: getattr(msg, name) for name, _ in scalars}, "a": []}
    frames = []
    for name, dtype in arrays:
        arr = np.ascontiguousarray(getattr(msg, name), dtype=dtype)
        header["a"].append([dtype.str, [int(arr.shape[0])]])
        frames.append(arr.tobytes())
    return [msgpack.packb(header, use_bin_type=True), *frames]


def decode(frames: list[bytes], expect: tuple[type[Message], ...] | None = None) -> Message:
    """Frames -> a validated message of one of the `expect` types (any type when None)."""
    if not frames:
        raise MalformedMessage("empty message: no header frame")
    if len(frames[0]) > MAX_HEADER_BYTES:
        raise MalformedMessage(f"header frame of {len(frames[0])} bytes exceeds {MAX_HEADER_BYTES}")
    if len(frames) > MAX_FRAMES:
        raise BadArray(f"a message has at most {MAX_FRAMES} frames, got {len(frames)}")
    try:
        header = msgpack.unpackb(frames[0], raw=False, strict_map_key=True, **_UNPACK_LIMITS)
    except Exception as e:  # msgpack raises several unrelated types for corrupt input
        raise MalformedMessage(f"header is not valid msgpack ({type(e).__name__}: {_cut(str(e))})") from None
    if (depth := nesting(header)) > MAX_NESTING:
        raise MalformedMessage(f"header nests {depth} levels deep; a message header nests at most {MAX_NESTING}")
    if not isinstance(header, dict) or set(header) != {"k", "f", "a"}:
        raise MalformedMessage(f"header must be a map with keys k, f, a; got {_short(header)}")
    kind, values, specs = header["k"], header["f"], header["a"]
    if not isinstance(kind, int) or isinstance(kind, bool) or kind not in MESSAGES.keys():
        raise UnknownMessage(f"unknown message kind {_short(kind)}")
    cls = MESSAGES[Kind(kind)]
    if expect is not None and cls not in expect:
        raise UnexpectedMessage(f"got {cls.__name__} where {' or '.join(c.__name__ for c in expect)} "
                                f"was expected")
    _check_version(cls, values)
    scalars, arrays = _layout(cls)
    if not isinstance(values, dict) or set(values) != {name for name, _ in scalars}:
        # key=str: a map may mix str and bytes keys, which do not compare with each other
        got = _cut(repr(sorted(values, key=str)), 240) if isinstance(values, dict) else _short(values)
        raise MalformedMessage(f"{cls.__name__} needs fields {sorted(n for n, _ in scalars)}, got {got}")
    kwargs = {}
    for name, typ in scalars:
        kwargs[name] = _scalar(cls.__name__, name, typ, values[name])
    if not isinstance(specs, list) or len(specs) != len(arrays) or len(frames) != 1 + len(arrays):
        raise BadArray(f"{cls.__name__} carries {len(arrays)} arrays; got {len(frames) - 1} frames and "
                       f"{len(specs) if isinstance(specs, list) else 'no'} array specs")
    for (name, dtype), spec, frame in zip(arrays, specs, frames[1:]):
        kwargs[name] = _array(cls.__name__, name, dtype, spec, frame, array_limit(cls, name))
    msg = cls(**kwargs)
    msg.check()
    return msg


def _check_version(cls: type[Message], values) -> None:
    """A Hello or Ready of another protocol version is refused as that (VersionMismatch), before its fields,
    which differ from version to version, are read."""
    if cls in (Hello, Ready) and isinstance(values, dict):
        version = values.get("version")
        if type(version) is int and version != PROTOCOL_VERSION:
            sender, reader = ("target", "drafter") if cls is Hello else ("drafter", "target")
            raise VersionMismatch(f"{sender} speaks protocol {version}, {reader} {PROTOCOL_VERSION}")


@cache
def _layout(cls):
    return layout(cls)


def _scalar(owner: str, name: str, typ: type, value):
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not typ:
        raise MalformedMessage(f"{owner}.{name} must be {typ.__name__}, got {type(value).__name__}")
    return value


def _array(owner: str, name: str, dtype: np.dtype, spec, frame: bytes, limit: int = MAX_ARRAY_LENGTH) -> np.ndarray:
    if not (isinstance(spec, list) and len(spec) == 2 and isinstance(spec[0], str) and isinstance(spec[1], list)):
        raise BadArray(f"{owner}.{name}: array spec must be [dtype, shape], got {_short(spec)}")
    if spec[0] != dtype.str:
        raise BadArray(f"{owner}.{name} must have dtype {dtype.name} ({dtype.str}), got {_short(spec[0])}")
    shape = spec[1]
    if len(shape) != 1 or not isinstance(shape[0], int) or not 0 <= shape[0] <= limit:
        raise BadArray(f"{owner}.{name} must be 1-D with at most {limit} entries, "
                       f"got shape {_short(shape)}")
    if len(frame) != shape[0] * dtype.itemsize:
        raise BadArray(f"{owner}.{name}: {len(frame)} bytes for {shape[0]} x {dtype.name}")
    arr = np.frombuffer(frame, dtype=dtype).copy()
    if dtype == np.bool_ and np.any(arr.view(np.uint8) > 1):
        raise BadArray(f"{owner}.{name}: booleans must be bytes 0 or 1")
    return arr


def nesting(value) -> int:
    """How deep containers nest in a decoded header (a scalar is 0, [] is 1), measured without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item)
    return deepest


def _short(value) -> str:
    """A received value for an error message: one level deep (nested containers shown as [...] and {...}),
    at most 80 characters. Never recurses, so no header, however nested, can make it fail."""
    if isinstance(value, dict):
        text = "{" + ", ".join(f"{_flat(k)}: {_flat(v)}" for k, v in list(value.items())[:8]) + "}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_flat(v) for v in value[:8]) + "]"
    else:
        text = _flat(value)
    return _cut(text)


def _flat(value) -> str:
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, (list, tuple)):
        return "[...]"
    if isinstance(value, (str, bytes)):
        return repr(value[:80])
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    return f"<{type(value).__name__}>"  # msgpack's ExtType or Timestamp


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
