"""The command line every target-side program shares: model, endpoint, pool and run options, exit codes.

`python -m target_proc` (decodes) and `python -m timing sweep` (timing sweeps) differ only in their run
options and in what they do with a session.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from models.load import ModelNotFound
from models.options import ModelOptions
from pipeline.cli import add_options, from_options
from pipeline.config import PoolConfig
from protocol.errors import PeerDied, PeerTimeout, ProtocolError
from protocol.transport import check_endpoint

# Exit codes: 2 for what the user can fix in the command or its files, 3 for the peer or the wire.
EXIT_USAGE, EXIT_PEER, EXIT_INTERRUPTED = 2, 3, 130


@dataclass(frozen=True, slots=True)
class TargetArgs:
    model: ModelOptions
    pool: PoolConfig
    run: object  # the program's run options dataclass
    endpoint: str
    namespace: argparse.Namespace  # for the program's own extra arguments


def build_parser(prog: str, description: str, run_cls: type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_options(parser, ModelOptions)
    parser.add_argument("--endpoint", required=True, help="the drafter's ipc://PATH or tcp://HOST:PORT")
    add_options(parser, PoolConfig, prefix="pool-")
    add_options(parser, run_cls)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, run_cls: type) -> TargetArgs:
    """Parse and check; a bad value exits with a usage error naming its option."""
    ns = parser.parse_args(argv)
    model = from_options(parser, ns, ModelOptions)
    pool = from_options(parser, ns, PoolConfig, prefix="pool-")
    run = from_options(parser, ns, run_cls)
    try:
        endpoint = check_endpoint(ns.endpoint)
    except ValueError as e:
        parser.error(str(e))
    return TargetArgs(model, pool, run, endpoint, ns)


def run_reporting(body: Callable[[], int], log: logging.Logger, prefix: str) -> int:
    """Run a program's body with logs on stderr; errors become one log line and an exit code."""
    logging.basicConfig(level=logging.INFO, format=f"[{prefix}] %(message)s", stream=sys.stderr)
    try:
        return body()
    except (ModelNotFound, ValueError) as e:  # bad models, prompts, sizes or files
        log.error("%s", e)
        return EXIT_USAGE
    except (ProtocolError, PeerDied, PeerTimeout) as e:
        log.error("%s: %s", type(e).__name__, e)
        return EXIT_PEER
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
