"""python -m timing {sweep,report,matched} ...: run a timing sweep, report it, or plan the matched-size run."""

import sys

USAGE = """usage: python -m timing {sweep,report,matched} [options]

  sweep    the target-side process of a sweep (launch/pair.sh sweep starts it with its drafter)
  report   speeds, paired gains and round times of sweep directories, as Markdown and PNG plots
  matched  the root-draw cap whose mean tree size matches pearl's, and the command that times both

python -m timing COMMAND --help shows a command's options."""


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("sweep", "report", "matched"):
        print(USAGE, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    if argv[0] == "sweep":
        from timing.sweep import main as run
    elif argv[0] == "report":
        from timing.report import main as run
    else:
        from timing.matched import main as run
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
