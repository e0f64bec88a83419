"""The GPU check's recorded-rounds section: a few decodes recorded at the paper's pool, then the values
program on them, so that the first device run also checks the measurement pass (the root and the 70
expanded candidates, 71 rows: the largest captured bucket) and the shared-contexts program."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.gpu import pipelined

PAPER_POOL = ("--pool-topk", "10", "--pool-depth", "8", "--pool-expand", "10")  # 710 candidates


def record_command(target: str, drafter: str, gpus: str | None, prompts: tuple[str, ...], max_new: int,
                   out: Path) -> list[str]:
    """The launcher decoding with root-draw at T = 1, B = 59, recording every round at the paper's pool."""
    cmd = [sys.executable, "-P", "-m", "launch", "--target", f"random:{target}", "--drafter", f"random:{drafter}",
           "--decoders", "root-draw", "--temperature", "1", "--budget", "59", "--max-new-tokens", str(max_new),
           *PAPER_POOL, "--record-rounds", str(out), "--json"]
    for text in prompts:
        cmd += ["--prompt", text]
    if gpus is not None:
        cmd += ["--gpus", gpus]
    return cmd


def run(target: str, drafter: str, gpus: str | None, prompts: tuple[str, ...], max_new: int, seconds: float,
        echo: Callable[[str], None] = print) -> dict:
    """Record, then run `values --json` on the recorded rounds -> the section's result."""
    with tempfile.TemporaryDirectory(prefix="specpair-rounds-") as tmp:
        out = Path(tmp) / "run"
        cmd = record_command(target, drafter, gpus, prompts, max_new, out)
        echo(f"  $ python {shlex.join(cmd[1:])}")
        code, records = pipelined.run_pair(cmd, seconds * 0.8, lambda r: None, lambda line: echo(f"    {line}"))
        if code != 0:
            return {"status": "out of time" if code == 124 else "failed", "record_exit": code}
        values = subprocess.run([sys.executable, "-P", "-m", "timing", "values", str(out), "--json",
                                 "--resamples", "200"], cwd=pipelined.ROOT, env=pipelined.child_env(),
                                capture_output=True, text=True, timeout=max(10.0, seconds * 0.2))
        if values.returncode != 0:
            echo(values.stderr)
            return {"status": "failed", "values_exit": values.returncode, "stderr": values.stderr[-2000:]}
        lines = [json.loads(line) for line in values.stdout.splitlines()]
    return summarize(lines, sum(r.rounds for r in records))


def summarize(lines: list[dict], rounds: int) -> dict:
    """The figures the check keeps from values' JSON lines; failed when the decoder and its recorded values
    disagree or a rule is missing."""
    value = {(v["rule"], v["budget"]): v for v in lines if v["kind"] == "value"}
    agreements = [a for a in lines if a["kind"] == "agreement"]
    rules = {rule for rule, _ in value}
    ok = bool(agreements) and not any(a["disagrees"] for a in agreements) and {"draft", "root", "oracle"} <= rules
    pick = lambda rule, b: value.get((rule, b), {}).get("value_per_round")
    result = {"status": "passed" if ok else "failed", "rounds": rounds, "rules": sorted(rules),
              "values_b59": {rule: pick(rule, 59) for rule in sorted(rules)},
              "root_over_draft_b8": value.get(("root", 8), {}).get("gain_over_draft"),
              "agreement": [{k: a[k] for k in ("decoder", "budget", "rounds", "realized_per_round",
                                               "value_per_round", "difference", "disagrees")} for a in agreements]}
    print(f"  recorded {rounds} rounds at the paper's pool; values at B = 59: " +
          ", ".join(f"{r} {v:.3f}" for r, v in result["values_b59"].items() if v is not None))
    for a in result["agreement"]:
        print(f"  {a['decoder']} B = {a['budget']}: realized {a['realized_per_round']:.3f} against value "
              f"{a['value_per_round']:.3f} over {a['rounds']} rounds ({'DISAGREES' if a['disagrees'] else 'agrees'})")
    return result
