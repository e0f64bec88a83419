"""python -m launch.drafter: load the drafter model, bind the endpoint, serve pools until Shutdown."""

from __future__ import annotations

import argparse
import logging
import sys

from launch.cli import (EXIT_USAGE, add_endpoint, add_log_level, add_options, endpoint_option, flags_of,
                        from_options, run_program, setup_logging)
from models.options import ModelOptions


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m launch.drafter",
                                     description="The drafter process: grows a candidate pool each round.")
    add_options(parser, ModelOptions)
    add_endpoint(parser, "ipc://PATH or tcp://HOST:PORT to bind")
    add_log_level(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    options = from_options(parser, ns, ModelOptions)
    endpoint = endpoint_option(parser, ns.endpoint)
    setup_logging("drafter", ns.log_level)
    log = logging.getLogger("drafter")

    def body() -> int:
        import torch

        from drafter_proc.server import DrafterServer
        from models.load import load
        from protocol.transport import Channel

        torch.set_num_threads(options.threads)
        loaded = load(options, "drafter")
        try:
            channel = Channel.bind(endpoint, peer="target")
        except OSError as e:
            log.error("%s", e)
            return EXIT_USAGE
        log.info("loaded %s on %s; serving on %s", options.model, options.device, endpoint)
        try:
            DrafterServer(channel, loaded).serve()
        finally:
            channel.close()
        return 0

    return run_program(body, flags_of(parser))


if __name__ == "__main__":
    sys.exit(main())
