"""python -m timing {sweep,report,matched,export,values} ...: run a timing sweep, report it, plan the matched-size
run, or export its records."""

import sys

PROGRAMS = {
    "sweep": "the target-side process of a sweep (launch/pair.sh sweep starts it with its drafter)",
    "report": "speeds, paired gains and round times of sweep directories, as Markdown and PNG plots",
    "matched": "the root-draw cap whose mean tree size matches pearl's, and the command that times both",
    "export": "a sweep's records as another tool's files (Spec-Bench model answers)",
    "values": "every selection rule's expected acceptance at the shared contexts of recorded rounds",
}
USAGE = ("usage: python -m timing {" + ",".join(PROGRAMS) + "} [options]\n\n"
         + "\n".join(f"  {name:<8} {about}" for name, about in PROGRAMS.items())
         + "\n\npython -m timing COMMAND --help shows a command's options. The benchmarks are in a package of\n"
         + "their own: python -m bench lists them.")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in PROGRAMS:
        asked = argv[:1] in (["-h"], ["--help"])
        print(USAGE, file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    from importlib import import_module

    return import_module(f"timing.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
