"""python -m bench.pair: how fast is the pair against transformers' `generate`?

Its results: results/bench_pair.txt and the runs beside it (results/benchmarks.md), and bench-pair.txt of
results/cpu-smollm2-lookup/ (results/cpu-smollm2-lookup/README.md); it backs README.md's
measured line, `draft` so many times transformers' `generate`.

In one run on the same prompts: (1) per-pass latencies of the target and drafter runners at their deployed
threads; (2) every decoder of the pipelined pair through launch/pair.sh, with median per-phase round times; (3)
transformers' `generate` on the target and its assisted generation with the int8 drafter, greedy, on every core,
with stock linear kernels, and `generate` again with the kernels tuned at load (models.cpu_linear); (4) how often
a standalone drafter agrees with the target. Speeds are summed tokens over summed seconds. The last line of the
output is one JSON document."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.common import bench_parser, check_stratify, close, command_line, refuse
from evaluation.prompts import gather
from evaluation.record import DecodeRecord
from models.kernel_cache import processor
from models.options import (DEFAULT_DRAFTER, EMBEDDED, EMBEDDED_LOOKUP, EMBEDDED_POOL, ModelOptions, embedded_pool,
                            is_head_spec)
from pipeline.config import ConfigError, InputError, PoolConfig, check_budget, check_int, split_list
from pipeline.result import PHASES
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from programs.options import PromptOptions, check_decoders

ROOT = Path(__file__).resolve().parents[1]
POOLS = {"cpu": embedded_pool, "paper": lambda drafter: PoolConfig()}  # drafter spec -> the pair's pool


def median_ms(fn, reps: int = 15) -> float:
    from target_proc.costs import timed

    return 1e3 * timed(fn, reps)


def pass_latencies(prompt_ids: list[int], drafter_spec: str) -> dict:
    """Median ms of each pass of the default pair's target and drafter, with their deployed threads (not a head's
    rounds, which need the target's features: the decoders' phase times hold them)."""
    import torch

    from bench.forward import bushy_tree
    from drafter_proc.drafter import Drafter
    from models.load import load
    from target_proc.target import Target

    options = ModelOptions()
    target_model = load(options, "target")
    target = Target(target_model.runner(1024), options.cpu_threads)
    target.prefill(prompt_ids[:-1])
    solo = options.cpu_threads[1]
    out = {
        f"target root pass, {options.threads} thread (overlaps drafting)":
            median_ms(lambda: target.root_pass(prompt_ids[-1], overlapped=True)),
        f"target root pass, {solo} threads (ar)": median_ms(lambda: target.root_pass(prompt_ids[-1])),
        f"target tree pass B=8, {solo} threads": median_ms(lambda: target.tree_pass(bushy_tree(8), None)),
        f"target root+tree pass B=8 (draft), {solo} threads":
            median_ms(lambda: target.tree_pass(bushy_tree(8), prompt_ids[-1])),
        f"target tree pass B=59, {solo} threads": median_ms(lambda: target.tree_pass(bushy_tree(59), None), reps=5),
    }
    if is_head_spec(drafter_spec):
        return out
    drafter_model = load(ModelOptions(model=drafter_spec), "drafter")
    torch.set_num_threads(options.threads)  # the drafter's
    one = drafter_model.runner(1024)
    one_target = Target(one)
    one_target.prefill(prompt_ids[:-1])
    out["drafter one-token pass"] = median_ms(lambda: one_target.root_pass(prompt_ids[-1]))
    for name, pool in (("cpu pool", EMBEDDED_POOL), ("paper pool", PoolConfig())):
        drafter = Drafter(drafter_model.runner(1024 + pool.n_expanded), pool)
        drafter.start(prompt_ids)
        runner = drafter.runner
        L = drafter.through_root
        slots = L + np.arange(pool.expand)
        step = lambda: runner.forward(np.arange(pool.expand) + 5, np.full(pool.expand, L), slots, L, slots,
                                      np.eye(pool.expand, dtype=bool))
        out[f"drafter step ({pool.expand} tokens)"] = median_ms(step)
        out[f"drafter round, {name} {pool.topk}/{pool.depth}/{pool.expand}"] = median_ms(
            lambda: drafter.commit([5, 6, 7]) and setattr(drafter, "through_root", L), reps=5)
    return out


def drafter_agreement(records: list[DecodeRecord], prompts: list[str], drafter_spec: str) -> dict:
    """How often a standalone drafter's argmax is the target's, and the target's argmax is in the drafter's
    top 10, along the target's own greedy outputs (the `ar` decodes), teacher-forced."""
    import torch

    from models.load import load

    cores = ModelOptions().cpu_threads[1]
    target = load(ModelOptions(tune_linears=False), "target")  # rows, not speed: no kernels to time
    drafter = load(ModelOptions(model=drafter_spec), "drafter")
    torch.set_num_threads(cores)
    top1 = top10 = positions = 0
    for r in records:
        if r.decoder != "ar":
            continue
        prompt = target.tokenizer.prompt_ids(prompts[int(r.prompt_id.split("/")[1]) - 1])
        ids = torch.tensor([prompt + r.token_ids])
        with torch.inference_mode():
            t = target.model(input_ids=ids).logits[0, len(prompt) - 1: -1]
            d = drafter.model(input_ids=ids).logits[0, len(prompt) - 1: -1]
        want = t.argmax(-1)
        top1 += int((d.argmax(-1) == want).sum())
        top10 += int((d.topk(10, -1).indices == want[:, None]).any(-1).sum())
        positions += len(want)
    return {"top1": top1 / positions, "target_argmax_in_drafter_top10": top10 / positions, "positions": positions}


def pair_run(prompts: list[str], max_new: int, budget: int | str, decoders: list[str], drafter: str,
             pool: PoolConfig, env: dict[str, str] | None = None, lookup: int = 0) -> list[DecodeRecord]:
    """Every prompt with every decoder through launch/pair.sh (`env`: its environment's overrides; `lookup`: its
    context lookup) -> the timed decodes' records."""
    cmd = [str(ROOT / "launch" / "pair.sh"), "--decoders", ",".join(decoders), "--max-new-tokens", str(max_new),
           "--budget", str(budget), "--json", "--target", EMBEDDED, "--drafter", drafter,
           "--pool-topk", str(pool.topk), "--pool-depth", str(pool.depth), "--pool-expand", str(pool.expand),
           "--lookup", str(lookup)]
    for p in [prompts[0]] + prompts:  # the first prompt again as a warm-up, dropped below
        cmd += ["--prompt", p]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"launch/pair.sh failed with status {proc.returncode}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    records = [DecodeRecord.from_json(line, "launch/pair.sh --json") for line in lines if line["kind"] == "decode"]
    return [r for r in records if r.prompt_id != "prompt/0"]


def transformers_baselines(prompts: list[str], max_new: int) -> tuple[dict, dict]:
    """transformers' generate and assisted generation as transformers runs them (every linear layer through
    torch's stock kernel), and generate again through the kernels this runtime tuned (models.cpu_linear, at
    the threads generate runs with), which tells the kernels' share of a gain over generate from the
    pipeline's. Each prompt runs the three in a rotated order. -> (name -> speed, the kernels chosen)."""
    import contextlib

    import torch

    from models.cpu_linear import stock_kernels
    from models.load import load

    torch.set_num_threads(ModelOptions().cpu_threads[1])  # before the load: the kernels are timed with them
    target = load(ModelOptions(), "target")
    drafter = load(ModelOptions(model="smollm2:int8"), "drafter")
    eos = sorted(target.tokenizer.eos)
    runs = (("transformers generate", True, {}), ("transformers assisted", True, {"assistant_model": drafter.model}),
            ("generate, tuned linears", False, {}))
    totals = {name: [0.0, 0.0] for name, _, _ in runs}  # tokens, seconds
    for i, text in enumerate([prompts[0]] + prompts):  # the first prompt's decodes are warm-ups
        ids = torch.tensor([target.tokenizer.prompt_ids(text)])
        for name, stock, extra in runs[i % 3:] + runs[: i % 3]:
            with stock_kernels(target.model) if stock else contextlib.nullcontext(), torch.inference_mode():
                t0 = time.perf_counter()
                gen = target.model.generate(ids, max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                                            pad_token_id=eos[0], **extra)
                seconds = time.perf_counter() - t0
            if i > 0:
                totals[name][0] += gen.shape[1] - ids.shape[1]
                totals[name][1] += seconds
    speeds = {name: {"tokens": t, "seconds": sec, "tok_per_s": t / sec} for name, (t, sec) in totals.items()}
    return speeds, target.linear_kernels


@dataclass(frozen=True, slots=True)
class BenchPrompts:
    """The prompts a benchmark decodes (`prompts_or_refuse` reads them) and their output limit"""

    prompts: tuple[str, ...] = field(default=(), metadata={
        "help": "prompt source, repeatable, as a sweep takes it (default: builtin)", "metavar": "SOURCE"})
    limit: int = field(default=4, metadata={
        "help": "N prompts: the first N of one source, else spread as --stratify says", "metavar": "N"})
    stratify: str = field(default="", metadata={
        "help": "spread --limit over categories or Spec-Bench's groups (under seed 0)", "metavar": "category|group"})
    max_new_tokens: int = field(default=96, metadata={"metavar": "N"})

    def __post_init__(self) -> None:
        check_int("limit", self.limit, 1)
        check_stratify("stratify", self.stratify)
        check_int("max_new_tokens", self.max_new_tokens, 1)


@dataclass(frozen=True, slots=True)
class PairOptions(BenchPrompts):
    """Prompts and decodes"""

    budget: int | str = field(default=8, metadata={"metavar": "B|auto", "parse": "budget"})
    decoders: str = field(default=",".join(DECODERS), metadata={
        "help": "decoders of the pair run, ar among them (default: all)", "metavar": "LIST"})
    drafter: str = field(default=DEFAULT_DRAFTER, metadata={
        "help": "the pair's drafter beside the default target (smollm2:int8, smollm2:eagle3:int8, ...)",
        "metavar": "SPEC"})
    pool: str = field(default="cpu", metadata={"help": "the pair's pool: cpu (10, 3, 3 with a head, "
                                                       "10, 4, 3 with a standalone drafter) or paper (10, 8, 10)",
                                               "metavar": "cpu|paper"})
    lookup: int = field(default=EMBEDDED_LOOKUP, metadata={
        "help": "the pair's context lookup: up to N tokens copied from the context grafted into each pool (the "
                "embedded pair's; 0: off)", "metavar": "N"})

    def __post_init__(self) -> None:
        BenchPrompts.__post_init__(self)
        check_budget("budget", self.budget)
        DecodeConfig(lookup=self.lookup)  # the decodes' own check of it
        decoders = check_decoders("decoders", self.decoders)
        if self.pool not in POOLS:
            raise ConfigError("pool", f"must be {' or '.join(POOLS)}, got {self.pool!r}")
        if "ar" not in decoders or len(decoders) < 2:
            raise ConfigError("decoders", "must hold ar and at least one other decoder (the ratios compare them)")


def prompts_or_refuse(options: BenchPrompts, module: str) -> list[str]:
    """The texts of --limit prompts of a benchmark's --prompts (builtin when none): the first ones, or a subset
    spread over --stratify's strata as a sweep under seed 0 draws it; a source that cannot be read ends `module`
    in one line naming it."""
    chosen = PromptOptions(prompts=options.prompts or ("builtin",), stratify=options.stratify or "category",
                           limit_prompts=options.limit if options.stratify else 0)
    try:
        return [p.text for p in gather(chosen, 0)[: options.limit]]
    except InputError as e:
        refuse(module, str(e))


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(PairOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    prompts = prompts_or_refuse(options, __spec__.name)
    from models.load import load

    decoders = split_list(options.decoders)
    target_tok = load(ModelOptions(tune_linears=False), "target").tokenizer
    latencies = pass_latencies(target_tok.prompt_ids(prompts[0]), options.drafter)
    records = pair_run(prompts, options.max_new_tokens, options.budget, decoders, options.drafter,
                       POOLS[options.pool](options.drafter), lookup=options.lookup)
    baselines, kernels = transformers_baselines(prompts, options.max_new_tokens)
    agreement = None if is_head_spec(options.drafter) else drafter_agreement(records, prompts, options.drafter)
    same = all(r.token_ids == ar.token_ids for r in records for ar in records
               if ar.decoder == "ar" and ar.prompt_id == r.prompt_id)
    print(f"\nper-pass latency, median ms ({len(target_tok.prompt_ids(prompts[0]))}-token prompt)")
    for name, ms in latencies.items():
        print(f"  {name:<56}{ms:8.1f}")
    speeds, ratios = decoder_speeds(records, options, baselines, kernels, len(prompts))
    if agreement:
        print(f"\n{options.drafter} along the target's greedy outputs ({agreement['positions']} positions): top-1 "
              f"agreement {agreement['top1']:.2f}, target argmax in drafter top 10 "
              f"{agreement['target_argmax_in_drafter_top10']:.2f}")
    print(f"every decoder's output equals ar's on every prompt: {'yes' if same else 'NO'}")
    close({"latency_ms": latencies, "decoders": speeds, "transformers": baselines, "ratios": ratios,
           "linear_kernels": kernels, "drafter": options.drafter, "pool": options.pool, "drafter_agreement": agreement,
           "outputs_equal_ar": same, "prompts": len(prompts), "max_new_tokens": options.max_new_tokens,
           "budget": options.budget, "lookup": options.lookup, "cpu": processor()})
    return 0


def decoder_speeds(records: list[DecodeRecord], options: PairOptions, baselines: dict, kernels: dict,
                   n_prompts: int) -> tuple[dict, dict]:
    """Each decoder's speed and median phases, transformers' speeds and the ratios between them, printed."""
    import torch

    from evaluation.summary import analyse
    from models.cpu_linear import ROW_CLASSES

    speeds = {}
    print(f"\n{n_prompts} prompts, T=0, B={options.budget}, {options.max_new_tokens} new tokens, context lookup "
          f"{options.lookup or 'off'}")
    print(f"{'':<24}{'tok/s':>8}{'round ms':>10}{'draft':>8}{'root':>8}{'wait':>8}{'tree':>8}{'tau':>9}")
    setting = analyse(records, 0.0, options.budget, speed_tokens="output")
    for decoder, st in setting.decoders.items():
        med = {k: 1e3 * (st.phase_median(k) or 0.0) for k in PHASES}
        round_ms = 1e3 * float(np.median(st.round_seconds))
        speeds[decoder] = {"tok_per_s": st.speed, "median_round_ms": round_ms,
                           **{f"median_{k}_ms": v for k, v in med.items()}, "tau": st.rounds.tau}
        print(f"  {decoder:<22}{st.speed:8.1f}{round_ms:10.1f}{med['draft']:8.1f}"
              f"{med['root']:8.1f}{med['wait']:8.1f}{med['tree']:8.1f}{st.rounds.tau:9.2f}")
    for name, b in baselines.items():
        print(f"  {name:<23}{b['tok_per_s']:7.1f}   ({torch.get_num_threads()} threads)")
    print(f"  (tuned kernels by row class {ROW_CLASSES}: {kernels or 'every shape stock'})")
    ratios = speed_ratios(speeds, baselines)
    for name, r in ratios.items():
        print(f"  {name:<30}{r:6.2f}")
    return speeds, ratios


def speed_ratios(speeds: dict, baselines: dict) -> dict:
    best = max((d for d in speeds if d != "ar"), key=lambda d: speeds[d]["tok_per_s"])
    return {
        "ar / generate": speeds["ar"]["tok_per_s"] / baselines["transformers generate"]["tok_per_s"],
        "ar / generate, tuned linears": speeds["ar"]["tok_per_s"] / baselines["generate, tuned linears"]["tok_per_s"],
        f"{best} / generate": speeds[best]["tok_per_s"] / baselines["transformers generate"]["tok_per_s"],
        f"{best} / assisted": speeds[best]["tok_per_s"] / baselines["transformers assisted"]["tok_per_s"],
        f"{best} / ar": speeds[best]["tok_per_s"] / speeds["ar"]["tok_per_s"],
    }


if __name__ == "__main__":
    sys.exit(main())
