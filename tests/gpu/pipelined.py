"""The GPU check's pipelined section: every decoder through the launcher, as a user runs it, with graphs and
without, a live line per decode; greedy outputs agree or part only at a near tie (tests.gpu.margins).

The launcher runs as `python -P -m launch` with this interpreter and the project on PYTHONPATH (never
launch/pair.sh, whose setup would install packages from the network).
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tests.gpu import children, margins
from tests.gpu.margins import Parting
from tests.gpu.section import Section

TARGET_PHASES = ("root", "wait", "select", "tree", "commit")  # a round's steps in the target process
HOST_PHASES = ("select", "commit")  # host work between the passes
SHARED_NOTE = ("both processes share one GPU as two time-sliced contexts: the root pass and the drafter's "
               "work overlap only as far as time slicing lets them")
MARGIN_SHARE = 0.2  # of the section's time, kept from the decodes for measuring the margins of partings


@dataclass(frozen=True, slots=True)
class Record:
    """One decode as the launcher's --json line reports it."""

    decoder: str
    prompt: str
    tokens: list[int]
    seconds: float
    phases: dict[str, list[float]]  # seconds per round, by phase name
    prompt_tokens: int = 0
    accept_lengths: tuple[int, ...] = ()  # per round: tokens committed
    feature_bytes: tuple[int, ...] = ()  # per round: what its pool's request carried of the target's features

    @property
    def rounds(self) -> int:
        return len(next(iter(self.phases.values()), []))


def read_record(line: str) -> Record | None:
    """The launcher's JSON line for one decode (evaluation.record); None for any other line. The one place
    that knows the record's field names."""
    if not line.startswith("{"):
        return None
    raw = json.loads(line)
    if raw.get("kind") != "decode":
        return None
    return Record(raw["decoder"], raw["prompt_id"], raw["token_ids"], raw["seconds"], raw["phases"],
                  raw.get("prompt_tokens", 0), tuple(raw.get("accept_lengths", ())),
                  tuple(raw.get("feature_bytes", ())))


def decoder_names() -> list[str]:
    from pipeline.rules import DECODERS

    return list(DECODERS)


def launch_command(target: str, drafter: str, gpus: str | None, prompts: tuple[str, ...], max_new: int,
                   graphs: bool, decoders: Sequence[str] = ()) -> list[str]:
    """The launcher's command line for random models of shapes `target` and `drafter` (every decoder unless
    `decoders` names some)."""
    cmd = [sys.executable, "-P", "-m", "launch", "--target", f"random:{target}", "--drafter", f"random:{drafter}",
           "--decoders", ",".join(decoders or decoder_names()), "--max-new-tokens", str(max_new), "--json"]
    for text in prompts:
        cmd += ["--prompt", text]
    if gpus is not None:
        cmd += ["--gpus", gpus]
    if not graphs:
        cmd.append("--no-graphs")
    return cmd


def run_pair(cmd: list[str], timeout: float, on_record: Callable[[Record], None],
             echo: Callable[[str], None]) -> tuple[int, list[Record]]:
    """Run the launcher; each record goes to on_record and every other line to echo as it comes.

    Returns (exit status, records); 124 when it ran past `timeout` and was stopped with its processes.
    """
    proc = children.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=1)
    records: list[Record] = []

    def read_stdout() -> None:
        for line in proc.stdout:
            record = read_record(line)
            if record is None:
                echo(line.rstrip("\n"))
            else:
                records.append(record)
                on_record(record)

    readers = [threading.Thread(target=read_stdout, daemon=True),
               threading.Thread(target=lambda: [echo(line.rstrip("\n")) for line in proc.stderr], daemon=True)]
    for reader in readers:
        reader.start()
    try:
        status = proc.wait(max(timeout, 1))
    except subprocess.TimeoutExpired:
        status = 124
    finally:  # also on KeyboardInterrupt: no process of the pair outlives the check
        children.stop_group(proc)
    for reader in readers:
        reader.join(5)
    return status, records


def median_ms(values: list[float]) -> float | None:
    return 1e3 * statistics.median(values) if values else None


def summarize(records: list[Record]) -> dict[str, dict]:
    """Per decoder: tokens per second, and medians per round of its time, each phase and the host work."""
    out = {}
    for decoder in dict.fromkeys(r.decoder for r in records):
        rows = [r for r in records if r.decoder == decoder]
        names = list(dict.fromkeys(k for r in rows for k in r.phases))
        per_round = [dict(zip(names, values)) for r in rows for values in zip(*(r.phases[k] for k in names))]
        out[decoder] = {
            "tok_per_s": sum(len(r.tokens) for r in rows) / sum(r.seconds for r in rows),
            "rounds": len(per_round),
            "median_round_ms": median_ms([sum(p.get(k, 0.0) for k in TARGET_PHASES) for p in per_round]),
            **{f"median_{k}_ms": median_ms([p[k] for p in per_round]) for k in names},
            "median_host_ms": median_ms([sum(p.get(k, 0.0) for k in HOST_PHASES) for p in per_round]),
        }
    return out


def missing(a: list[Record], b: list[Record]) -> list[str]:
    """(decoder, prompt) pairs that only one of two runs has."""
    keys_a, keys_b = {(r.decoder, r.prompt) for r in a}, {(r.decoder, r.prompt) for r in b}
    return [f"{d} prompt {p}" for d, p in sorted(keys_a ^ keys_b)]


def partings(a: list[Record], b: list[Record], prompt_ids: Callable[[str], list[int]]) -> list[Parting]:
    """Where the outputs of the (decoder, prompt) pairs both runs have differ, first token only.
    prompt_ids: a record's prompt id -> the ids the target read, as many as the record says it read."""
    other = {(r.decoder, r.prompt): r for r in b}
    out = []
    for r in a:
        s = other.get((r.decoder, r.prompt))
        if s is None or (at := margins.first_parting(r.tokens, s.tokens)) is None:
            continue
        prompt = prompt_ids(r.prompt)
        if len(prompt) != r.prompt_tokens:
            raise ValueError(f"prompt {r.prompt}: {len(prompt)} ids here, but the decode read {r.prompt_tokens}")
        token = lambda tokens: tokens[at] if at < len(tokens) else None
        out.append(Parting(r.decoder, r.prompt, at, (token(r.tokens), token(s.tokens)), tuple(prompt + r.tokens[:at])))
    return out


def live_line(label: str, record: Record) -> str:
    rounds = [sum(values) for values in zip(*(record.phases.get(k, []) for k in TARGET_PHASES if k in record.phases))]
    median = f"{median_ms(rounds):.2f}" if rounds else "-"
    return (f"  {label:<9} {record.decoder:<11} prompt {record.prompt}: {len(record.tokens):4d} tokens in "
            f"{record.seconds:7.2f} s ({len(record.tokens) / record.seconds:7.1f} tok/s), {record.rounds:4d} "
            f"rounds, median round {median} ms")


def print_decode_table(plan, summary: dict, label: str, shared: bool) -> None:
    mark = "*" if shared else ""
    where = f"--gpus {plan.gpus}" if plan.gpus else "CPU"
    print(f"\n  pipelined decode, {plan.target} with {plan.drafter} ({where}), {label}: medians per round, ms")
    keys = [("tok_per_s", "tok/s", ""), ("median_round_ms", "round", ""), ("median_draft_ms", "draft", mark),
            ("median_root_ms", "root", mark), ("median_wait_ms", "wait", mark), ("median_tree_ms", "tree", ""),
            ("median_host_ms", "host", "")]
    print(f"  {'decoder':<12}" + "".join(f"{name + m:>10}" for _, name, m in keys))
    for decoder, s in summary.items():
        print(f"  {decoder:<12}" + "".join(f"{s[k]:10.2f}" if s.get(k) is not None else f"{'-':>10}"
                                          for k, _, _ in keys))
    if shared:
        print(f"  * overlap figures: {SHARED_NOTE}")


# -- the section --------------------------------------------------------------------------------------------

def section(s: Section) -> dict:
    """Every decoder through the launcher with graphs and without, at T = 0: their greedy outputs agree, or
    part where a margin within the parity gap makes either token right. A run cut by time keeps what ran."""
    plan = s.plan
    reserve = MARGIN_SHARE * s.budget.left()
    runs: dict[str, list[Record]] = {}
    codes: dict[str, int] = {}
    for n, (label, graphs) in enumerate((("graphs", True), ("no-graphs", False))):
        s.budget.check(f"the pipelined decodes with {label}")
        cmd = launch_command(plan.target, plan.drafter, plan.gpus, plan.prompts, plan.max_new_tokens, graphs)
        cmd += ["--max-context", str(plan.capacity)]
        print(f"  $ python {shlex.join(cmd[1:])}")
        runs[label] = []

        def on_record(record: Record, label: str = label) -> None:
            runs[label].append(record)
            print(live_line(label, record))
            s.keep(**{TABLES[k]: summarize(v) for k, v in runs.items()})

        codes[label], _ = run_pair(cmd, (s.budget.left() - reserve) / (2 - n), on_record,
                                   lambda line: print(f"    {line}"))
        if codes[label] != 0:
            print(f"  the launcher exited with status {codes[label]}")
    for label, records in runs.items():
        print_decode_table(plan, summarize(records), RUNS[label], shared_gpu(plan.gpus))
    return {**compare(s, runs.get("graphs", []), runs.get("no-graphs", []), codes),
            **{TABLES[k]: summarize(v) for k, v in runs.items()}}


TABLES = {"graphs": "decoders", "no-graphs": "decoders_no_graphs"}  # the result's key of each run's table
RUNS = {"graphs": "with graphs", "no-graphs": "without graphs"}


def shared_gpu(gpus: str | None) -> bool:
    return gpus is not None and len({g.strip() for g in gpus.split(",") if g.strip()}) == 1


def run_status(codes: dict[str, int]) -> str:
    """passed when both runs ended by themselves; out of time when one was cut or never started."""
    if any(code not in (0, 124) for code in codes.values()):
        return "failed"
    return "passed" if list(codes.values()) == [0, 0] else "out of time"


def compare(s: Section, graphs: list[Record], eager: list[Record], codes: dict[str, int]) -> dict:
    """The two runs' outputs held against each other, and the section's result without its tables."""
    plan, status = s.plan, run_status(codes)
    lost = missing(graphs, eager) if status == "passed" else []  # a cut run lacks decodes it never started
    parts = partings(graphs, eager, prompt_ids_of(plan))
    gap, source = parity_gap(s.earlier.get("parity", {}), "bfloat16" if plan.gpus else "float32")
    found, measured = measure_margins(s, parts)
    judged = [{"decoder": p.decoder, "prompt": p.prompt, "position": p.position, "tokens": list(p.tokens),
               "margin": m, "explained": margins.explained(m, gap)} for p, m in zip(parts, found)]
    for j in judged:
        print(parting_line(j, gap))
    differ = [f"{j['decoder']} prompt {j['prompt']}" for j in judged if not j["explained"]] + lost
    if graphs and eager and not parts:
        print("  greedy outputs with graphs equal those without"
              + (" (on the decodes both runs ended)" if status != "passed" else ""))
    wrong = lost or [j for j in judged if j["margin"] is not None and not j["explained"]]
    if wrong:
        status = "failed"
    elif differ and status == "passed":  # margins not measured: for want of time, or they could not be
        status = "out of time" if measured == "out of time" else "failed"
    return {"status": status, "gpus": plan.gpus, "shared_gpu": shared_gpu(plan.gpus),
            "note": SHARED_NOTE if shared_gpu(plan.gpus) else None, "parity_gap": {"gap": gap, "from": source},
            "partings": judged, "missing": lost, "outputs_differ": differ,
            "figure": figure(summarize(graphs), bool(graphs and eager), len(parts), differ)}


def figure(summary: dict, compared: bool, parts: int, differ: list[str]) -> str:
    fastest = max(summary, key=lambda d: summary[d]["tok_per_s"], default=None)
    said = f"fastest {fastest} {summary[fastest]['tok_per_s']:.1f} tok/s" if fastest else "no decode with graphs"
    if differ:
        return said + f"; {len(differ)} outputs DIFFER"
    if parts:
        return said + f"; {parts} outputs part at near ties"
    return said + ("; outputs with and without graphs equal" if compared else "")


def parting_line(judged: dict, gap: float) -> str:
    margin = judged["margin"]
    said = "margin unknown" if margin is None else f"margin {margin:.1e} of the row's scale"
    verdict = ("within" if judged["explained"] else "NOT within") + f" {margins.FLIP:g} x the parity gap {gap:.1e}"
    return (f"  {judged['decoder']} prompt {judged['prompt']}: with and without graphs the outputs part at token "
            f"{judged['position']} ({judged['tokens'][0]} against {judged['tokens'][1]}), {said}: {verdict}"
            + (": a near tie, both right" if judged["explained"] else ": DIFFERENT"))


def parity_gap(parity: dict, dtype: str) -> tuple[float, str]:
    """The largest relative gap the parity section measured in `dtype` (its tolerance where it measured
    none, or more), and where it came from."""
    import torch

    from tests.gpu.passes import TOLERANCE

    tolerance = TOLERANCE[getattr(torch, dtype)]
    gaps = {k: r["worst_gap"] for k, r in parity.items() if isinstance(r, dict) and k.endswith(f" {dtype}")
            and isinstance(r.get("worst_gap"), float)}
    if not gaps:
        return tolerance, f"the {dtype} tolerance: the parity section measured no {dtype} gap"
    worst = max(gaps, key=gaps.get)
    if gaps[worst] > tolerance:
        return tolerance, f"the {dtype} tolerance: the parity section measured more ({worst})"
    return gaps[worst], f"parity, {worst}"


def prompt_ids_of(plan) -> Callable[[str], list[int]]:
    """A record's prompt id ("prompt/I", the launcher's for its I-th --prompt) -> the ids the target read:
    the random models' tokenizer over the prompt's text, as a one-turn chat."""
    from models.shapes import SHAPES
    from models.tokenizers import MockTokenizer

    tokenizer = MockTokenizer(SHAPES[plan.target][0])
    return lambda prompt_id: tokenizer.chat_ids([plan.prompts[int(prompt_id.rpartition("/")[2])]])


def measure_margins(s: Section, parts: Sequence[Parting]) -> tuple[list[float | None], str]:
    """Each parting's margin, measured in a child process that builds the target (None: not measured), and
    how the child ended ("passed", "out of time", ...)."""
    if not parts or all(None in p.tokens for p in parts):
        return [None] * len(parts), "passed"
    plan = s.plan
    device = f"cuda:{plan.gpus.split(',')[0].strip()}" if plan.gpus else "cpu"
    request = margins.request(parts, s.out / ".margins.request.json")
    cmd = [sys.executable, "-P", "-m", "tests.gpu.margins", "--shape", plan.target, "--device", device,
           "--capacity", str(plan.capacity), "--request", str(request), "--result", str(s.out / ".margins.json")]
    print(f"  measuring the margins of {len(parts)} partings in the eager rows of random:{plan.target}")
    result = children.run_reporting_child(cmd, s.budget.left(), s.out / ".margins.json")
    request.unlink(missing_ok=True)
    if "margins" not in result:
        print(f"  the margins were not measured: {result.get('status')}, {result.get('error')}")
    return result.get("margins") or [None] * len(parts), result.get("status", "crashed")
