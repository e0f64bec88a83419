"""The launcher behind launch/pair.sh: drafter first, then target; both stop when either ends.

Options are parsed once here from the same dataclasses the processes use, checked, and forwarded: model
options to each side (--target / --drafter name the models), pool and run options to the target.
Children die with the launcher (PR_SET_PDEATHSIG), so no process outlives it, even after a SIGKILL.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from models.options import EMBEDDED, INT8_SUFFIX, ModelOptions
from pipeline.cli import add_options, from_options, to_argv
from pipeline.config import PoolConfig
from protocol.transport import check_endpoint, is_loopback, loopback_tcp_endpoint, private_ipc_endpoint

# The embedded default pair on the CPU: a smaller pool and shorter outputs, so that the whole default
# run takes about two minutes on two cores. Any --pool-* or --max-new-tokens option replaces these.
EMBEDDED_POOL = PoolConfig(topk=10, depth=4, expand=3)
EMBEDDED_MAX_NEW_TOKENS = 96
EMBEDDED_PROMPTS = 2  # the first built-in prompts
GRACE_SECONDS = 5.0  # how long a process may take to exit after its peer ended


def build_parser(mode: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch/pair.sh" + (" sweep" if mode == "sweep" else ""),
        description="Run the target and drafter processes as a pair. With no model options, the embedded "
                    f"default pair: target {EMBEDDED} (SmolLM2-135M-Instruct), drafter {EMBEDDED}{INT8_SUFFIX}.",
        epilog=f"Pool and output defaults: --pool-topk {PoolConfig().topk} --pool-depth {PoolConfig().depth} "
               f"--pool-expand {PoolConfig().expand} --max-new-tokens "
               f"{_run_cls(mode).__dataclass_fields__['max_new_tokens'].default}; "
               f"for the embedded pair on the CPU: {EMBEDDED_POOL.topk}, {EMBEDDED_POOL.depth}, "
               f"{EMBEDDED_POOL.expand}" + (f" and {EMBEDDED_MAX_NEW_TOKENS} new tokens." if mode == "decode" else "."))
    pair = parser.add_argument_group("Pair")
    pair.add_argument("--target", metavar="SPEC", help=ModelOptions.__dataclass_fields__["model"].metadata["help"])
    pair.add_argument("--drafter", metavar="SPEC", help="the drafter model, same forms as --target")
    pair.add_argument("--target-device", default="cpu", metavar="DEV", help="(default: cpu)")
    pair.add_argument("--drafter-device", default="cpu", metavar="DEV", help="(default: cpu)")
    pair.add_argument("--gpus", metavar="LIST", help="0,1: target on GPU 0, drafter on GPU 1; 0: both on GPU 0")
    pair.add_argument("--endpoint", metavar="ADDR",
                      help="ipc://PATH, tcp://HOST:PORT, or tcp for a free loopback port "
                           "(default: ipc in a private temporary directory)")
    add_options(parser, ModelOptions, skip=("model", "device"))
    add_options(parser, PoolConfig, prefix="pool-", defaults=dict.fromkeys(("topk", "depth", "expand")))
    add_options(parser, _run_cls(mode), defaults={"max_new_tokens": None})
    return parser


def plan(argv: list[str]) -> tuple[list[str], list[str], dict, dict, str, str | None, list[str]]:
    """Parse the launcher's options -> (drafter argv, target argv, drafter env, target env, endpoint,
    private directory to remove at exit, notes to print)."""
    mode = "sweep" if argv[:1] == ["sweep"] else "decode"
    argv = argv[1:] if mode == "sweep" else argv
    parser = build_parser(mode)
    ns = parser.parse_args(argv)
    notes = []
    embedded = ns.target is None and ns.drafter is None
    if embedded:
        ns.target, ns.drafter = EMBEDDED, EMBEDDED + INT8_SUFFIX
    elif ns.drafter is None and ns.target == "mock":
        ns.drafter = "mock"
    elif ns.drafter is None or ns.target is None:
        parser.error("--target and --drafter go together (or give neither for the embedded default pair)")
    pool_given = {k: getattr(ns, "pool_" + k) for k in ("topk", "depth", "expand")}
    if all(v is None for v in pool_given.values()) and embedded:
        pool = EMBEDDED_POOL
        notes.append(f"embedded default pair on the CPU: pool reduced to topk={pool.topk} depth={pool.depth} "
                     f"expand={pool.expand} (paper: 10, 8, 10); --pool-* options change it")
    else:
        # Through from_options, so that an invalid combination is a usage error naming the option.
        chosen = {k: getattr(PoolConfig(), k) if v is None else v for k, v in pool_given.items()}
        pool = from_options(parser, argparse.Namespace(**{"pool_" + k: v for k, v in chosen.items()}),
                            PoolConfig, prefix="pool-")
    if ns.max_new_tokens is None:
        if embedded and mode == "decode":
            ns.max_new_tokens = EMBEDDED_MAX_NEW_TOKENS
            notes.append(f"embedded default: {EMBEDDED_MAX_NEW_TOKENS} new tokens per decode; "
                         f"--max-new-tokens changes it")
        else:
            ns.max_new_tokens = _run_cls(mode).__dataclass_fields__["max_new_tokens"].default
    if mode == "decode" and embedded and not ns.prompt and not ns.prompts:
        from pipeline.prompts import BUILTIN

        ns.prompt = list(BUILTIN[:EMBEDDED_PROMPTS])
    devices = {"target": ns.target_device, "drafter": ns.drafter_device}
    env = {"target": {}, "drafter": {}}
    if ns.gpus is not None:
        gpus = [g.strip() for g in ns.gpus.split(",") if g.strip()]
        if len(gpus) not in (1, 2) or not all(g.isdigit() for g in gpus):
            parser.error(f"--gpus must be one or two GPU indices such as 0,1 or 0, got {ns.gpus!r}")
        for role, gpu in zip(("target", "drafter"), (gpus[0], gpus[-1])):
            env[role]["CUDA_VISIBLE_DEVICES"] = gpu
            devices[role] = "cuda:0"
    shared = {f.name: getattr(ns, f.name) for f in dataclasses.fields(ModelOptions)
              if f.name not in ("model", "device")}
    models = {}
    for role in ("target", "drafter"):
        models[role] = from_options(parser, argparse.Namespace(**shared, model=getattr(ns, role),
                                                               device=devices[role]), ModelOptions)
        env[role]["OMP_NUM_THREADS"] = str(max(models[role].cpu_threads))
    run_cls = _run_cls(mode)
    run = from_options(parser, ns, run_cls)
    private_dir = None
    if ns.endpoint is None:
        endpoint = private_ipc_endpoint()
        private_dir = os.path.dirname(endpoint[len("ipc://"):])
    elif ns.endpoint == "tcp":
        endpoint = loopback_tcp_endpoint()
    else:
        try:
            endpoint = check_endpoint(ns.endpoint)
        except ValueError as e:
            parser.error(str(e))
        if not is_loopback(endpoint):
            notes.append(f"the drafter binds {endpoint}, reachable beyond this machine")
    py = [sys.executable, "-P", "-m"]  # -P: the caller's folder (a models/, say) must not shadow our packages
    drafter = py + ["drafter_proc", *to_argv(models["drafter"]), "--endpoint", endpoint]
    target_module = ["timing", "sweep"] if mode == "sweep" else ["target_proc"]
    target = py + [*target_module, *to_argv(models["target"]), "--endpoint", endpoint,
                   *to_argv(pool, prefix="pool-"), *to_argv(run)]
    if mode == "sweep":  # the sweep's config.json records both models; only the launcher knows the drafter's
        launch = {"options": dataclasses.asdict(models["drafter"]), "env": env["drafter"]}
        target += ["--drafter-launch", json.dumps(launch)]
    return drafter, target, env["drafter"], env["target"], endpoint, private_dir, notes


def _run_cls(mode: str):
    if mode == "sweep":
        from timing.options import SweepOptions

        return SweepOptions
    from target_proc.options import RunOptions

    return RunOptions


def _die_with(parent: int):
    """A preexec_fn: the child gets SIGTERM when the launcher dies, however it dies."""
    def arm() -> None:
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the launcher died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return arm


def _status(returncode: int) -> int:
    """A child's return code as a shell exit status (128 + N for a child killed by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _stop(proc: subprocess.Popen, grace: float) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    drafter_cmd, target_cmd, drafter_env, target_env, endpoint, private_dir, notes = plan(argv)
    for note in notes:
        print(f"[launch] {note}", file=sys.stderr)
    procs: list[subprocess.Popen] = []

    stopped_by = []

    def on_signal(signum, _frame):
        stopped_by.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        drafter = subprocess.Popen(drafter_cmd, env={**os.environ, **drafter_env}, preexec_fn=_die_with(os.getpid()))
        procs.append(drafter)
        target = subprocess.Popen(target_cmd, env={**os.environ, **target_env}, preexec_fn=_die_with(os.getpid()))
        procs.append(target)
        while True:
            if target.poll() is not None:
                if target.returncode == 0:  # it asked the drafter to shut down: let it exit by itself
                    try:
                        drafter.wait(GRACE_SECONDS)
                    except subprocess.TimeoutExpired:
                        pass
                _stop(drafter, GRACE_SECONDS)
                return _status(target.returncode)
            if drafter.poll() is not None:
                # The target notices the closed connection and reports it; give it a moment to say so.
                try:
                    target.wait(GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    _stop(target, GRACE_SECONDS)
                if drafter.returncode == 0 and target.returncode == 0:
                    return 0  # the target asked the drafter to shut down, then took longer to exit itself
                print(f"[launch] the drafter exited with status {_status(drafter.returncode)}", file=sys.stderr)
                return _status(target.returncode) or _status(drafter.returncode) or 1
            time.sleep(0.05)
    except KeyboardInterrupt:
        return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)
    finally:
        for proc in reversed(procs):
            _stop(proc, GRACE_SECONDS)
        if private_dir:
            shutil.rmtree(private_dir, ignore_errors=True)
