"""The GPU check: environment, the GPU tests, graph/eager parity, per-pass latencies, pipelined decodes.

Run it through tests/gpu/check.sh, which picks and prepares the interpreter and keeps the overall time:
  python -P -m tests.gpu.check [--rehearse] [--out DIR] [--timeout S] [--gpus 0|0,1]
Every section writes DIR/check.json when it ends, so a check cut short keeps what it measured; a failed
section does not stop the later ones, and the exit status reports it (1; 124 when out of time; 2 when
CUDA is unusable and not rehearsing). The last line of the output is the whole report as one JSON document.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from models.cuda_env import cuda_driver, cuda_report, describe
from models.hf import aligned_slots
from models.shapes import SHAPES, random_model
from tests.gpu import passes, pipelined
from tests.gpu.passes import Budget, OutOfTime

ROOT = Path(__file__).resolve().parents[2]
EXIT_FAILED, EXIT_NO_CUDA, EXIT_OUT_OF_TIME = 1, 2, 124
SHARED_NOTE = ("both processes share one GPU as two time-sliced contexts: the root pass and the drafter's "
               "work overlap only as far as time slicing lets them")


@dataclass(frozen=True, slots=True)
class Plan:
    """What the check runs; the GPU run and the CPU rehearsal differ only in device, shapes and sizes."""

    device: str = "cuda:0"
    parity_shapes: tuple[str, ...] = ("tiny", "llama-3.2-1b")
    parity_dtypes: tuple[str, ...] = ("bfloat16", "float32")
    latency_shapes: tuple[str, ...] = ("llama-3.2-1b", "llama-3.1-8b")  # drafter, target
    latency_rows: tuple[int, ...] = (1, 8, 60, 72)
    target: str = "llama-3.1-8b"
    drafter: str = "llama-3.2-1b"
    gpus: str | None = None  # --gpus of the pipelined decodes; None: on the CPU
    capacity: int = 2048  # KV slots, the runtime's default --max-context
    context: int = 512  # committed tokens before each timed pass
    reps: int = 20
    max_new_tokens: int = 64
    prompts: tuple[str, ...] = ("Write a short poem about the sea at night.",
                                "Explain in three sentences why the sky is blue.")
    # seconds each section may take at most (the overall deadline may cut it shorter)
    budgets: dict = field(default_factory=lambda: {"environment": 30, "gpu tests": 90, "parity": 75,
                                                   "latency": 120, "pipelined": 210})


REHEARSAL = Plan(device="cpu", parity_shapes=("tiny",), latency_shapes=("tiny", "tiny"), target="tiny",
                 drafter="tiny", capacity=256, context=64, reps=3, max_new_tokens=12,
                 budgets={"environment": 20, "gpu tests": 60, "parity": 30, "latency": 30, "pipelined": 90})


class Report:
    """The check's results, written to DIR/check.json (whole, atomically) after every section."""

    def __init__(self, path: Path, plan: Plan) -> None:
        self.path = path
        self.data = {"plan": {k: getattr(plan, k) for k in plan.__dataclass_fields__ if k != "budgets"},
                     "sections": {}, "goals": []}

    def section(self, name: str, result: dict) -> None:
        self.data["sections"][name] = result
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


# -- sections: each takes (plan, budget) and returns its results, with "status" unless it passed -------

def environment(plan: Plan, budget: Budget) -> dict:
    """The line that says what ran: GPU, driver, torch, CUDA, cuDNN, transformers, SDPA backend."""
    import transformers

    device = torch.device(plan.device)
    on_cuda = device.type == "cuda"
    cudnn = torch.backends.cudnn.version() if on_cuda else None
    _, _, _, _, heads, kv_heads, head_dim, _ = SHAPES[plan.target]
    slots = aligned_slots(plan.capacity)
    dtype = torch.bfloat16 if on_cuda else torch.float32
    env = {"device": torch.cuda.get_device_name(device) if on_cuda else platform.processor() or "cpu",
           "devices": torch.cuda.device_count() if on_cuda else 0, "driver_cuda": cuda_driver(),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn else None,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "sdpa": {f"{rows} rows": passes.sdpa_backend(device, dtype, heads, kv_heads, head_dim, rows, slots)
                    for rows in (1, 72)}}
    sdpa = ", ".join(f"{v} at {k}" for k, v in env["sdpa"].items())
    print(f"{env['device']} ({env['devices']} GPU) | driver CUDA {env['driver_cuda']} | torch {env['torch']} | "
          f"CUDA {env['cuda']} | cuDNN {env['cudnn']} | transformers {env['transformers']} | SDPA {sdpa} "
          f"({plan.target} shape, {slots} slots) | Python {env['python']}")
    return env


def gpu_tests(plan: Plan, budget: Budget) -> dict:
    """pytest on the tests marked gpu (they skip without CUDA), its output streamed as it comes."""
    cmd = [sys.executable, "-P", "-m", "pytest", "tests/gpu", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "-rs"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=pipelined.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    last = ""
    timer = threading.Timer(max(budget.left(), 1), pipelined.stop_group, (proc,))  # ends a hung pytest
    timer.start()
    try:
        for line in proc.stdout:
            print(f"  | {line.rstrip()}")
            last = line.strip() or last
        status = proc.wait()
    finally:
        timer.cancel()
        pipelined.stop_group(proc)
    if budget.left() <= 0:
        raise OutOfTime("pytest ran past its share of the time")
    return {"status": "passed" if status == 0 else "failed", "returncode": status, "summary": last}


def parity(plan: Plan, budget: Budget) -> dict:
    """Graph replay against eager rows, per model shape and dtype."""
    results, failed = {}, []
    for shape in plan.parity_shapes:
        for dtype_name in plan.parity_dtypes:
            budget.check(f"parity of {shape} {dtype_name}")
            dtype = getattr(torch, dtype_name)
            model = random_model(shape, plan.device, dtype)
            pair = passes.runner_pair(model, plan.capacity, min(plan.context, 128))
            gaps = passes.parity(pair, budget)
            worst = max(gaps, key=gaps.get)
            ok = gaps[worst] <= passes.TOLERANCE[dtype]
            results[f"{shape} {dtype_name}"] = {"graphs": len(pair["graph"].runner.graphs), "worst_pass": worst,
                                                "worst_gap": gaps[worst], "ok": ok, "gaps": gaps}
            print(f"  {shape:<14}{dtype_name:<10}{len(pair['graph'].runner.graphs):3d} graphs, {len(gaps)} passes, "
                  f"largest gap {gaps[worst]:.2e} ({worst}; equal up to {passes.TOLERANCE[dtype]:.0e}): "
                  f"{'ok' if ok else 'DIFFERENT'}")
            failed += [] if ok else [f"{shape} {dtype_name}"]
            del model, pair
            free_memory()
    return {"status": "failed" if failed else "passed", "different": failed, **results}


def latency(plan: Plan, budget: Budget) -> dict:
    """Median ms per pass, eager and graph replay, and the eager pass's kernel time, for each shape."""
    results = {}
    dtype = torch.bfloat16
    for role, shape in zip(("drafter", "target"), plan.latency_shapes):
        budget.check(f"the {role}'s latencies")
        model = random_model(shape, plan.device, dtype)
        pair = passes.runner_pair(model, plan.capacity, plan.context)
        table = passes.latencies(pair, plan.latency_rows, plan.reps, budget)
        results[f"{role} {shape}"] = table
        print(f"\n  {role} {shape}, bf16: median ms per pass after {plan.context} tokens, "
              f"{aligned_slots(plan.capacity)} cache slots, {plan.reps} reps")
        print(f"  {'rows':>6}{'eager':>10}{'graph':>10}{'kernels':>10}{'graph/kernels':>15}")
        for rows, t in table.items():
            kernels, ratio = (f"{t['kernel_ms']:10.3f}", f"{t['graph_ms'] / t['kernel_ms']:15.2f}") \
                if t["kernel_ms"] else (f"{'-':>10}", f"{'-':>15}")
            print(f"  {rows:>6}{t['eager_ms']:10.3f}{t['graph_ms']:10.3f}{kernels}{ratio}")
        del model, pair
        free_memory()
    return results


def pipelined_decodes(plan: Plan, budget: Budget) -> dict:
    """Every decoder through the launcher with graphs and without; greedy outputs must agree."""
    shared = plan.gpus is not None and len({g for g in plan.gpus.split(",") if g.strip()}) == 1
    runs, status = {}, "passed"
    for label, graphs in (("graphs", True), ("no-graphs", False)):
        budget.check(f"the pipelined decodes with {label}")
        cmd = pipelined.launch_command(plan.target, plan.drafter, plan.gpus, plan.prompts, plan.max_new_tokens,
                                       graphs)
        print(f"  $ python {shlex.join(cmd[1:])}")
        code, records = pipelined.run_pair(cmd, budget.left(), lambda r, l=label: print(pipelined.live_line(l, r)),
                                           lambda line: print(f"    {line}"))
        runs[label] = records
        if code != 0:
            status = "out of time" if code == 124 else "failed"
            print(f"  the launcher exited with status {code}")
            break
    summary = pipelined.summarize(runs.get("graphs", []))
    complete = status == "passed"  # both runs ended by themselves
    differ = pipelined.output_differences(runs["graphs"], runs["no-graphs"]) if complete else None
    if differ:
        status = "failed"
    print_decode_table(plan, summary, shared)
    if differ is not None:
        verdict = "yes" if not differ else "NO: " + ", ".join(differ)
        print(f"  greedy outputs with graphs equal those without: {verdict}")
    return {"status": status, "gpus": plan.gpus, "shared_gpu": shared, "note": SHARED_NOTE if shared else None,
            "decoders": summary, "outputs_differ": differ}


def print_decode_table(plan: Plan, summary: dict, shared: bool) -> None:
    mark = "*" if shared else ""
    where = f"--gpus {plan.gpus}" if plan.gpus else "CPU"
    print(f"\n  pipelined decode, {plan.target} with {plan.drafter} ({where}), with graphs: medians per round, ms")
    keys = [("tok_per_s", "tok/s", ""), ("median_round_ms", "round", ""), ("median_draft_ms", "draft", mark),
            ("median_root_ms", "root", mark), ("median_wait_ms", "wait", mark), ("median_tree_ms", "tree", ""),
            ("median_host_ms", "host", "")]
    print(f"  {'decoder':<12}" + "".join(f"{name + m:>10}" for _, name, m in keys))
    for decoder, s in summary.items():
        print(f"  {decoder:<12}" + "".join(f"{s[k]:10.2f}" if s.get(k) is not None else f"{'-':>10}"
                                          for k, _, _ in keys))
    if shared:
        print(f"  * overlap figures: {SHARED_NOTE}")


SECTIONS = (("environment", environment), ("gpu tests", gpu_tests), ("parity", parity), ("latency", latency),
            ("pipelined", pipelined_decodes))


# -- goals, running, main ---------------------------------------------------------------------------

def goals(report: dict) -> list[dict]:
    """The figures held against the runtime's targets; a missed target is reported, not a failure."""
    out = []
    for name, table in report["sections"].get("latency", {}).items():
        root = table.get(1) if isinstance(table, dict) else None
        if root and root["kernel_ms"]:
            ratio = root["graph_ms"] / root["kernel_ms"]
            out.append({"goal": f"{name}: graph replay of the root pass within 10% of its kernel time",
                        "value": f"{root['graph_ms']:.3f} ms against {root['kernel_ms']:.3f} ms ({ratio - 1:+.0%})",
                        "met": ratio <= 1.10})
    for decoder, s in report["sections"].get("pipelined", {}).get("decoders", {}).items():
        out.append({"goal": f"{decoder}: host overhead under 1 ms per round",
                    "value": f"{s['median_host_ms']:.3f} ms", "met": s["median_host_ms"] < 1.0})
    return out


def run_section(name: str, fn, plan: Plan, report: Report, deadline: float, index: int) -> str:
    budget = Budget(plan.budgets[name], deadline)
    print(f"\n== {index}/{len(SECTIONS)} {name} (at most {budget.left():.0f} s) ==", flush=True)
    t0 = time.monotonic()
    try:
        result = fn(plan, budget)
    except OutOfTime as e:
        result = {"status": "out of time", "error": str(e)}
    except Exception as e:  # noqa: BLE001  recorded and printed in full; the later sections still run
        traceback.print_exc()
        result = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    free_memory()
    result = {"status": "passed", **result, "seconds": round(time.monotonic() - t0, 1)}
    report.section(name, result)
    print(f"-- {name}: {result['status']} in {result['seconds']} s", flush=True)
    return result["status"]


def free_memory() -> None:
    """Return what dropped models and runners held before the next one is built (8B in bf16: 16 GB)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def exit_status(statuses: list[str]) -> int:
    if any(s in ("out of time", "skipped") for s in statuses):
        return EXIT_OUT_OF_TIME
    return EXIT_FAILED if any(s != "passed" for s in statuses) else 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tests/gpu/check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--rehearse", action="store_true", help="every section on the CPU with tiny shapes")
    parser.add_argument("--out", type=Path, help="folder for check.json (default: runs/gpu-check-TIME)")
    parser.add_argument("--timeout", type=float, default=480.0, help="seconds for the whole check (default: 480)")
    parser.add_argument("--gpus", help="placement of the pipelined decodes (default: 0,1 with two GPUs, else 0)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    return args


def choose_plan(args: argparse.Namespace) -> Plan:
    if args.rehearse:
        return REHEARSAL
    return replace(Plan(), gpus=args.gpus or ("0,1" if torch.cuda.device_count() > 1 else "0"))


def stop_on_sigterm(signum, frame) -> None:
    """The outer timeout's SIGTERM unwinds like Ctrl-C, so the launcher and pytest are stopped too
    (they run in sessions of their own, out of reach of a signal to this process group)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    deadline = time.monotonic() + args.timeout
    if not args.rehearse:
        cuda = cuda_report()
        if not cuda.usable:  # stop at once: a CPU fallback would build 8B models for many minutes
            print(describe(cuda))
            print(cuda.message("the GPU check (--rehearse runs it on the CPU)"), file=sys.stderr)
            return EXIT_NO_CUDA
    plan = choose_plan(args)
    out = args.out or ROOT / "runs" / time.strftime(f"gpu-{'rehearsal' if args.rehearse else 'check'}-%Y%m%d-%H%M%S")
    report = Report(out / "check.json", plan)
    print(f"results: {report.path}")
    statuses = []
    for index, (name, fn) in enumerate(SECTIONS, 1):
        if time.monotonic() >= deadline:
            report.section(name, {"status": "skipped", "error": "the check's time was up"})
            statuses.append("skipped")
            continue
        try:
            statuses.append(run_section(name, fn, plan, report, deadline, index))
        except KeyboardInterrupt:
            report.section(name, {"status": "interrupted"})
            print(f"-- {name}: interrupted; results so far are in {report.path}", file=sys.stderr)
            return EXIT_OUT_OF_TIME
    report.data["goals"] = goals(report.data)
    report.data["status"] = dict(zip([n for n, _ in SECTIONS], statuses))
    report.save()
    print("\n== goals ==")
    for g in report.data["goals"]:
        print(f"  {'met ' if g['met'] else 'MISS'}  {g['goal']}: {g['value']}")
    print(f"\nsections: " + ", ".join(f"{n} {s}" for n, s in report.data["status"].items()))
    print(json.dumps(report.data, default=str))
    return exit_status(statuses)


if __name__ == "__main__":
    sys.exit(main())
