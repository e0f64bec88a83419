"""What the wire may carry: every size a peer controls is bounded here, and checked before anything is
allocated for it.

Both sockets refuse a frame over MAX_FRAME_BYTES at the transport (the peer is disconnected before the
frame is read; a drafter refuses one over request_frame_bytes of the KV slots it grants at most), the codec
refuses headers over MAX_HEADER_BYTES or nested deeper than MAX_NESTING, and the messages refuse handshake
values beyond the pool and context limits below."""

from __future__ import annotations

# The largest pool (levels, candidates) and context (KV cache slots a target may have and a Hello may ask the
# drafter for): the settings (pipeline.config) refuse more when they are made, before any process starts.
from pipeline.config import MAX_CONTEXT, MAX_POOL_CANDIDATES, MAX_POOL_DEPTH  # noqa: F401

MAX_HEADER_BYTES = 1 << 16  # the msgpack header of any message
MAX_NESTING = 4  # header map > field map or array specs > one spec > its shape list
MAX_ARRAY_LENGTH = MAX_CONTEXT  # entries of one array: a prompt (at most a context's), a commit or a pool
MAX_FRAME_BYTES = MAX_ARRAY_LENGTH * 4  # the widest array dtype (int32, float32) takes 4 bytes an entry
REQUEST_CONTEXT = 1 << 14  # KV cache slots a drafter grants a Hello unless told more (--max-request-context)
IDLE_TIMEOUT_S = 600.0  # a served target's silence after which a drafter serves the next one (--idle-timeout)
MAX_TEXT = 1000  # characters of peer-provided text (an Error's message, a model name) that reach a log
# An EAGLE-3 drafter's features (protocol.messages.Features): one frame of a Start or Commit, raw bytes. A token's
# row is three layer inputs (24 KiB at Llama-3.1-8B's 4,096 bfloat16 values each); a Start carries its prompt's.
MAX_FEATURE_WIDTH = 3 * 16384  # values of one token's row: three layers of a hidden size up to 16,384
MAX_FEATURE_BYTES = 1 << 29  # one frame: 21,845 tokens of Llama-3.1-8B's rows, 5,461 of float32 at 8,192 wide


def request_frame_bytes(context: int, feature_row_bytes: int = 0) -> int:
    """The largest frame a drafter that grants at most `context` KV slots is sent: a header, or an int32 array
    of at most that many tokens (a prompt, a commit), or for an EAGLE-3 drafter the features of that many
    tokens of `feature_row_bytes` each (at most MAX_FEATURE_BYTES). Its transport refuses any longer, a peer's
    routing id too, which libzmq keeps for as long as the peer stays connected."""
    return max(MAX_HEADER_BYTES, 4 * context, min(context * feature_row_bytes, MAX_FEATURE_BYTES))
