"""The drafter's side of the handshake: which Hello it accepts, and the Ready that says what it is."""

from __future__ import annotations

import json

from models.eagle3_config import HeadError
from models.load import Loaded
from pipeline.config import PoolConfig
from protocol.errors import HandshakeMismatch, LimitExceeded, MalformedMessage, VersionMismatch, printable
from protocol.messages import PROTOCOL_VERSION, Hello, Ready


def check_hello(hello: Hello, loaded: Loaded, max_request_context: int) -> PoolConfig:
    """The pool configuration of a Hello this drafter accepts; the ProtocolError naming what it cannot."""
    if hello.version != PROTOCOL_VERSION:
        raise VersionMismatch(f"target speaks protocol {hello.version}, drafter {PROTOCOL_VERSION}")
    tok = loaded.tokenizer
    if hello.vocab_size != loaded.vocab_size or hello.fingerprint != tok.fingerprint:
        raise HandshakeMismatch(
            f"target {printable(repr(hello.model), 200)} (vocabulary {hello.vocab_size}, tokenizer "
            f"{printable(hello.fingerprint, 100)}) and drafter {loaded.name!r} (vocabulary "
            f"{loaded.vocab_size}, tokenizer {tok.fingerprint}) do not share a tokenizer")
    try:
        config = PoolConfig(hello.topk, hello.depth, hello.expand)
    except ValueError as e:
        raise MalformedMessage(f"Hello carries an invalid pool configuration: {e}") from None
    if config.topk > loaded.vocab_size:
        raise LimitExceeded(f"`topk` {config.topk} is beyond the drafter's vocabulary of {loaded.vocab_size}")
    if hello.capacity < 2:
        raise MalformedMessage(f"Hello.capacity must be at least 2, got {hello.capacity}")
    if hello.capacity > max_request_context:  # what any authorized peer may make this process take
        raise LimitExceeded(f"`capacity` {hello.capacity} is beyond this drafter's {max_request_context} KV "
                            f"slots (its --max-request-context): lower the target's --max-context, or start "
                            f"the drafter with a larger --max-request-context")
    return config


def feature_layers(hello: Hello, loaded: Loaded) -> tuple[int, ...]:
    """The target layers whose inputs an EAGLE-3 drafter takes, for the target a Hello describes; () for a
    standalone drafter. HandshakeMismatch, in one line, when the head does not fit that target."""
    if not loaded.is_head:
        return ()
    cfg = getattr(loaded.model, "cfg", None)
    if cfg is None:  # the mock head reads the mock target's digests, whatever its layers
        return (0,)
    if hello.layers < 1 or hello.hidden_size < 1:
        raise HandshakeMismatch(f"the drafter {loaded.name!r} is an EAGLE-3 head; target "
                                f"{printable(repr(hello.model), 200)} has no layers to take features from")
    try:
        cfg.check_target(hello.hidden_size, hello.vocab_size, hello.layers)
    except HeadError as e:
        raise HandshakeMismatch(f"the drafter {loaded.name!r} does not fit target {printable(repr(hello.model), 200)}"
                                f": {str(e).removeprefix('`drafter` ')}") from None
    return loaded.model.feature_layers(hello.layers)


def ready(loaded: Loaded, layers: tuple[int, ...] = ()) -> Ready:
    """The reply to an accepted Hello: the drafter's vocabulary, tokenizer, model and kernels, and for an EAGLE-3
    drafter the target layers whose inputs it takes."""
    who = loaded.identity
    kernels = json.dumps(who["linear_kernels"], sort_keys=True) if "linear_kernels" in who else ""
    return Ready(PROTOCOL_VERSION, loaded.vocab_size, loaded.tokenizer.fingerprint, loaded.name, who["revision"],
                 who["dtype"], who["device"], kernels, ",".join(map(str, layers)))
