"""The GPU check's EAGLE-3 section: a pipelined pair whose drafter is a random EAGLE-3 head of a public head's
shapes (`random:eagle3-llama-3.1-8b`) beside the random target of those shapes, through the launcher with the
head's tree steps captured as CUDA graphs and without (--no-graphs), at T = 0: greedy outputs agree or part only
at a near tie (tests.gpu.pipelined.compare), the phases per round, and the bytes of the target's features that
each round's request for its pool carried (the records' `feature_bytes`), held to a row of 3 x the target's
hidden size in its dtype for each token the request told the head.

The run with graphs must say that the head captured its graphs, and the run without must not. The rehearsal
runs the same on the CPU at the tiny shapes with --rehearse-graphs: there the head keeps one padded pass per
captured bucket (HeadRunner.capture) and its passes run through them eagerly, against the unpadded passes of
the run without graphs.
"""

from __future__ import annotations

import re
import shlex
import statistics
from dataclasses import replace

from models.shapes import SHAPES
from tests.gpu import pipelined
from tests.gpu.pipelined import Record
from tests.gpu.section import Section

CAPTURED = re.compile(r"captured (\d+) head graphs")  # the head runner's line as it captures (models.eagle3)
LABELS = (("graphs", True), ("no-graphs", False))


def head_shape(plan) -> str:
    """The drafter's random shape as the launcher's random: spec names it."""
    return f"eagle3-{plan.head}"


def launch_command(plan, graphs: bool) -> list[str]:
    """The launcher's command line for the pair; on the CPU, its passes in their CUDA shapes."""
    cmd = pipelined.launch_command(plan.target, head_shape(plan), plan.gpus, plan.prompts, plan.max_new_tokens,
                                   graphs, plan.head_decoders)
    return cmd + ["--max-context", str(plan.capacity)] + ([] if plan.gpus else ["--rehearse-graphs"])


def row_bytes(plan) -> int:
    """A token's features as the target sends them: the inputs of 3 layers of its hidden size, in bfloat16 on
    a GPU and float32 on the CPU (the launcher's dtype auto)."""
    return 3 * SHAPES[plan.target][1] * (2 if plan.gpus else 4)


def rows_told(record: Record) -> list[int]:
    """Per round whose request carried features: the tokens it told the head (the Start: the prompt's but the
    last; a Commit: every token committed since the request before)."""
    told, pending = [], record.prompt_tokens - 1
    for sent, emitted in zip(record.feature_bytes, record.accept_lengths):
        if sent:
            told.append(pending)
            pending = 0
        pending += emitted
    return told


def feature_figures(records: list[Record], row: int) -> dict:
    """What the features cost one run: the Starts' bytes, the Commits' (one a round after the first), the
    bytes per token told, and the decodes whose requests were not `row` bytes a token."""
    starts, commits, sent, told, off = [], [], 0, 0, []
    for r in records:
        carried = [b for b in r.feature_bytes if b]
        tokens = rows_told(r)
        starts += carried[:1]
        commits += carried[1:]
        sent, told = sent + sum(carried), told + sum(tokens)
        if not carried or carried != [row * n for n in tokens]:
            off.append(f"{r.decoder} prompt {r.prompt}")
    return {"start_bytes": statistics.median(starts) if starts else None, "commits": len(commits),
            "commit_bytes": statistics.median(commits) if commits else None,
            "commit_bytes_max": max(commits, default=None), "bytes_per_token": sent / told if told else None,
            "row_bytes": row, "not_a_row_a_token": off}


def features_line(label: str, f: dict, plan) -> str:
    if f["commit_bytes"] is None:
        return f"  features, {pipelined.RUNS[label]}: no Commit carried any"
    hidden, size = SHAPES[plan.target][1], 2 if plan.gpus else 4
    verdict = ("as each should" if not f["not_a_row_a_token"]
               else f"NOT in {len(f['not_a_row_a_token'])} decodes: {', '.join(f['not_a_row_a_token'])}")
    return (f"  features, {pipelined.RUNS[label]}: a Commit {f['commit_bytes']:,.0f} B median "
            f"({f['commit_bytes_max']:,} B at most, {f['commits']} Commits), a Start {f['start_bytes']:,.0f} B median; "
            f"{f['bytes_per_token']:,.0f} B a token told, 3 x {hidden:,} x {size} B: {verdict}")


def tables(runs: dict[str, list[Record]], row: int) -> dict:
    """Each run's table of medians per decoder (the pipelined section's), and its features' figures."""
    out = {pipelined.TABLES[k]: pipelined.summarize(v) for k, v in runs.items()}
    out["features"] = {k: feature_figures(v, row) for k, v in runs.items()}
    return out


# -- the section --------------------------------------------------------------------------------------------

def section(s: Section) -> dict:
    """The pair with the head's graphs and without; a run cut by time keeps what ran."""
    plan = s.plan
    pair = replace(plan, drafter=head_shape(plan))  # the pair as the pipelined section's helpers name it
    row = row_bytes(plan)
    reserve = pipelined.MARGIN_SHARE * s.budget.left()
    runs: dict[str, list[Record]] = {}
    codes: dict[str, int] = {}
    captured: dict[str, int] = {}
    for n, (label, graphs) in enumerate(LABELS):
        s.budget.check(f"the EAGLE-3 pair with {label}")
        cmd = launch_command(plan, graphs)
        print(f"  $ python {shlex.join(cmd[1:])}")
        runs[label], captured[label] = [], 0

        def on_record(record: Record, label: str = label) -> None:
            runs[label].append(record)
            print(pipelined.live_line(label, record))
            s.keep(head_graphs=captured, **tables(runs, row))

        def echo(line: str, label: str = label) -> None:
            print(f"    {line}")
            if found := CAPTURED.search(line):
                captured[label] += int(found.group(1))

        codes[label], _ = pipelined.run_pair(cmd, (s.budget.left() - reserve) / (len(LABELS) - n), on_record, echo)
        if codes[label] != 0:
            print(f"  the launcher exited with status {codes[label]}")
    shown = tables(runs, row)
    for label, records in runs.items():
        pipelined.print_decode_table(pair, pipelined.summarize(records), pipelined.RUNS[label],
                                     pipelined.shared_gpu(plan.gpus))
    print()
    for label in runs:
        print(features_line(label, shown["features"][label], plan))
    print(f"  head graphs captured: {captured.get('graphs', 0)} with graphs, {captured.get('no-graphs', 0)} without")
    result = pipelined.compare(replace(s, plan=pair), runs.get("graphs", []), runs.get("no-graphs", []), codes)
    wrong = judge(codes, captured, shown["features"])
    for problem in wrong:
        print(f"  {problem}")
    status = "failed" if wrong else result["status"]
    return {**result, **shown, "status": status, "head": f"random:{head_shape(plan)}", "head_graphs": captured,
            "problems": wrong, "figure": figure(shown, captured, result["figure"], wrong)}


def judge(codes: dict[str, int], captured: dict[str, int], features: dict[str, dict]) -> list[str]:
    """What is wrong beyond the outputs: the head's graphs captured where they should not be or not where they
    should, and features not a row a token."""
    wrong = []
    if codes.get("graphs") == 0 and not captured.get("graphs"):
        wrong.append("the run with graphs did not say that the head captured its graphs")
    if captured.get("no-graphs"):
        wrong.append(f"the run without graphs captured {captured['no-graphs']} head graphs")
    for label, f in features.items():
        if f["not_a_row_a_token"]:
            wrong.append(f"{pipelined.RUNS[label]}: features not {f['row_bytes']} B a token told in "
                         f"{', '.join(f['not_a_row_a_token'])}")
    return wrong


def figure(shown: dict, captured: dict[str, int], outputs: str, wrong: list[str]) -> str:
    """The section's line: the features a Commit carried, the head's graphs, and the outputs' verdict."""
    f = shown["features"].get("graphs", {})
    said = (f"features {f['commit_bytes']:,.0f} B a Commit ({f['bytes_per_token']:,.0f} B a token)"
            if f.get("commit_bytes") is not None else "no Commit measured")
    said += f"; {captured.get('graphs', 0)} head graphs; {outputs}"
    return said + (f"; {len(wrong)} PROBLEMS" if wrong else "")
