"""python -m drafter_proc: load the drafter model, bind the endpoint, serve pools until Shutdown."""

from __future__ import annotations

import argparse
import logging
import sys

from models.load import ModelNotFound, load
from models.options import ModelOptions
from pipeline.cli import add_options, from_options
from protocol.transport import Channel, check_endpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drafter_proc",
                                     description="The drafter process: grows a candidate pool each round.")
    add_options(parser, ModelOptions)
    parser.add_argument("--endpoint", required=True, help="ipc://PATH or tcp://HOST:PORT to bind")
    ns = parser.parse_args(argv)
    options = from_options(parser, ns, ModelOptions)
    try:
        endpoint = check_endpoint(ns.endpoint)
    except ValueError as e:
        parser.error(str(e))
    logging.basicConfig(level=logging.INFO, format="[drafter] %(message)s", stream=sys.stderr)
    log = logging.getLogger("drafter")
    try:
        loaded = load(options, "drafter")
    except (ModelNotFound, ValueError) as e:
        log.error("cannot load drafter model: %s", e)
        return 2
    try:
        channel = Channel.bind(endpoint, peer="target")
    except OSError as e:
        log.error("%s", e)
        return 2
    from drafter_proc.server import DrafterServer

    log.info("loaded %s on %s; serving on %s", options.model, options.device, endpoint)
    try:
        DrafterServer(channel, loaded).serve()
    except KeyboardInterrupt:
        return 130
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
