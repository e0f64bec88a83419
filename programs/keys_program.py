"""python -m programs.keys_program (launch/pair.sh keys): this host's CURVE keys, and the targets its drafter accepts.

Prints the public key (made, with its secret half, on first use) for the peers that need it: a target
names a drafter's key with --drafter-key; a drafter accepts the keys in its key directory's authorized/
folder, which --allow adds to. The secret key never leaves its file."""

from __future__ import annotations

import argparse
import sys

from programs.cli import Parser, add_options, args_of, flags_of, from_options, run_program, setup_logging
from programs.options import AuthorizeOptions, KeyOptions
from protocol.keys import AUTHORIZED, PUBLIC, SECRET, authorize, key_dir, own_keys


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Print this host's CURVE public key (made on first "
                                     "use) and authorize targets' keys for its drafter.")
    add_options(parser, KeyOptions, skip=("curve",))
    add_options(parser, AuthorizeOptions)
    return parser


def main(argv: list[str] | None = None, prog: str = "python -m programs.keys_program") -> int:
    parser = build_parser(prog)
    ns = parser.parse_args(args_of(parser, argv))
    options = from_options(parser, ns, KeyOptions, skip=("curve",))
    allow = from_options(parser, ns, AuthorizeOptions)
    setup_logging("keys")

    def body() -> int:
        directory = key_dir(options.key_dir)
        own = own_keys(directory)
        for key in allow.allow:
            print(f"authorized {authorize(directory, key)}")
        folder = directory / AUTHORIZED
        accepted = sorted(folder.glob("*.key")) if folder.is_dir() else []
        print(f"public key: {own.public.decode()}")
        print(f"  in {directory / PUBLIC}; the secret half is {directory / SECRET} (mode 0600: never share it)")
        print(f"  a target names this drafter with: --drafter-key '{own.public.decode()}' (quoted: Z85 has shell "
              f"characters), or with a copy of {PUBLIC}")
        print(f"  a drafter here accepts this key and {len(accepted)} more in {folder}")
        return 0

    return run_program(body, flags_of(parser))


if __name__ == "__main__":
    sys.exit(main())
