"""The GPU check: environment, the GPU tests, graph/eager parity, per-pass latencies, pipelined decodes, a
pipelined pair with an EAGLE-3 head, recorded rounds.

Run it through tests/gpu/check.sh, which picks and prepares the interpreter and keeps the overall time:
  python -P -m tests.gpu.check [--rehearse] [--out DIR] [--timeout S] [--gpus 0|0,1]
The sections share the time: each gets the time left in proportion to its part (Plan.shares) among the
sections still to run, so a section that ends early leaves its time to the later ones. Those that use the
device in this process's stead (environment, parity, latency) each run in a child process of their own, so
that a crash, a sticky CUDA error or a hang ends that section only; the others start their own processes
(pytest, the launcher). DIR/check.json holds every section's figures as they are measured (a section cut by
a crash, a hang or the time keeps what it measured), and DIR/check.log the whole output. A failed section
does not stop the later ones, and the exit status reports it (1; 124 when out of time; 2 when CUDA is
unusable and not rehearsing). The output ends with one line per section.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from models.cuda_env import cuda_driver, cuda_report, describe
from models.hf import aligned_slots
from models.shapes import HEAD_SHAPES, SHAPES, random_model
from tests.gpu import children, eagle3_pair, passes, pipelined, recorded
from tests.gpu.children import child_env, child_seconds, run_reporting_child, write_result
from tests.gpu.section import Budget, OutOfTime, Section

ROOT = Path(__file__).resolve().parents[2]
EXIT_FAILED, EXIT_NO_CUDA, EXIT_OUT_OF_TIME = 1, 2, 124
FINISH = 5.0  # seconds kept from the sections for the goals and the summary
# Sections with two processes of the pair on one GPU, which a compute mode admitting one context refuses.
TWO_PROCESS = ("pipelined", "eagle-3 pair", "recorded rounds")
# Kineto tears CUPTI down after each profile by default on recent CUDA, and starting it again after a graph
# capture has crashed or hung: the profiler's children keep it up (a user's own setting wins).
CHILD_SETTINGS = {"TEARDOWN_CUPTI": "0"}


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
    head: str = "llama-3.1-8b"  # the EAGLE-3 pair's drafter: random:eagle3-HEAD (models.shapes.HEAD_SHAPES) over target
    head_decoders: tuple[str, ...] = ("draft", "root")  # EAGLE-3's rule, and a rule with a root pass
    gpus: str | None = None  # --gpus of the pipelined decodes; None: on the CPU
    capacity: int = 2048  # KV slots, the runtime's default --max-context
    context: int = 512  # committed tokens before each timed pass
    reps: int = 20
    max_new_tokens: int = 64
    prompts: tuple[str, ...] = ("Write a short poem about the sea at night.",
                                "Explain in three sentences why the sky is blue.")
    # Each section's part of the time: about the seconds it takes on one H200, a cold first load of the CUDA
    # libraries in the GPU tests' (the first kernels) included.
    shares: dict = field(default_factory=lambda: {"environment": 20, "gpu tests": 75, "parity": 45, "latency": 60,
                                                  "pipelined": 150, "eagle-3 pair": 90, "recorded rounds": 70})

    def __post_init__(self) -> None:
        if not self.shares or any(not seconds > 0 for seconds in self.shares.values()):
            raise ValueError(f"`shares` must give every section a positive part, got {self.shares}")
        if self.head not in HEAD_SHAPES:
            raise ValueError(f"`head` must be a random head's shape ({', '.join(HEAD_SHAPES)}), got {self.head!r}")


# The rehearsal's parts: about the seconds each took on an idle 2-core CPU.
REHEARSAL = Plan(device="cpu", parity_shapes=("tiny",), latency_shapes=("tiny", "tiny"), target="tiny",
                 drafter="tiny", head="tiny", capacity=512, context=64, reps=3, max_new_tokens=12,
                 prompts=Plan().prompts[:1],
                 shares={"environment": 10, "gpu tests": 10, "parity": 35, "latency": 15, "pipelined": 60,
                         "eagle-3 pair": 40, "recorded rounds": 45})
ISOLATED = ("environment", "parity", "latency")  # sections that use the device: each in a child process
TIMEOUT = {False: 490.0, True: 1080.0}  # default --timeout, by --rehearse: check.sh's window less its start-up


def share(shares: dict, name: str, to_run: list[str], left: float) -> float:
    """Seconds for section `name` out of the `left` for the sections `to_run` (name among them): its part
    of their parts."""
    return max(left, 0.0) * shares[name] / sum(shares[n] for n in to_run)


class Report:
    """The check's results, written to DIR/check.json (whole, atomically) each time a section's figures change."""

    def __init__(self, path: Path, plan: Plan) -> None:
        self.path = path
        self.data = {"plan": {k: getattr(plan, k) for k in plan.__dataclass_fields__},
                     "status": {}, "sections": {}, "goals": []}

    def section(self, name: str, result: dict) -> None:
        self.data["sections"][name] = result
        self.data["status"][name] = result.get("status")
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


# -- sections: each takes its Section and returns its results, with "status" unless it passed ---------

def environment(s: Section) -> dict:
    """The line that says what ran: GPU, driver, torch, CUDA, cuDNN, transformers, SDPA backend; and how long
    the first kernels took (loading the CUDA libraries, from a cold disk the first time)."""
    import transformers

    plan = s.plan
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
    s.keep(**env)
    env["first_kernels_s"] = round(passes.first_kernels(device, dtype), 2)
    sdpa = ", ".join(f"{v} at {k}" for k, v in env["sdpa"].items())
    print(f"{env['device']} ({env['devices']} GPU) | driver CUDA {env['driver_cuda']} | torch {env['torch']} | "
          f"CUDA {env['cuda']} | cuDNN {env['cudnn']} | transformers {env['transformers']} | SDPA {sdpa} "
          f"({plan.target} shape, {slots} slots) | Python {env['python']} | first kernels in "
          f"{env['first_kernels_s']} s")
    env["figure"] = f"{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, SDPA {env['sdpa']['1 rows']}"
    return env


def gpu_tests(s: Section) -> dict:
    """pytest on the tests marked gpu (they skip without CUDA), its output streamed as it comes."""
    cmd = [sys.executable, "-P", "-m", "pytest", "tests/gpu", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "-rs"]
    # the image's pytest plugins (benchmark, cov, xdist, timeout, ...) stay out: the tests need none
    proc = children.start(cmd, child_env(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
    last, cut = "", threading.Event()

    def stop() -> None:  # ends a hung pytest
        cut.set()
        children.stop_group(proc)

    timer = threading.Timer(max(s.budget.left(), 1), stop)
    timer.start()
    try:
        for line in proc.stdout:
            print(f"  | {line.rstrip()}")
            if line.strip():
                last = line.strip()
                s.keep(summary=last)
        status = proc.wait()
    finally:
        timer.cancel()
        children.stop_group(proc)
    if cut.is_set():
        return {"status": "out of time", "summary": last, "error": "pytest ran past its share of the time"}
    return {"status": "passed" if status == 0 else "failed", "returncode": status, "summary": last,
            "figure": last}


def parity(s: Section) -> dict:
    """Graph replay against eager rows, per model shape and dtype, at a context in each span of the ladder;
    a captured graph that no pass replayed fails too."""
    plan, results, failed = s.plan, {}, []
    for shape in plan.parity_shapes:
        for dtype_name in plan.parity_dtypes:
            s.budget.check(f"parity of {shape} {dtype_name}")
            dtype = getattr(torch, dtype_name)
            model = random_model(shape, plan.device, dtype)
            pair = passes.runner_pair(model, plan.capacity, min(plan.context, 128))
            gaps, unreplayed = passes.parity(pair, s.budget)
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
            s.keep(different=failed, **results)
            del model, pair
            free_memory()
    worst = max(results, key=lambda k: results[k]["worst_gap"], default=None)
    figure = (f"largest gap {results[worst]['worst_gap']:.1e} ({worst}, {results[worst]['worst_pass']})"
              if worst else "nothing compared")
    return {"status": "failed" if failed else "passed", "different": failed, **results,
            "figure": figure + (f"; DIFFERENT: {', '.join(failed)}" if failed else "")}


def latency(s: Section) -> dict:
    """Median ms per pass, eager and graph replay (over the span covering the context, and over the whole
    cache), then the eager passes' kernel times, for each shape: each figure kept as soon as it is measured,
    and the profiler last, so that a profiler that fails after the captures costs its own column only."""
    plan, tables, pairs = s.plan, {}, {}
    passes.start_profiler(torch.device(plan.device))  # before any graph is captured in this process
    for role, shape in zip(("drafter", "target"), plan.latency_shapes):
        s.budget.check(f"the {role}'s latencies")
        name = f"{role} {shape}"
        pairs[name] = passes.runner_pair(random_model(shape, plan.device, torch.bfloat16), plan.capacity, plan.context)
        tables[name] = {}
        print(f"\n  {name}, bf16: median ms per pass after {plan.context} tokens, {aligned_slots(plan.capacity)} "
              f"cache slots (spans {', '.join(map(str, pairs[name]['graph'].runner.spans))}), {plan.reps} reps")
        print(f"  {'rows':>6}{'eager':>10}{'graph':>10}{'whole':>10}")

        def timed(rows: int, times: dict, name: str = name) -> None:
            tables[name][str(rows)] = {**times, "kernel_ms": None}
            print(f"  {rows:>6}{times['eager_ms']:10.3f}{times['graph_ms']:10.3f}{times['whole_ms']:10.3f}")
            s.keep(**tables)

        passes.pass_times(pairs[name], plan.latency_rows, plan.reps, s.budget, timed)
    for name, pair in pairs.items():
        def profiled(rows: int, ms: float | None, name: str = name) -> None:
            tables[name][str(rows)]["kernel_ms"] = ms
            s.keep(**tables)

        passes.kernel_times(pair, plan.latency_rows, s.budget, profiled)
        print_latency_table(name, tables[name])
    return {**tables, "figure": latency_figure(tables)}


def print_latency_table(name: str, table: dict) -> None:
    print(f"\n  {name}: ms per pass, and the eager pass's kernels by the profiler")
    print(f"  {'rows':>6}{'eager':>10}{'graph':>10}{'whole':>10}{'kernels':>10}{'graph/kernels':>15}")
    for rows, t in table.items():
        kernels, ratio = (f"{t['kernel_ms']:10.3f}", f"{t['graph_ms'] / t['kernel_ms']:15.2f}") \
            if t["kernel_ms"] else (f"{'-':>10}", f"{'-':>15}")
        print(f"  {rows:>6}{t['eager_ms']:10.3f}{t['graph_ms']:10.3f}{t['whole_ms']:10.3f}{kernels}{ratio}")


def latency_figure(tables: dict) -> str | None:
    """The target's root pass, or the last shape measured."""
    if not tables:
        return None
    name, table = list(tables.items())[-1]
    root = table.get("1")
    if root is None:
        return None
    return (f"{name} root pass: graph {root['graph_ms']:.3f} ms (whole cache {root['whole_ms']:.3f}), "
            f"eager {root['eager_ms']:.3f} ms" + (f", kernels {root['kernel_ms']:.3f} ms" if root["kernel_ms"] else ""))


SECTIONS = (("environment", environment), ("gpu tests", gpu_tests), ("parity", parity), ("latency", latency),
            ("pipelined", pipelined.section), ("eagle-3 pair", eagle3_pair.section),
            ("recorded rounds", recorded.section))


# -- goals, running, main ---------------------------------------------------------------------------

def goals(report: dict) -> list[dict]:
    """The figures held against the runtime's targets; a missed target is reported, not a failure."""
    out = []
    for name, table in report["sections"].get("latency", {}).items():
        root = table.get("1") if isinstance(table, dict) else None
        if root and root.get("kernel_ms"):
            ratio = root["graph_ms"] / root["kernel_ms"]
            out.append({"goal": f"{name}: graph replay of the root pass within 10% of its kernel time",
                        "value": f"{root['graph_ms']:.3f} ms against {root['kernel_ms']:.3f} ms ({ratio - 1:+.0%})",
                        "met": ratio <= 1.10})
    for decoder, d in report["sections"].get("pipelined", {}).get("decoders", {}).items():
        if d.get("median_host_ms") is not None:
            out.append({"goal": f"{decoder}: host overhead under 1 ms per round",
                        "value": f"{d['median_host_ms']:.3f} ms", "met": d["median_host_ms"] < 1.0})
    return out


def run_section(fn: Callable[[Section], dict], s: Section) -> dict:
    """The section's results over the figures it kept, its failure recorded rather than raised; "status"
    set, "passed" by default."""
    try:
        result = {**s.kept, **fn(s)}
        free_memory()
    except OutOfTime as e:
        result = {**s.kept, "status": "out of time", "error": str(e)}
    except Exception as e:  # noqa: BLE001  recorded and printed in full; the later sections still run
        traceback.print_exc()
        result = {**s.kept, "status": "error", "error": f"{type(e).__name__}: {e}"}
    return {"status": "passed", **result}


def section_command(name: str, plan: Plan, seconds: float, rehearse: bool, result_path: Path) -> list[str]:
    """The child process that runs one section: this module with --section."""
    return ([sys.executable, "-P", "-m", "tests.gpu.check", "--section", name, "--result", str(result_path),
             "--timeout", f"{max(seconds, 1):.0f}"] + (["--rehearse"] if rehearse else ["--gpus", plan.gpus or "0"]))


def run_isolated(s: Section, rehearse: bool) -> dict:
    """run_section in a child process of its own, told to end some seconds before the section's time is up
    and stopped then; the figures it keeps reach the report as it writes them."""
    seconds = s.budget.left()
    result_path = s.out / f".{s.name.replace(' ', '-')}.json"
    cmd = section_command(s.name, s.plan, child_seconds(seconds), rehearse, result_path)
    return run_reporting_child(cmd, seconds, result_path, on_update=s.save, env=child_env(**CHILD_SETTINGS))


def run_child(args: argparse.Namespace) -> int:
    """One section in this process (the child side of run_isolated): its figures to --result as it keeps
    them, then its result, each written whole."""
    plan = choose_plan(args)
    s = Section(args.section, plan, Budget(args.timeout, time.monotonic() + args.timeout), args.result.parent,
                save=lambda figures: write_result(args.result, figures))
    write_result(args.result, run_section(dict(SECTIONS)[args.section], s))
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
    fewer than the check's concurrent CUDA contexts (target and drafter on one GPU)."""
    if modes is None:
        return ["compute mode: unknown (nvidia-smi is missing or failed)"]
    lines = [f"compute mode: GPU {index} {name}: {mode}" for index, name, mode in modes]
    for index, _, mode in modes:
        if not default_mode(mode):
            lines.append(f"WARNING: GPU {index} is in {mode} mode, which admits at most one CUDA context: the "
                         f"sections with both processes of the pair on it are not run (as root: "
                         f"nvidia-smi -i {index} -c DEFAULT)")
    return lines


def default_mode(mode: str) -> bool:
    return mode.replace("_", " ").strip().lower() == "default"


def two_process_block(modes: list[tuple[str, str, str]] | None, gpus: str | None) -> str | None:
    """Why the sections that put both processes of the pair on one GPU cannot run there (its compute mode
    admits one CUDA context), or None."""
    used = {g.strip() for g in (gpus or "").split(",") if g.strip()}
    if modes is None or len(used) != 1:
        return None
    for index, _, mode in modes:
        if index in used and not default_mode(mode):
            return (f"GPU {index} is in {mode} compute mode, which admits one CUDA context: the target and the "
                    f"drafter cannot share it (as root: nvidia-smi -i {index} -c DEFAULT; or --gpus on two GPUs)")
    return None


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
    """0 when every section passed or could not run on these GPUs ("not run"), 124 when one was cut by
    the time, else 1."""
    if any(s in ("out of time", "skipped", "interrupted") for s in statuses):
        return EXIT_OUT_OF_TIME
    return EXIT_FAILED if any(s not in ("passed", "not run") for s in statuses) else 0


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tests/gpu/check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--rehearse", action="store_true", help="every section on the CPU with tiny shapes")
    parser.add_argument("--out", type=Path, help="folder for check.json and check.log (default: runs/gpu-check-TIME)")
    parser.add_argument("--timeout", type=float, help=f"seconds for the whole check (default: {TIMEOUT[False]:.0f}, "
                                                      f"{TIMEOUT[True]:.0f} when rehearsing)")
    parser.add_argument("--gpus", help="placement of the pipelined decodes (default: 0,1 with two GPUs, else 0)")
    parser.add_argument("--section", choices=ISOLATED, help=argparse.SUPPRESS)  # a child of run_isolated
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.timeout = TIMEOUT[args.rehearse] if args.timeout is None else args.timeout
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout:g}")
    if (args.section is None) != (args.result is None):
        parser.error("--section and --result go together")
    return args


def choose_plan(args: argparse.Namespace) -> Plan:
    if args.rehearse:
        return REHEARSAL
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
    # appended to: check.sh has written the lines of its start-up there
    with open(out / "check.log", "a", encoding="utf-8") as log:
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
    report.data.update(compute_modes=modes, timeout_s=args.timeout)
    print(f"results: {report.path}, log: {out / 'check.log'}; the sections share {args.timeout:.0f} s")
    blocked = {name: why for name in TWO_PROCESS if (why := two_process_block(modes, plan.gpus))}
    for name, _ in SECTIONS:  # so that a check stopped however abruptly still names every section
        report.section(name, {"status": "pending"})
    interrupted = False
    try:
        for index, (name, fn) in enumerate(SECTIONS, 1):
            to_run = [n for n, _ in SECTIONS[index - 1:] if n not in blocked]
            result = run_one(index, name, fn, to_run, blocked, plan, report, args, deadline)
            report.section(name, result)
            print(f"-- {name}: {result['status']}" + (f" in {result['seconds']} s" if "seconds" in result else ""),
                  flush=True)
    except KeyboardInterrupt:
        interrupted = True
        interrupt(report)
    return finish(report, out, interrupted)


def run_one(index: int, name: str, fn, to_run: list[str], blocked: dict, plan: Plan, report: Report,
            args: argparse.Namespace, deadline: float) -> dict:
    """One section's result: run in this process or in a child, or why it was not."""
    if name in blocked:
        print(f"\n== {index}/{len(SECTIONS)} {name}: not run: {blocked[name]}", flush=True)
        return {"status": "not run", "error": blocked[name]}
    left = deadline - FINISH - time.monotonic()
    if left <= 0:
        return {"status": "skipped", "error": "the check's time was up"}
    seconds = share(plan.shares, name, to_run, left)
    print(f"\n== {index}/{len(SECTIONS)} {name} (at most {seconds:.0f} s) ==", flush=True)
    s = Section(name, plan, Budget(seconds, deadline - FINISH), report.path.parent, dict(report.data["sections"]),
                save=lambda figures: report.section(name, figures))
    t0 = time.monotonic()
    result = run_isolated(s, args.rehearse) if name in ISOLATED else run_section(fn, s)
    return {**result, "budget_s": round(seconds, 1), "seconds": round(time.monotonic() - t0, 1)}


def interrupt(report: Report) -> None:
    """The running section marked interrupted over the figures it kept; the ones after it, skipped."""
    names = [n for n, _ in SECTIONS]
    running = next((n for n in names if report.data["status"][n] in ("pending", "running")), None)
    if running is None:
        return
    report.section(running, {**report.data["sections"].get(running, {}), "status": "interrupted"})
    print(f"-- {running}: interrupted", file=sys.stderr)
    for name in names[names.index(running) + 1:]:
        report.section(name, {"status": "skipped", "error": "the check was interrupted"})


def finish(report: Report, out: Path, interrupted: bool) -> int:
    """Goals, the summary and the exit status."""
    report.data["goals"] = goals(report.data)
    report.save()
    print("\n== goals ==")
    for g in report.data["goals"]:
        print(f"  {'met ' if g['met'] else 'MISS'}  {g['goal']}: {g['value']}")
    print(f"\n== summary: {out / 'check.json'}, {out / 'check.log'} ==")
    print("\n".join(summary_lines(report.data)), flush=True)
    return EXIT_OUT_OF_TIME if interrupted else exit_status(list(report.data["status"].values()))


if __name__ == "__main__":
    sys.exit(main())
