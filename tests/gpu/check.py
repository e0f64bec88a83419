"""The GPU check: environment, the GPU tests, graph/eager parity, per-pass latencies, pipelined decodes.

Run it through tests/gpu/check.sh, which picks and prepares the interpreter and keeps the overall time:
  python -P -m tests.gpu.check [--rehearse] [--out DIR] [--timeout S] [--gpus 0|0,1]
The sections that use the device (environment, parity, latency) each run in a child process of their
own, so that a crash, a sticky CUDA error or a hang ends that section only; the others start their own
processes (pytest, the launcher). DIR/check.json is written after every section and DIR/check.log holds
the whole output. A failed section does not stop the later ones, and the exit status reports it (1; 124
when out of time; 2 when CUDA is unusable and not rehearsing). The output ends with one line per section.
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
from tests.gpu import passes, pipelined, recorded
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
                                                   "latency": 120, "pipelined": 210, "recorded rounds": 60})


# The rehearsal's budgets are for an idle 2-core machine; scaled_budgets stretches them under load.
REHEARSAL = Plan(device="cpu", parity_shapes=("tiny",), latency_shapes=("tiny", "tiny"), target="tiny",
                 drafter="tiny", capacity=512, context=64, reps=3, max_new_tokens=12, prompts=Plan().prompts[:1],
                 budgets={"environment": 30, "gpu tests": 60, "parity": 30, "latency": 30, "pipelined": 90,
                          "recorded rounds": 90})
ISOLATED = ("environment", "parity", "latency")  # sections that use the device: each in a child process
CHILD_GRACE = 20.0  # seconds a section's child gets past its budget to stop by itself and report


def scaled_budgets(budgets: dict, load: float, cores: int) -> tuple[dict, float]:
    """The budgets stretched by the CPU's load per core, when above 1 (a shared machine); and the factor."""
    factor = max(1.0, load / max(cores, 1))
    return {name: round(seconds * factor) for name, seconds in budgets.items()}, factor


class Report:
    """The check's results, written to DIR/check.json (whole, atomically) after every section."""

    def __init__(self, path: Path, plan: Plan) -> None:
        self.path = path
        self.data = {"plan": {k: getattr(plan, k) for k in plan.__dataclass_fields__},
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
    env["figure"] = f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, SDPA {env['sdpa']['1 rows']}"
    return env


def gpu_tests(plan: Plan, budget: Budget) -> dict:
    """pytest on the tests marked gpu (they skip without CUDA), its output streamed as it comes."""
    cmd = [sys.executable, "-P", "-m", "pytest", "tests/gpu", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "-rs"]
    # the image's pytest plugins (benchmark, cov, xdist, timeout, ...) stay out: the tests need none
    env = {**pipelined.child_env(), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
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
    return {"status": "passed" if status == 0 else "failed", "returncode": status, "summary": last,
            "figure": last}


def parity(plan: Plan, budget: Budget) -> dict:
    """Graph replay against eager rows, per model shape and dtype, at a context in each span of the ladder;
    a captured graph that no pass replayed fails too."""
    results, failed = {}, []
    for shape in plan.parity_shapes:
        for dtype_name in plan.parity_dtypes:
            budget.check(f"parity of {shape} {dtype_name}")
            dtype = getattr(torch, dtype_name)
            model = random_model(shape, plan.device, dtype)
            pair = passes.runner_pair(model, plan.capacity, min(plan.context, 128))
            gaps, unreplayed = passes.parity(pair, budget)
            worst = max(gaps, key=gaps.get)
            ok = gaps[worst] <= passes.TOLERANCE[dtype] and not unreplayed
            results[f"{shape} {dtype_name}"] = {"graphs": len(pair["graph"].runner.graphs), "worst_pass": worst,
                                                "worst_gap": gaps[worst], "ok": ok, "gaps": gaps,
                                                "unreplayed": sorted(map(list, unreplayed))}
            print(f"  {shape:<14}{dtype_name:<10}{len(pair['graph'].runner.graphs):3d} graphs, {len(gaps)} passes, "
                  f"largest gap {gaps[worst]:.2e} ({worst}; equal up to {passes.TOLERANCE[dtype]:.0e})"
                  + (f", {len(unreplayed)} graphs never replayed" if unreplayed else "")
                  + f": {'ok' if ok else 'DIFFERENT'}")
            failed += [] if ok else [f"{shape} {dtype_name}"]
            del model, pair
            free_memory()
    worst = max(results, key=lambda k: results[k]["worst_gap"], default=None)
    figure = (f"largest gap {results[worst]['worst_gap']:.1e} ({worst}, {results[worst]['worst_pass']})"
              if worst else "nothing compared")
    return {"status": "failed" if failed else "passed", "different": failed, **results,
            "figure": figure + (f"; DIFFERENT: {', '.join(failed)}" if failed else "")}


def latency(plan: Plan, budget: Budget) -> dict:
    """Median ms per pass, eager and graph replay (over the span covering the context, and over the whole
    cache), and the eager pass's kernel time, for each shape."""
    results = {}
    dtype = torch.bfloat16
    passes.start_profiler(torch.device(plan.device))  # before any graph is captured in this process
    for role, shape in zip(("drafter", "target"), plan.latency_shapes):
        budget.check(f"the {role}'s latencies")
        model = random_model(shape, plan.device, dtype)
        pair = passes.runner_pair(model, plan.capacity, plan.context)
        table = {str(rows): t for rows, t in passes.latencies(pair, plan.latency_rows, plan.reps, budget).items()}
        results[f"{role} {shape}"] = table
        spans = pair["graph"].runner.spans
        print(f"\n  {role} {shape}, bf16: median ms per pass after {plan.context} tokens, "
              f"{aligned_slots(plan.capacity)} cache slots (spans {', '.join(map(str, spans))}), {plan.reps} reps")
        print(f"  {'rows':>6}{'eager':>10}{'graph':>10}{'whole':>10}{'kernels':>10}{'graph/kernels':>15}")
        for rows, t in table.items():
            kernels, ratio = (f"{t['kernel_ms']:10.3f}", f"{t['graph_ms'] / t['kernel_ms']:15.2f}") \
                if t["kernel_ms"] else (f"{'-':>10}", f"{'-':>15}")
            print(f"  {rows:>6}{t['eager_ms']:10.3f}{t['graph_ms']:10.3f}{t['whole_ms']:10.3f}{kernels}{ratio}")
        del model, pair
        free_memory()
    name, table = list(results.items())[-1]
    root = table.get("1")
    results["figure"] = (f"{name} root pass: graph {root['graph_ms']:.3f} ms (whole cache {root['whole_ms']:.3f}), "
                         f"eager {root['eager_ms']:.3f} ms"
                         + (f", kernels {root['kernel_ms']:.3f} ms" if root["kernel_ms"] else "")) if root else None
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
    fastest = max(summary, key=lambda d: summary[d]["tok_per_s"], default=None)
    figure = (f"fastest {fastest} {summary[fastest]['tok_per_s']:.1f} tok/s" if fastest else "no decode")
    if differ is not None:
        figure += f"; {len(differ)} outputs differ" if differ else "; outputs with and without graphs equal"
    return {"status": status, "gpus": plan.gpus, "shared_gpu": shared, "note": SHARED_NOTE if shared else None,
            "decoders": summary, "outputs_differ": differ, "figure": figure}


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


def recorded_rounds(plan: Plan, budget: Budget) -> dict:
    """Decodes recorded at the paper's pool (a 71-row measurement pass each round), then the values program
    on them; the recording decoder must agree with its values. Both processes run the drafter's shape: the
    section checks the path, not the pair's speed."""
    budget.check("the recorded rounds")
    result = recorded.run(plan.drafter, plan.drafter, plan.gpus, plan.prompts[:1], plan.max_new_tokens, budget.left())
    agree = result.get("agreement") or []
    figure = (f"{result['rounds']} rounds, realized {agree[0]['realized_per_round']:.2f} against value "
              f"{agree[0]['value_per_round']:.2f}" if agree else "no recorded round")
    return {**result, "figure": figure}


SECTIONS = (("environment", environment), ("gpu tests", gpu_tests), ("parity", parity), ("latency", latency),
            ("pipelined", pipelined_decodes), ("recorded rounds", recorded_rounds))


# -- goals, running, main ---------------------------------------------------------------------------

def goals(report: dict) -> list[dict]:
    """The figures held against the runtime's targets; a missed target is reported, not a failure."""
    out = []
    for name, table in report["sections"].get("latency", {}).items():
        root = table.get("1") if isinstance(table, dict) else None
        if root and root["kernel_ms"]:
            ratio = root["graph_ms"] / root["kernel_ms"]
            out.append({"goal": f"{name}: graph replay of the root pass within 10% of its kernel time",
                        "value": f"{root['graph_ms']:.3f} ms against {root['kernel_ms']:.3f} ms ({ratio - 1:+.0%})",
                        "met": ratio <= 1.10})
    for decoder, s in report["sections"].get("pipelined", {}).get("decoders", {}).items():
        out.append({"goal": f"{decoder}: host overhead under 1 ms per round",
                    "value": f"{s['median_host_ms']:.3f} ms", "met": s["median_host_ms"] < 1.0})
    return out


def run_section(name: str, fn, plan: Plan, deadline: float) -> dict:
    """The section's results, its failure recorded rather than raised; "status" set, "passed" by default."""
    budget = Budget(plan.budgets[name], deadline)
    try:
        result = fn(plan, budget)
        free_memory()
    except OutOfTime as e:
        result = {"status": "out of time", "error": str(e)}
    except Exception as e:  # noqa: BLE001  recorded and printed in full; the later sections still run
        traceback.print_exc()
        result = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    return {"status": "passed", **result}


def section_command(name: str, plan: Plan, seconds: float, rehearse: bool, result_path: Path) -> list[str]:
    """The child process that runs one section: this module with --section."""
    return ([sys.executable, "-P", "-m", "tests.gpu.check", "--section", name, "--result", str(result_path),
             "--timeout", f"{max(seconds, 1):.0f}"] + (["--rehearse"] if rehearse else ["--gpus", plan.gpus or "0"]))


def run_isolated(name: str, plan: Plan, deadline: float, rehearse: bool, result_path: Path) -> dict:
    """run_section in a child process of its own."""
    seconds = Budget(plan.budgets[name], deadline).left()
    return run_reporting_child(section_command(name, plan, seconds, rehearse, result_path), seconds, result_path)


def run_reporting_child(cmd: list[str], seconds: float, result_path: Path, grace: float = CHILD_GRACE) -> dict:
    """The result a child process writes to result_path (JSON), its output streamed as it comes.

    A child that dies first (a segfault, an abort after a CUDA error) or runs past `seconds` and a grace
    (a hang) is reported as such; its process group is stopped in any case.
    """
    result_path.unlink(missing_ok=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=pipelined.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    hung = threading.Event()

    def stop() -> None:
        hung.set()
        pipelined.stop_group(proc)

    timer = threading.Timer(max(seconds, 1) + grace, stop)
    timer.start()
    try:
        for line in proc.stdout:
            print(line.rstrip("\n"))
        code = proc.wait()
    finally:
        timer.cancel()
        pipelined.stop_group(proc)
    if result_path.exists():
        result = json.loads(result_path.read_text(encoding="utf-8"))
        result_path.unlink()  # the report holds it: DIR keeps check.json and check.log alone
        return result
    if hung.is_set():
        return {"status": "out of time",
                "error": f"its process ran past {max(seconds, 1) + grace:.0f} s and was stopped"}
    return {"status": "crashed", "error": f"its process {died(code)} before reporting"}


def died(code: int) -> str:
    """How a child process ended, from its return code: 'was killed by SIGSEGV', 'exited with status 1'."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def run_child(args: argparse.Namespace) -> int:
    """One section in this process (the child side of run_isolated): its result to --result, atomically."""
    plan = choose_plan(args)
    plan = replace(plan, budgets={**plan.budgets, args.section: args.timeout})
    result = run_section(args.section, dict(SECTIONS)[args.section], plan, time.monotonic() + args.timeout)
    tmp = args.result.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, default=str), encoding="utf-8")
    os.replace(tmp, args.result)
    return 0


def free_memory() -> None:
    """Return what dropped models and runners held before the next one is built (8B in bf16: 16 GB)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def compute_modes() -> list[tuple[str, str, str]] | None:
    """(index, name, compute mode) of each GPU, from nvidia-smi (which creates no CUDA context); None
    without nvidia-smi or when it fails."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,compute_mode", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_compute_modes(done.stdout)


def parse_compute_modes(text: str) -> list[tuple[str, str, str]]:
    return [tuple(part.strip() for part in line.split(",", 2)) for line in text.splitlines() if line.count(",") >= 2]


def compute_mode_lines(modes: list[tuple[str, str, str]] | None) -> list[str]:
    """What to print about the GPUs' compute modes: one line each, and a warning for a mode that admits
    fewer than the check's concurrent CUDA contexts (its pytest child, then target and drafter on GPU 0)."""
    if modes is None:
        return ["compute mode: unknown (nvidia-smi is missing or failed)"]
    lines = [f"compute mode: GPU {index} {name}: {mode}" for index, name, mode in modes]
    for index, _, mode in modes:
        if mode.replace("_", " ").lower() != "default":
            lines.append(f"WARNING: GPU {index} is in {mode} mode, which admits at most one CUDA context: the "
                         f"pipelined decodes with both processes on one GPU will fail to create theirs "
                         f"(as root: nvidia-smi -i {index} -c DEFAULT)")
    return lines


class Tee:
    """A text stream that writes to the console's stream and to the log."""

    def __init__(self, stream, log) -> None:
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.log.write(text)
        self.log.flush()
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()
        self.log.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def summary_lines(report: dict) -> list[str]:
    """One line per section: status, time, its figure or its error."""
    lines = []
    for name, r in report["sections"].items():
        said = r.get("figure") or r.get("error") or r.get("summary") or ""
        seconds = f"{r['seconds']:6.1f} s" if "seconds" in r else f"{'-':>8}"
        lines.append(f"  {name:<16}{r['status']:<13}{seconds}  {said}"[:200])
    return lines


def exit_status(statuses: list[str]) -> int:
    if any(s in ("out of time", "skipped") for s in statuses):
        return EXIT_OUT_OF_TIME
    return EXIT_FAILED if any(s != "passed" for s in statuses) else 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tests/gpu/check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--rehearse", action="store_true", help="every section on the CPU with tiny shapes")
    parser.add_argument("--out", type=Path, help="folder for check.json and check.log (default: runs/gpu-check-TIME)")
    parser.add_argument("--timeout", type=float, default=480.0, help="seconds for the whole check (default: 480)")
    parser.add_argument("--gpus", help="placement of the pipelined decodes (default: 0,1 with two GPUs, else 0)")
    parser.add_argument("--section", choices=ISOLATED, help=argparse.SUPPRESS)  # a child of run_isolated
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    if (args.section is None) != (args.result is None):
        parser.error("--section and --result go together")
    return args


def choose_plan(args: argparse.Namespace) -> Plan:
    if args.rehearse:
        budgets, _ = scaled_budgets(REHEARSAL.budgets, os.getloadavg()[0], os.cpu_count() or 1)
        return replace(REHEARSAL, budgets=budgets)
    return replace(Plan(), gpus=args.gpus or ("0,1" if torch.cuda.device_count() > 1 else "0"))


def stop_on_sigterm(signum, frame) -> None:
    """The outer timeout's SIGTERM unwinds like Ctrl-C, so the launcher, pytest and a section's child are
    stopped too (they run in sessions of their own, out of reach of a signal to this process group)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    if args.section:
        return run_child(args)
    deadline = time.monotonic() + args.timeout
    if not args.rehearse:
        cuda = cuda_report()
        if not cuda.usable:  # stop at once: a CPU fallback would build 8B models for many minutes
            print(describe(cuda))
            print(cuda.message("the GPU check (--rehearse runs it on the CPU)"), file=sys.stderr)
            return EXIT_NO_CUDA
    out = args.out or ROOT / "runs" / time.strftime(f"gpu-{'rehearsal' if args.rehearse else 'check'}-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "check.log", "w", encoding="utf-8") as log:
        sys.stdout, sys.stderr = Tee(sys.stdout, log), Tee(sys.stderr, log)
        try:
            return check(args, out, deadline)
        finally:
            sys.stdout, sys.stderr = sys.stdout.stream, sys.stderr.stream


def check(args: argparse.Namespace, out: Path, deadline: float) -> int:
    """Every section in turn; the report is completed and saved however the sections end."""
    modes = None if args.rehearse else compute_modes()
    for line in ["compute mode: none (rehearsal on the CPU)"] if args.rehearse else compute_mode_lines(modes):
        print(line, flush=True)
    plan = choose_plan(args)
    report = Report(out / "check.json", plan)
    report.data["compute_modes"] = modes
    print(f"results: {report.path}, log: {out / 'check.log'}")
    if args.rehearse and plan.budgets != REHEARSAL.budgets:
        factor = plan.budgets["pipelined"] / REHEARSAL.budgets["pipelined"]
        print(f"section budgets x{factor:.1f} for this CPU's load ({os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    statuses, interrupted = {}, False
    try:
        for index, (name, fn) in enumerate(SECTIONS, 1):
            if time.monotonic() >= deadline:
                report.section(name, {"status": "skipped", "error": "the check's time was up"})
                statuses[name] = "skipped"
                continue
            seconds = Budget(plan.budgets[name], deadline).left()
            print(f"\n== {index}/{len(SECTIONS)} {name} (at most {seconds:.0f} s) ==", flush=True)
            t0 = time.monotonic()
            if name in ISOLATED:
                result = run_isolated(name, plan, deadline, args.rehearse, out / f".{name}.json")
            else:
                result = run_section(name, fn, plan, deadline)
            result = {**result, "seconds": round(time.monotonic() - t0, 1)}
            report.section(name, result)
            statuses[name] = result["status"]
            print(f"-- {name}: {result['status']} in {result['seconds']} s", flush=True)
    except KeyboardInterrupt:
        interrupted = True
        name = next((n for n, _ in SECTIONS if n not in statuses), None)
        if name is not None:
            report.section(name, {"status": "interrupted"})
            statuses[name] = "interrupted"
            print(f"-- {name}: interrupted", file=sys.stderr)
    report.data["goals"] = goals(report.data)
    report.data["status"] = statuses
    report.save()
    print("\n== goals ==")
    for g in report.data["goals"]:
        print(f"  {'met ' if g['met'] else 'MISS'}  {g['goal']}: {g['value']}")
    print(f"\n== summary: {out / 'check.json'}, {out / 'check.log'} ==")
    print("\n".join(summary_lines(report.data)), flush=True)
    return EXIT_OUT_OF_TIME if interrupted else exit_status(list(statuses.values()))


if __name__ == "__main__":
    sys.exit(main())
