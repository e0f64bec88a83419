"""python -m tests.programs.long_run: the target process's memory over a long decode run of the mock pair.

    .venv/bin/python -m tests.programs.long_run [--decodes 10000] [--at 1000]

A mock drafter process and the target program (`python -m programs.target_program --json`) run short
decodes of five prompts with every decoder and as many seeds as the count needs; the target's resident
memory is read when its record of the `--at` decode, and of the last, reaches stdout. The last line of the
output is one JSON document.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

from programs.options import RunOptions
from protocol.transport import private_ipc_endpoint

PROMPTS = ("a poem", "the sea", "at night", "a short story", "two words")
MOCK_POOL = ("--pool-topk", "4", "--pool-depth", "3", "--pool-expand", "2")  # small pools, as the tests use
MAX_NEW_TOKENS = 8


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def target_memory(decodes: int, at: list[int]) -> dict:
    """Run `decodes` mock decodes (rounded up to whole seeds) -> the target's RSS (MiB) after each count in
    `at` and after the last, the decodes run and the seconds they took."""
    endpoint = private_ipc_endpoint()
    folder = Path(endpoint[len("ipc://"):]).parent
    seeds = math.ceil(decodes / (len(PROMPTS) * len(RunOptions().decoder_list)))  # every default decoder
    python = [sys.executable, "-m"]
    drafter = subprocess.Popen([*python, "programs.drafter_program", "--model", "mock", "--endpoint", endpoint,
                                "--log-level", "WARNING"])
    prompts = [a for p in PROMPTS for a in ("--prompt", p)]
    target = subprocess.Popen([*python, "programs.target_program", "--model", "mock", "--endpoint", endpoint,
                               *MOCK_POOL, *prompts, "--num-seeds", str(seeds), "--max-new-tokens",
                               str(MAX_NEW_TOKENS), "--json", "--log-level", "WARNING"],
                              stdout=subprocess.PIPE, text=True)
    out, done, t0 = {}, 0, time.perf_counter()
    try:
        for line in target.stdout:
            kind = json.loads(line)["kind"]
            if kind == "decode":
                done += 1
                if done in at:
                    out[f"after_{done}_mib"] = rss_mib(target.pid)
            elif kind == "summary":
                out[f"after_{done}_mib"] = rss_mib(target.pid)  # all records tallied, the summary made
        out.update(decodes=done, seconds=round(time.perf_counter() - t0, 1), status=target.wait())
        return out
    finally:
        for proc in (target, drafter):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.programs.long_run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--decodes", type=int, default=10_000, help="decodes to run (default: 10000)")
    parser.add_argument("--at", type=int, default=1_000, help="also read the memory after this many (default: 1000)")
    ns = parser.parse_args(argv)
    if not 0 < ns.at < ns.decodes:
        parser.error(f"--at must lie between 0 and --decodes {ns.decodes}, got {ns.at}")
    result = target_memory(ns.decodes, [ns.at])
    first, last = result[f"after_{ns.at}_mib"], result[f"after_{result['decodes']}_mib"]
    result["growth_mib"] = round(last - first, 1)
    print(f"target RSS: {first:.1f} MiB after {ns.at} decodes, {last:.1f} MiB after {result['decodes']} "
          f"({result['seconds']} s)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
