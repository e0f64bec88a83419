"""The GPU check's recorded-rounds section: every decoder at T = 1 recorded at the paper's pool, then the
values program on the rounds. It checks the measurement pass (the root and the 70 expanded candidates, 71
rows: the largest captured bucket), the shared-contexts program, and sampling on the GPU: each decoder with
a value (pipeline.rules) must realize an acceptance that agrees with the value its recorded pools give
(verification's law) where its rounds hold enough accepted tokens to tell (MIN_TOKENS), and every decoder
must run to its end. Random weights give nearly flat rows, so few drafted tokens are accepted at T = 1: on
a vocabulary of 128k most decoders are only run, not judged.

Both processes run the drafter's shape (the same seed: the same weights), so drafts are accepted and the
agreement has something to measure; the section checks the path, not the pair's speed. The rounds file
(DIR/rounds/) and values' JSON lines (DIR/values.jsonl) stay under the check's folder and come back with it.
"""

from __future__ import annotations

import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.rules import RULES
from tests.gpu import children, pipelined
from tests.gpu.section import Section

PAPER_POOL = ("--pool-topk", "10", "--pool-depth", "8", "--pool-expand", "10")  # 710 candidates
VALUES_SHARE = 0.25  # of the section's time, kept from the decodes for the values program
BUDGET = 59
MIN_TOKENS = 10  # accepted tokens a decoder's rounds must expect or realize, beyond the sure ones, to be judged


def record_command(target: str, drafter: str, gpus: str | None, prompts: tuple[str, ...], max_new: int,
                   out: Path) -> list[str]:
    """The launcher decoding with every decoder at T = 1, B = 59, recording every round at the paper's pool."""
    cmd = [sys.executable, "-P", "-m", "launch", "--target", f"random:{target}", "--drafter", f"random:{drafter}",
           "--decoders", ",".join(pipelined.decoder_names()), "--temperature", "1", "--budget", str(BUDGET),
           "--max-new-tokens", str(max_new), *PAPER_POOL, "--record-rounds", str(out), "--json"]
    for text in prompts:
        cmd += ["--prompt", text]
    if gpus is not None:
        cmd += ["--gpus", gpus]
    return cmd


def section(s: Section) -> dict:
    """Record, then run `values --json` on whatever was recorded -> the section's result."""
    plan = s.plan
    s.budget.check("the recorded rounds")
    rounds_dir = s.out / "rounds"
    shutil.rmtree(rounds_dir, ignore_errors=True)  # a former check's, in a folder used again
    cmd = record_command(plan.drafter, plan.drafter, plan.gpus, plan.prompts[:1], plan.max_new_tokens, rounds_dir)
    print(f"  $ python {shlex.join(cmd[1:])}")
    records: list[pipelined.Record] = []

    def on_record(record: pipelined.Record) -> None:
        records.append(record)
        print(pipelined.live_line("T = 1", record))
        s.keep(rounds=sum(r.rounds for r in records), decoders={r.decoder: len(r.tokens) for r in records})

    code, _ = pipelined.run_pair(cmd, s.budget.left() * (1 - VALUES_SHARE), on_record,
                                 lambda line: print(f"    {line}"))
    status = {0: "passed", 124: "out of time"}.get(code, "failed")
    s.keep(record_exit=code, rounds_dir=str(rounds_dir))
    if not records:
        return {"status": status, "figure": f"no decode recorded (the launcher: {children.died(code)})"}
    lines, said = run_values(values_command(rounds_dir), s.out / "values.jsonl", s.budget.left())
    result = summarize(lines, records)
    if said:
        return {**result, "status": said if status == "passed" else status}
    return {**result, "status": status if result["status"] == "passed" else result["status"]}


def values_command(rounds_dir: Path) -> list[str]:
    return [sys.executable, "-P", "-m", "timing", "values", str(rounds_dir), "--json", "--resamples", "200"]


def run_values(cmd: list[str], out: Path, seconds: float) -> tuple[list[dict], str | None]:
    """The values program (values_command), its lines written to `out` as they come -> (the lines read
    back, None when it passed else "out of time" or "failed")."""
    print(f"  $ python {shlex.join(cmd[1:])} > {out}")
    with open(out, "w", encoding="utf-8") as sink:
        proc = children.start(cmd, stdout=sink, stderr=subprocess.PIPE)
        try:
            _, stderr = proc.communicate(timeout=max(seconds, 1))
            said = None if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            stderr, said = "", "out of time"
            print(f"  values ran past the {max(seconds, 1):.0f} s left and was stopped; its lines so far are kept")
        finally:
            children.stop_group(proc)
    if said == "failed":
        print(f"  values {children.died(proc.returncode)}: {stderr.strip()[-2000:]}")
    return read_lines(out), said


def read_lines(path: Path) -> list[dict]:
    """The JSON lines of `path`; a line cut short by a stopped process is left out."""
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(text))
        except ValueError:
            continue
    return lines


def summarize(lines: list[dict], records: list[pipelined.Record]) -> dict:
    """The figures the check keeps from values' JSON lines (read by their `kind`; other kinds are left
    alone); failed when a decoder with a value (pipeline.rules) and its recorded values disagree, or one
    has no agreement."""
    value = {(v.get("rule"), v.get("budget")): v for v in lines if v.get("kind") == "value"}
    agreements = [{k: a.get(k) for k in ("decoder", "budget", "rounds", "realized_per_round", "value_per_round",
                                         "difference", "low", "high", "disagrees")}
                  for a in lines if a.get("kind") == "agreement"]
    rules = sorted({rule for rule, _ in value})
    valued = sorted({r.decoder for r in records if r.rounds and RULES[r.decoder].value is not None})
    unmatched = sorted(set(valued) - {a["decoder"] for a in agreements})
    for a in agreements:
        a["judged"] = judged(a)
    disagree = [a["decoder"] for a in agreements if a["disagrees"] and a["judged"]]
    ok = not unmatched and not disagree and {"draft", "root", "oracle"} <= set(rules)
    result = {"status": "passed" if ok else "failed", "rounds": sum(r.rounds for r in records), "rules": rules,
              "decoders": {r.decoder: len(r.tokens) for r in records},
              "values_b59": {rule: value.get((rule, BUDGET), {}).get("value_per_round") for rule in rules},
              "root_over_draft_b8": value.get(("root", 8), {}).get("gain_over_draft"), "agreement": agreements,
              "without_agreement": unmatched, "disagree": disagree}
    print_summary(result)
    return {**result, "figure": figure(result)}


def judged(a: dict) -> bool:
    """Whether an agreement line's rounds hold enough accepted tokens to tell a disagreement from chance: at
    least MIN_TOKENS expected or realized beyond the tokens every round brings (the draw X1, for the rules
    that count it). Fewer cannot: its interval comes from the rounds' own spread, which a rare acceptance
    that did not happen leaves near zero."""
    n, v, r = a["rounds"], a["value_per_round"], a["realized_per_round"]
    return n * (max(v, r) - math.floor(min(v, r))) >= MIN_TOKENS


def print_summary(result: dict) -> None:
    print(f"  recorded {result['rounds']} rounds at the paper's pool; values at B = {BUDGET}: "
          + ", ".join(f"{r} {v:.3f}" for r, v in result["values_b59"].items() if v is not None))
    for a in result["agreement"]:
        verdict = ("DISAGREES" if a["disagrees"] else "agrees") if a["judged"] else "too few accepted tokens to judge"
        print(f"  {a['decoder']} B = {a['budget']}: realized {a['realized_per_round']:.3f} against value "
              f"{a['value_per_round']:.3f} over {a['rounds']} rounds ({verdict})")
    if result["without_agreement"]:
        print(f"  no agreement line for {', '.join(result['without_agreement'])}")


def figure(result: dict) -> str:
    held = [a for a in result["agreement"] if a["judged"]]
    said = f"{result['rounds']} rounds of {len(result['decoders'])} decoders at T = 1"
    if not held:
        return said + "; too few accepted tokens to judge any against its values"
    worst = max(held, key=lambda a: abs(a["difference"] or 0.0))
    return (said + f"; {len(held) - len(result['disagree'])} of {len(held)} judged agree with their values, widest "
            f"{worst['decoder']} realized {worst['realized_per_round']:.2f} against {worst['value_per_round']:.2f}")
