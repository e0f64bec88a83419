"""python -m programs.drafter_program: bind the endpoint, load the drafter model, serve pools until Shutdown.

It binds before it loads, so that a target connecting meanwhile finds something that answers; an EAGLE-3
head's directory is checked before it binds. Every tcp endpoint (and ipc with --curve) speaks CURVE only,
loopback tcp in clear with --clear alone (docs/security.md). A Hello may ask for a KV cache of at most
--max-request-context slots. `launch/pair.sh drafter` runs it with --persist, serving target after target."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from models.options import TARGET_ONLY, ModelOptions
from pipeline.config import ConfigError, InputError
from programs.cli import (EXIT_USAGE, Parser, add_endpoint, add_log_level, add_options, endpoint_option, flags_of,
                          from_options, raise_open_file_limit, run_program, setup_logging, uninterrupted)
from programs.options import KeyOptions, ServeOptions
from protocol import wakeup

log = logging.getLogger("drafter")


def build_parser(prog: str = "python -m programs.drafter_program") -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="The drafter process: grows a candidate pool each round.")
    add_options(parser, ModelOptions, skip=TARGET_ONLY)
    add_endpoint(parser, "ipc://PATH or tcp://HOST:PORT to bind (tcp://0.0.0.0:PORT: every interface)")
    add_options(parser, KeyOptions)
    add_options(parser, ServeOptions)
    add_log_level(parser)
    return parser


def server_keys(endpoint: str, options: KeyOptions, clear: bool = False):
    """CURVE keys for a tcp endpoint (or with `curve`), else None: in clear on ipc, and on loopback tcp with
    `clear`. ConfigError for `clear` where it cannot apply."""
    from protocol.keys import key_dir, own_keys, trusted_keys
    from protocol.transport import ServerKeys, is_loopback

    if clear and (options.curve or not endpoint.startswith("tcp://") or not is_loopback(endpoint)):
        raise ConfigError("clear", "applies to a loopback tcp endpoint without --curve only (tcp beyond this "
                          f"machine is always encrypted), got {endpoint}")
    if clear:
        log.warning("serving %s in clear (--clear): any process of this host can connect, take the drafter and "
                    "read what it serves", endpoint)
        return None
    if not options.curve and endpoint.startswith("ipc://"):
        return None
    directory = key_dir(options.key_dir)
    own = own_keys(directory)
    trusted_keys(directory)  # a malformed authorized key stops the drafter here, not at a connection

    def trust(key: bytes) -> bool:  # read again at each connection: keys authorized later take effect
        try:
            return key in trusted_keys(directory)
        except InputError as e:
            log.error("%s", e)
            return False

    return ServerKeys(own, trust)


def describe_keys(keys, options: KeyOptions) -> str:
    if keys is None:
        return "in clear, on this machine only"
    from protocol.keys import AUTHORIZED, key_dir

    folder = Path(key_dir(options.key_dir)) / AUTHORIZED
    count = len(list(folder.glob("*.key"))) if folder.is_dir() else 0
    return (f"CURVE: public key '{keys.own.public.decode()}' (targets name it with --drafter-key); accepting this "
            f"host's own key and {count} in {folder}")


def main(argv: list[str] | None = None, prog: str = "python -m programs.drafter_program") -> int:
    parser = build_parser(prog)
    ns = parser.parse_args(argv)
    options = from_options(parser, ns, ModelOptions, skip=TARGET_ONLY)
    key_options = from_options(parser, ns, KeyOptions)
    serve = from_options(parser, ns, ServeOptions)
    endpoint = endpoint_option(parser, ns.endpoint)
    setup_logging("drafter", ns.log_level)

    def body() -> int:
        raise_open_file_limit()  # a descriptor per connection, handshaking ones included
        keys = server_keys(endpoint, key_options, serve.clear)  # before the model loads: a key problem stops here
        from models.eagle3_load import read_head_dir

        head = read_head_dir(options.model)  # a damaged head directory stops here too, before anything is bound
        from models.kv_plan import feature_row_bytes
        from protocol.limits import request_frame_bytes
        from protocol.transport import Listener

        try:  # before the model loads too: a target that connects meanwhile is answered, and waits for Ready
            frame = request_frame_bytes(serve.max_request_context, feature_row_bytes(options))  # features: a head's
            listener = Listener.bind(endpoint, keys, frame)
        except OSError as e:
            log.error("%s", e.strerror or e)
            return EXIT_USAGE
        try:
            import torch

            from drafter_proc.server import DrafterServer
            from models.load import load

            torch.set_num_threads(options.threads)
            loaded = load(options, "drafter", head)
            log.info("loaded %s on %s; serving on %s (%s)", options.model, options.device, endpoint,
                     describe_keys(keys, key_options))
            threads = options.cpu_threads if options.device == "cpu" else None  # on a GPU threads do not matter
            DrafterServer(listener, loaded, persist=serve.persist, exit_with_target=serve.exit_with_target,
                          max_request_context=serve.max_request_context, threads=threads,
                          idle_timeout=serve.idle_timeout).serve()
        finally:
            with uninterrupted(signal.SIGTERM, signal.SIGINT):
                listener.close()
        return 0

    # A stop request closes the socket (an ipc file is removed) and, dropped by a finalizer, is raised again at
    # the next wait; one that lands once the body has returned ends the process at once (wakeup.ending).
    wakeup.install_stop(signal.SIGTERM, signal.SIGINT)
    return run_program(body, flags_of(parser))


if __name__ == "__main__":
    sys.exit(main())
