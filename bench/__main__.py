"""python -m bench: every benchmark with the question it answers; python -m bench NAME [options] runs one."""

from __future__ import annotations

import sys
from importlib import import_module

from bench.common import summary

# Each a module bench.NAME whose docstring's first line asks its question; bench.common is what they share.
BENCHMARKS = ("pair", "forward", "protocol", "reach", "values")


def listing() -> str:
    lines = [f"  {name:<10}{summary(import_module(f'bench.{name}').__doc__)}" for name in BENCHMARKS]
    return ("usage: python -m bench {" + ",".join(BENCHMARKS) + "} [options]\n\n" + "\n".join(lines)
            + "\n\npython -m bench.NAME --help (or python -m bench NAME --help) shows a benchmark's options; the "
              "last line\nof every benchmark's output is one JSON document. A retired benchmark's results page names "
              "the\ncommand that made its figures and the commit it ran at.")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        asked = argv[:1] in ([], ["-h"], ["--help"])
        print(listing(), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    return import_module(f"bench.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
