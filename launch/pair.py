"""The launcher behind launch/pair.sh: drafter first, then target; both stop when either ends.

    launch/pair.sh [options]               decode prompts with every requested decoder
    launch/pair.sh sweep [options]         a timing sweep over decoders, temperatures and budgets
    launch/pair.sh report|matched|export|values ARGS
                                           the timing programs over finished sweeps (python -m timing ...)
    launch/pair.sh drafter [options]       a drafter alone, serving target after target (a second host)
    launch/pair.sh keys [options]          print this host's CURVE public key; authorize a target's key
    launch/pair.sh pool [options]          print the pool a drafter grows after raw token ids
    launch/pair.sh train-head [options]    train an EAGLE-3 head for a target (resumable)

Options are parsed and checked once here, from the dataclasses the processes use, then forwarded; a usage
error names the launcher's flag and no process starts. Children die with the launcher (launch.children).
Endpoints other than the default private ipc carry CURVE (docs/security.md)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import import_module

from evaluation.paths import output_dir
from evaluation.prompts import select
from launch.children import GRACE_SECONDS, PY, Children, drafter_command, status, stop_process
from models.memory import host_free_bytes
from models.kv_plan import planned_kv_bytes
from models.present import check_present
from models.options import (DEFAULT_DRAFTER, EMBEDDED, EMBEDDED_LOOKUP, EMBEDDED_POOL, ModelOptions, drafted_for,
                            embedded_pool, for_target)
from pipeline.config import InputError, PoolConfig
from pipeline.settings import DecodeConfig
from programs.cli import Parser, add_log_level, add_options, args_of, flags_of, from_options, to_argv
from programs.options import ConnectOptions, KeyOptions, RemoteOptions, RunOptions
from programs.pool_program import chosen_pool
from protocol.keys import key_dir, own_keys
from protocol.transport import (check_endpoint, endpoint_in_use, is_loopback, loopback_tcp_endpoint,
                                private_ipc_endpoint, remove_stale_private_dirs)
from timing import PROG_ENV
from timing.options import SweepOptions, sweep_target

# The embedded default pair on the CPU: a smaller pool (models.options.embedded_pool) and shorter outputs,
# so that the whole default run takes about a minute on two cores. --pool-* and --max-new-tokens replace them.
# Every built-in prompt (evaluation.prompts.BUILTIN, as many as an interval needs) at 64 new tokens each.
EMBEDDED_MAX_NEW_TOKENS = 64
TIMING_ROUTES = ("report", "matched", "export", "values")  # run as `python -m timing ROUTE ...`
SWEEP_ABOUT = ("Run a timing sweep with its own drafter: every prompt with every decoder, temperature and budget "
               "of the grid, one record per decode appended to --out DIR as it ends (rerun the command to resume; "
               "--shard I/N runs one part); launch/pair.sh report DIR reports it.")
# The routes that run one program of their own (its module, the arguments it takes first): a drafter alone, as on a
# second host; this host's keys; the pool a drafter grows (both models in one process); a head's training.
PROGRAMS = {"drafter": ("programs.drafter_program", ["--persist"]), "keys": ("programs.keys_program", []),
            "pool": ("programs.pool_program", []), "train-head": ("training.cli", [])}
COMMANDS = ("sweep", *TIMING_ROUTES, *PROGRAMS)  # the first word of a route's command line


@dataclass(slots=True)
class LaunchPlan:
    """What the launcher starts: both command lines (no drafter with --drafter-at), their environments, and
    what it cleans up."""

    drafter: list[str] | None
    target: list[str]
    endpoint: str
    env: dict[str, dict[str, str]] = field(default_factory=lambda: {"target": {}, "drafter": {}})
    private_dir: str | None = None  # the ipc socket's directory, removed at exit
    notes: list[str] = field(default_factory=list)


def build_parser(mode: str) -> argparse.ArgumentParser:
    run_cls = SweepOptions if mode == "sweep" else RunOptions
    parser = Parser(
        prog="launch/pair.sh" + (" sweep" if mode == "sweep" else ""),
        usage=None if mode == "sweep" else f"launch/pair.sh [{'|'.join(COMMANDS)}] [options]",
        description=(SWEEP_ABOUT if mode == "sweep" else "Run the target and drafter processes as a pair.")
                    + " With no model options, the embedded "
                    f"default pair: target {EMBEDDED} (SmolLM2-135M-Instruct), drafter {DEFAULT_DRAFTER}. "
                    "Other routes: launch/pair.sh sweep|report|matched|export|values|drafter|keys|pool|train-head --help.",
        epilog=f"Pool and output defaults: --pool-topk {PoolConfig().topk} --pool-depth {PoolConfig().depth} "
               f"--pool-expand {PoolConfig().expand} --max-new-tokens {DecodeConfig().max_new_tokens}; for the "
               f"embedded pair on the CPU: {_sizes(embedded_pool(DEFAULT_DRAFTER))} (with a standalone drafter "
               f"{_sizes(EMBEDDED_POOL)})"
               + (f" and {EMBEDDED_MAX_NEW_TOKENS} new tokens" if mode == "decode" else "")
               + f", --lookup {EMBEDDED_LOOKUP} (else {DecodeConfig().lookup}).")
    pair = parser.add_argument_group("Pair")
    pair.add_argument("--target", metavar="SPEC", help=ModelOptions.__dataclass_fields__["model"].metadata["help"])
    pair.add_argument("--drafter", metavar="SPEC", help="the drafter model, same forms as --target")
    pair.add_argument("--target-device", default="cpu", metavar="DEV", help="(default: cpu)")
    pair.add_argument("--drafter-device", default="cpu", metavar="DEV", help="(default: cpu)")
    pair.add_argument("--gpus", metavar="LIST", help="0,1: target on GPU 0, drafter on GPU 1; 0: both on GPU 0")
    pair.add_argument("--endpoint", metavar="ADDR",
                      help="ipc://PATH, tcp://HOST:PORT, or tcp for a free loopback port "
                           "(default: ipc in a private temporary directory)")
    flags_of(parser)["endpoint"] = "--endpoint"
    pair.add_argument("--paper-pool", action="store_true",
                      help=f"the paper's pool (top-k {PoolConfig().topk}, depth {PoolConfig().depth}, expand "
                           f"{PoolConfig().expand}: {PoolConfig().size} candidates), the embedded pair's included")
    add_options(parser, ModelOptions, skip=("model", "device"))
    add_options(parser, PoolConfig, prefix="pool-", defaults=dict.fromkeys(("topk", "depth", "expand")))
    add_options(parser, run_cls, defaults={"max_new_tokens": None, "lookup": None, "budget": None})
    add_options(parser, ConnectOptions)
    add_options(parser, KeyOptions)
    add_options(parser, RemoteOptions)
    add_log_level(parser)
    return parser


def plan(argv: list[str]) -> LaunchPlan:
    """Parse and check the launcher's options into the two command lines; usage errors exit here."""
    mode = "sweep" if argv[:1] == ["sweep"] else "decode"
    argv = argv[1:] if mode == "sweep" else argv
    parser = build_parser(mode)
    ns = _parse(parser, argv, mode)
    notes = []
    remote_drafter = bool(ns.drafter_at)
    pool = _pair_defaults(parser, ns, mode, notes)
    env = {"target": {}, "drafter": {}}
    devices = _devices(parser, ns, env)
    models = _models(parser, ns, devices, env)
    _check_models(parser, models, remote_drafter)
    _check_kv_memory(parser, models, remote_drafter)
    run = from_options(parser, ns, SweepOptions if mode == "sweep" else RunOptions)
    _check_prompts(parser, run)
    _check_outputs(parser, run)
    connect = from_options(parser, ns, ConnectOptions)
    keys = from_options(parser, ns, KeyOptions)
    remote = from_options(parser, ns, RemoteOptions)
    if remote.drafter_at:
        endpoint, private_dir, drafter = _remote(parser, ns, remote, connect), None, None
    else:
        endpoint, private_dir = _endpoint(parser, ns.endpoint, notes)
        if connect.drafter_key:
            parser.error("--drafter-key names a drafter started elsewhere: it goes with --drafter-at")
        keys = dataclasses.replace(keys, curve=keys.curve or private_dir is None)
        if keys.curve:  # the launcher's drafter holds this user's keypair; its target knows the public key
            connect = dataclasses.replace(connect, drafter_key=_own_public_key(parser, keys))
        drafter = drafter_command(models["drafter"], endpoint, models["target"].max_context, ns.log_level, keys)
    target = [*to_argv(models["target"]), "--endpoint", endpoint, *to_argv(pool, prefix="pool-"), *to_argv(run),
              *to_argv(connect), *to_argv(keys, skip=("curve",)), "--log-level", ns.log_level]
    if mode == "sweep":
        target = sweep_target(PY, target, None if drafter is None else (models["drafter"], env["drafter"]))
        env["target"][PROG_ENV] = "launch/pair.sh"  # the sweep names the commands that read it as typed here
    else:
        target = PY + ["programs.target_program", *target]
    return LaunchPlan(drafter, target, endpoint, env, private_dir, notes)


def _parse(parser: argparse.ArgumentParser, argv: list[str], mode: str) -> argparse.Namespace:
    """The options; a word where a command or an option belongs is named, with the command it may mean."""
    ns, extra = parser.parse_known_args(args_of(parser, argv))
    if extra and mode == "decode" and not extra[0].startswith("-"):  # a misspelt command, say
        close = difflib.get_close_matches(extra[0], COMMANDS, n=1)
        parser.error(f"unknown command {extra[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                     + f": the commands are {', '.join(COMMANDS)}, or options alone to decode")
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}" + _sweep_only(parser, extra, mode))
    return ns


def _sweep_only(parser: argparse.ArgumentParser, extra: list[str], mode: str) -> str:
    """Where a decode run was given a sweep's option (--budgets, --out, ...), a note saying so, with the decode
    run's option of a like name (--budget for --budgets); else nothing."""
    if mode != "decode":
        return ""
    sweeps = set(build_parser("sweep")._option_string_actions) - set(parser._option_string_actions)
    given = [a.split("=", 1)[0] for a in extra if a.startswith("--")]
    found = next((flag for flag in given if flag in sweeps), None)
    if found is None:
        return ""
    close = difflib.get_close_matches(found, [f for f in parser._option_string_actions if f.startswith("--")], n=1)
    return (f" ({found} is a sweep's option, launch/pair.sh sweep ..." + (f"; a decode run's is {close[0]}" if close
                                                                         else "") + ")")


def _pair_defaults(parser: argparse.ArgumentParser, ns: argparse.Namespace, mode: str,
                   notes: list[str]) -> PoolConfig:
    """The pair's models (the embedded default pair when none is named; a drafter alone beside the target it
    drafts for), its pool (programs.pool_program.chosen_pool: the CPU pool for the embedded target, named or
    not), and what goes with the embedded pair unnamed: in a decode run its context lookup, output limit and
    budget picked on this machine unless --budget names one (each said in `notes`) -> the pool. Its prompts are
    the built-in ones, as for any run that names none."""
    remote_drafter = bool(ns.drafter_at)
    if remote_drafter and ns.drafter is not None:
        parser.error("--drafter names the model of a local drafter; with --drafter-at the remote one serves")
    embedded = ns.target is None and ns.drafter is None
    if embedded:
        ns.target, ns.drafter = EMBEDDED, DEFAULT_DRAFTER
    elif remote_drafter or (ns.drafter is None and ns.target == "mock"):
        ns.drafter = "mock"  # with --drafter-at, a placeholder: no drafter starts here
    elif ns.target is None and (made_for := drafted_for(ns.drafter)):  # a drafter alone: beside its own target
        ns.target, embedded = made_for, made_for == EMBEDDED
        defaults = ", with the embedded pair's defaults" if embedded else ""
        notes.append(f"target {made_for}: the one {ns.drafter} drafts for{defaults}; --target names another")
    elif ns.drafter is None or ns.target is None:
        parser.error("--target and --drafter go together (or give neither for the embedded default pair)"
                     + (f": {ns.drafter} does not say which target it drafts for (a head trained by train-head says "
                        f"so in its training.json)" if ns.drafter else ""))
    pool = chosen_pool(parser, ns, notes)
    if ns.lookup is None:
        ns.lookup = DecodeConfig().lookup
        if embedded and mode == "decode" and not ns.record_rounds:  # recorded rounds keep the drafter's pools
            ns.lookup = EMBEDDED_LOOKUP
            notes.append(f"embedded default: context lookup grafts up to {EMBEDDED_LOOKUP} tokens copied from the "
                         f"context into each pool; --lookup 0 turns it off")
    if mode == "decode" and ns.pick_budget and ns.budget is not None:
        parser.error(f"--pick-budget chooses the run's budget on this machine: it goes without --budget {ns.budget}")
    if mode == "decode" and ns.budget is None:
        ns.budget = DecodeConfig().budget
        if embedded and not ns.pick_budget:
            ns.pick_budget = True
            notes.append("embedded default: the tree budget that pays most on this machine, from its pass timings "
                         "(timed on the first run, then kept); --budget N or auto sets it")
    if ns.max_new_tokens is None:
        ns.max_new_tokens = DecodeConfig().max_new_tokens
        if embedded and mode == "decode":
            ns.max_new_tokens = EMBEDDED_MAX_NEW_TOKENS
            notes.append(f"embedded default: {EMBEDDED_MAX_NEW_TOKENS} new tokens per decode; "
                         f"--max-new-tokens changes it")
    return pool


def _check_prompts(parser: argparse.ArgumentParser, run: RunOptions | SweepOptions) -> None:
    """Every prompt source read once here, so that a missing or malformed one stops the launch before any
    process starts (the target reads them again, and says what it leaves out)."""
    try:
        select(run.sources, run.seed if isinstance(run, SweepOptions) else run.decode.seed)
    except InputError as e:
        parser.error(flags_of(parser).rewrite(str(e)))


def _check_outputs(parser: argparse.ArgumentParser, run: RunOptions | SweepOptions) -> None:
    """The directories the run writes in, made and checked here (evaluation.paths), so that a path that
    cannot be written stops the launch before any process starts."""
    if isinstance(run, SweepOptions):
        outs = [("--out", run.out)]
    else:
        outs = [("--record-rounds", run.record_rounds)] if run.record_rounds else []
    try:
        for flag, path in outs:
            output_dir(path, flag)
    except InputError as e:
        parser.error(str(e))


def _check_models(parser: argparse.ArgumentParser, models: dict[str, ModelOptions], remote: bool) -> None:
    """Every model the pair loads here present (or free to download): one that is missing stops the launch in
    one line, said once however many processes would load it, before either starts."""
    said = []
    for role in ("target", *(() if remote else ("drafter",))):
        try:
            check_present(models[role])
        except InputError as e:
            said += [str(e)] if str(e) not in said else []
    if said:
        parser.error(flags_of(parser).rewrite("; ".join(said)))


def _check_kv_memory(parser: argparse.ArgumentParser, models: dict[str, ModelOptions], remote: bool) -> None:
    """The KV caches the pair will allocate on this host's memory (CPU processes), from the models' configs,
    against the memory free: too large a --max-context stops here, before either process loads anything.
    A GPU's memory is checked by its process, before its model loads."""
    capacity = models["target"].max_context
    needs = {role: planned_kv_bytes(models[role], capacity) for role in ("target", *(() if remote else ("drafter",)))
             if models[role].device == "cpu"}
    needs = {role: need for role, need in needs.items() if need is not None}
    free = host_free_bytes()
    if needs and sum(needs.values()) > free:
        said = " and ".join(f"the {role}'s {_size(need)}" for role, need in needs.items())
        parser.error(f"--max-context {capacity}: the KV caches of {capacity} slots take {said}, and this host has "
                     f"{_size(free)} free; lower --max-context")


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _models(parser: argparse.ArgumentParser, ns: argparse.Namespace, devices: dict[str, str],
            env: dict[str, dict[str, str]]) -> dict[str, ModelOptions]:
    """Each side's model options (--target/--drafter and the shared ones); each side's CPU threads and how they
    wait in its env."""
    shared = {f.name: getattr(ns, f.name) for f in dataclasses.fields(ModelOptions) if f.name not in ("model", "device")}
    models = {}
    for role in ("target", "drafter"):
        models[role] = from_options(parser, argparse.Namespace(**shared, model=getattr(ns, role), device=devices[role]),
                                    ModelOptions, names={"model": f"--{role}", "device": f"--{role}-device"})
        env[role].update(models[role].process_env())
    models["drafter"] = for_target(models["drafter"], models["target"].model)  # an EAGLE-3 head reads its target
    return models


def _sizes(pool: PoolConfig) -> str:
    return f"{pool.topk}, {pool.depth}, {pool.expand}"


def _devices(parser: argparse.ArgumentParser, ns: argparse.Namespace, env: dict) -> dict[str, str]:
    """Each process's device; --gpus pins each process to one GPU through CUDA_VISIBLE_DEVICES."""
    devices = {"target": ns.target_device, "drafter": ns.drafter_device}
    if ns.gpus is not None:
        gpus = [g.strip() for g in ns.gpus.split(",") if g.strip()]
        if len(gpus) not in (1, 2) or not all(g.isdigit() for g in gpus):
            parser.error(f"--gpus must be one or two GPU indices such as 0,1 or 0, got {ns.gpus!r}")
        # Indices count the GPUs this launcher may use: those CUDA_VISIBLE_DEVICES names (a scheduler's
        # allocation) when it is set, else every GPU.
        visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        if visible and max(map(int, gpus)) >= len(visible):
            parser.error(f"--gpus {ns.gpus}: CUDA_VISIBLE_DEVICES={','.join(visible)} makes {len(visible)} GPU(s) "
                         f"visible to this launcher")
        for role, gpu in zip(("target", "drafter"), (gpus[0], gpus[-1])):
            env[role]["CUDA_VISIBLE_DEVICES"] = visible[int(gpu)] if visible else gpu
            devices[role] = "cuda:0"
    if any(d.startswith("cuda") for d in devices.values()):
        from models.cuda_env import CudaUnavailable, require_cuda_in_child

        try:  # in a child: CUDA's threads in this process would make the preexec_fn forks below unsafe
            require_cuda_in_child(f"--gpus {ns.gpus}" if ns.gpus is not None else "a CUDA device")
        except CudaUnavailable as e:
            parser.error(str(e))
    return devices


def _endpoint(parser: argparse.ArgumentParser, text: str | None, notes: list[str]) -> tuple[str, str | None]:
    """(endpoint, private directory to remove at exit); an endpoint another process holds is a usage error."""
    if text is None:
        remove_stale_private_dirs()  # those of launchers killed before they could remove them
        endpoint = private_ipc_endpoint(owner=os.getpid())
        return endpoint, os.path.dirname(endpoint[len("ipc://"):])
    if text == "tcp":
        return loopback_tcp_endpoint(), None
    try:
        endpoint = check_endpoint(text)
    except ValueError as e:
        parser.error(flags_of(parser).rewrite(str(e)))
    if reason := endpoint_in_use(endpoint):
        parser.error(f"--endpoint {endpoint}: {reason}; stop it or name another endpoint")
    if not is_loopback(endpoint):
        notes.append(f"the drafter binds {endpoint}, reachable beyond this machine (CURVE: this user's keys)")
    return endpoint, None


def _remote(parser: argparse.ArgumentParser, ns: argparse.Namespace, remote: RemoteOptions,
            connect: ConnectOptions) -> str:
    """The endpoint of a drafter started elsewhere; the options of a local drafter are usage errors."""
    if ns.endpoint is not None:
        parser.error("--endpoint is where a local drafter binds; with --drafter-at no drafter starts here")
    if not connect.drafter_key and not is_loopback(remote.drafter_at):
        parser.error(f"--drafter-at {remote.drafter_at} is beyond this machine: name the drafter's public key with "
                     f"--drafter-key (launch/pair.sh keys prints it on the drafter's host)")
    return remote.drafter_at


def _own_public_key(parser: argparse.ArgumentParser, keys: KeyOptions) -> str:
    """This user's public key, the keypair made on first use (before either process starts)."""
    try:
        return own_keys(key_dir(keys.key_dir)).public.decode()
    except InputError as e:
        parser.error(flags_of(parser).rewrite(str(e)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in TIMING_ROUTES:  # programs over files: no pair to start
        os.execve(sys.executable, [*PY, "timing", *argv], {**os.environ, "SPECPAIR_PROG": "launch/pair.sh"})
    if argv[:1] and argv[0] in PROGRAMS:  # one program of its own, in this process: no pair to start
        module, first = PROGRAMS[argv[0]]
        return import_module(module).main([*first, *argv[1:]], prog=f"launch/pair.sh {argv[0]}")
    p = plan(argv)
    for note in p.notes:
        print(f"[launch] {note}", file=sys.stderr)
    children = Children(p.private_dir)
    stopped_by = []

    def on_signal(signum, _frame):
        stopped_by.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        drafter = None if p.drafter is None else children.start(p.drafter, p.env["drafter"])
        target = children.start(p.target, p.env["target"])
        return _supervise(target, drafter, stopped_by)
    except KeyboardInterrupt:
        return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)
    finally:
        children.stop(take_signals=True)


DRAFTER_FIRST_S = 1.0  # after a failed target, how long the drafter may take to show it failed first


def _supervise(target: subprocess.Popen, drafter: subprocess.Popen | None, stopped_by: list[int]) -> int:
    """Wait until either process ends -> the pair's exit status (the failing process's). A stop signal's
    KeyboardInterrupt that a finalizer dropped is raised again here (`stopped_by` holds what arrived)."""
    while True:
        if stopped_by:
            raise KeyboardInterrupt
        if target.poll() is not None:
            if drafter is None:
                return status(target.returncode)
            # Exit 0: it asked the drafter to shut down, so let it exit by itself. A failure: the drafter may
            # have died first (the target then reports the closed connection); its status says why.
            try:
                drafter.wait(GRACE_SECONDS if target.returncode == 0 else DRAFTER_FIRST_S)
            except subprocess.TimeoutExpired:
                pass
            if target.returncode != 0 and drafter.returncode not in (None, 0):
                print(f"[launch] the drafter exited with status {status(drafter.returncode)}", file=sys.stderr)
                return status(drafter.returncode)
            stop_process(drafter)
            return status(target.returncode)
        if drafter is not None and drafter.poll() is not None:
            # The target notices the closed connection and reports it; give it a moment to say so.
            try:
                target.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                stop_process(target)
            if drafter.returncode == 0 and target.returncode == 0:
                return 0  # the target asked the drafter to shut down, then took longer to exit itself
            print(f"[launch] the drafter exited with status {status(drafter.returncode)}", file=sys.stderr)
            return status(drafter.returncode) or status(target.returncode) or 1
        time.sleep(0.05)
