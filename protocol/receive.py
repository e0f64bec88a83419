"""Receiving one message frame by frame: at most `limit` frames are kept, the rest are discarded unread.

`recv_multipart` would hold every frame as a Python object before the count could be checked (4,000,000 empty
frames took over a gigabyte); here frames beyond the protocol's maximum go into one reused buffer. libzmq still
holds a whole message (about 64 bytes a frame), so after a long one the freed memory is handed back (malloc_trim)."""

from __future__ import annotations

import ctypes
import errno
from dataclasses import dataclass

import zmq

TRIM_AFTER = 100_000  # discarded frames after which freed memory is handed back to the system


@dataclass(frozen=True, slots=True)
class Frames:
    """The kept frames of one message, the first as a zmq.Frame (for its connection's properties) and the
    number of frames the message had in all."""

    first: zmq.Frame
    rest: list[bytes]
    count: int

    @property
    def excess(self) -> bool:
        return self.count > 1 + len(self.rest)


def recv_frames(sock: zmq.Socket, limit: int) -> Frames:
    """One whole message from `sock` (POLLIN must be set): its first frame, then at most `limit` - 1 more as
    bytes; every frame beyond is received and discarded, so that the next call starts a new message."""
    first = sock.recv(copy=False)
    rest: list[bytes] = []
    more = first.more
    while more and len(rest) < limit - 1:
        frame = sock.recv(copy=False)
        rest.append(frame.bytes)
        more = frame.more
    count = 1 + len(rest)
    if more:
        count += _discard_rest(sock)
    return Frames(first, rest, count)


def _discard_rest(sock: zmq.Socket) -> int:
    """Receive and drop the remaining frames of the message being read -> how many there were."""
    count = _discard_native(sock) if _LIBZMQ is not None else _discard_python(sock)
    if count >= TRIM_AFTER:
        hand_back_memory()  # libzmq's queue of small frames is freed piecemeal; glibc keeps it unless asked
    return count


def hand_back_memory() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim; nothing elsewhere)."""
    if _TRIM is not None:
        _TRIM(0)


def _discard_python(sock: zmq.Socket) -> int:
    scratch = bytearray(64)
    count = 0
    while True:
        sock.recv_into(scratch)  # truncates: nothing is allocated per frame
        count += 1
        if not sock.get(zmq.RCVMORE):
            return count


def _discard_native(sock: zmq.Socket) -> int:
    """As _discard_python, through libzmq's own zmq_msg_recv on one reused message: about twice as fast,
    which matters for millions of empty frames."""
    msg = ctypes.create_string_buffer(64)  # a zmq_msg_t is 64 bytes
    _LIBZMQ.zmq_msg_init(msg)
    handle = ctypes.c_void_p(sock.underlying)
    recv, more = _LIBZMQ.zmq_msg_recv, _LIBZMQ.zmq_msg_more
    count = 0
    try:
        while True:
            if recv(msg, handle, 0) < 0:
                if (code := ctypes.get_errno()) == errno.EINTR:  # the rest of the message is still there
                    continue
                raise zmq.ZMQError(code)
            count += 1
            if not more(msg):
                return count
    finally:
        _LIBZMQ.zmq_msg_close(msg)


def _load_libzmq():
    """The libzmq pyzmq runs on, through its extension module, or None where it cannot be reached."""
    try:
        from zmq.backend.cython import _zmq

        lib = ctypes.CDLL(_zmq.__file__, use_errno=True)
        pointer = ctypes.c_void_p
        for name, argtypes in (("zmq_msg_init", [pointer]), ("zmq_msg_recv", [pointer, pointer, ctypes.c_int]),
                               ("zmq_msg_more", [pointer]), ("zmq_msg_close", [pointer])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ctypes.c_int, argtypes
        return lib
    except (ImportError, OSError, AttributeError):
        return None


def _load_trim():
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.restype, trim.argtypes = ctypes.c_int, [ctypes.c_size_t]
    return trim


_LIBZMQ = _load_libzmq()
_TRIM = _load_trim()
