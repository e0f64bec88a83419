"""python -m timing sweep: the target-side process of a timing sweep (DESIGN.md section 6).

Loads the target, connects to the drafter and runs the shard's decodes in the schedule's order, writing
one record per decode to DIR/records.shard-I-of-N.jsonl as soon as it ends. Rerunning the same command
resumes: recorded decodes are skipped. Logs and the progress bar go to stderr; the last line of stdout is
one JSON document summarising the shard.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from launch import target as target_program
from launch.cli import flags_of, run_program
from launch.options import SweepOptions
from launch.prompts import Prompt, gather
from models.options import ModelOptions
from pipeline.config import DecodeConfig, InputError
from pipeline.decode import PHASES, DecodeResult
from timing import run_config
from timing.records import RecordStore, record_key, records_path
from timing.schedule import Task, combinations, plan, prompt_order

log = logging.getLogger("timing")


def build_parser() -> argparse.ArgumentParser:
    parser = target_program.build_parser("python -m timing sweep", "The target process of a timing sweep "
                                         "(launch/pair.sh sweep starts it with its drafter).", SweepOptions)
    parser.add_argument("--drafter-launch", metavar="JSON",
                        help="how the launcher started the drafter: {\"options\": its model options, \"env\": "
                             "its environment overrides}; recorded in config.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = target_program.parse(parser, argv, SweepOptions)
    model, pool, options = args.model, args.pool, args.run

    def body() -> int:
        drafter, drafter_env = _drafter_launch(args.namespace.drafter_launch)
        prompts = gather_prompts(options)
        config = run_config.describe(model, drafter, pool, options, prompts)
        store = run_shard(options, prompts, config, drafter_env, lambda: target_program.connect(args))
        print(json.dumps(summary(options, sweep_tasks(options, prompts), store.records)))
        return 0

    return run_program(body, flags_of(parser))


def run_shard(options: SweepOptions, prompts: Sequence[Prompt], config: dict, drafter_env: dict | None,
              connect: Callable[[], AbstractContextManager], progress: bool = True) -> RecordStore:
    """Claim the directory for this shard, then decode what it has not recorded yet -> its (closed) store.

    The shard's record file is locked first, so a second sweep on the same shard is refused before it
    records a start in config.json; `connect` opens the session only when a decode is left.
    """
    tasks = sweep_tasks(options, prompts)
    with RecordStore(records_path(options.out, *options.shard_index)) as store:
        run_config.claim(options.out, config, run_config.environment(options.shard, drafter_env))
        if all(_key(t) in store for t in tasks):
            log.info("every decode of shard %s is recorded in %s", options.shard, store.path)
        else:
            with connect() as session, logging_redirect_tqdm():
                run_sweep(session, options, tasks, store, progress)
    return store


def gather_prompts(options: SweepOptions) -> list[Prompt]:
    """The prompts of every source (ids unique across them), cut to `limit_prompts`."""
    return gather(options.sources, options.seed)


def sweep_tasks(options: SweepOptions, prompts: Sequence[Prompt]) -> list[Task]:
    """The shard's decodes in running order."""
    temperatures = options.temperature_list
    combos = combinations(options.decoder_list, temperatures, options.budget_list,
                          {t: options.seeds(t) for t in temperatures})
    shard, n_shards = options.shard_index
    if shard > len(prompts):
        raise InputError(f"`shard` {options.shard} gets no prompt: the sweep has {len(prompts)}")
    return plan(prompt_order(prompts, options.seed), combos, shard, n_shards, options.warmup)


def run_sweep(session, options: SweepOptions, tasks: Sequence[Task], store: RecordStore,
              progress: bool = True) -> int:
    """Run every task not yet in `store`, appending its record as it ends -> number of decodes recorded.

    Warm-ups run at every start that has timed decodes left, because a restarted process is cold again;
    a warm-up already recorded is decoded again but not recorded twice.
    """
    ids = {p.id: session.tokenizer.prompt_ids(p.text) for p in {t.prompt.id: t.prompt for t in tasks}.values()}
    _check_capacity(session.target.capacity, ids, options, tasks)
    timed_left = any(not t.warmup and _key(t) not in store for t in tasks)
    todo = [t for t in tasks if _key(t) not in store or (t.warmup and timed_left)]
    recorded = 0
    shard = "{}/{}".format(*options.shard_index)
    with tqdm(total=len(tasks), initial=sum(_key(t) in store for t in tasks), unit="decode", file=sys.stderr,
              dynamic_ncols=True, disable=not progress,
              mininterval=0.1 if sys.stderr.isatty() else 30.0) as bar:  # a log file gets a line per 30 s
        for task in todo:
            c = task.combo
            bar.set_postfix_str(f"{'warm-up ' if task.warmup else ''}{c.decoder} T={c.temperature:g} B={c.budget}",
                                refresh=False)
            cap = options.cap(c.decoder, c.budget)
            config = DecodeConfig(c.decoder, c.temperature, cap, options.max_new_tokens, c.seed)
            result = session.decode(ids[task.prompt.id], config, task.prompt.id)
            if _key(task) in store:
                continue  # a warm-up rerun after a restart
            store.append(make_record(task, cap, len(ids[task.prompt.id]), result, shard))
            recorded += 1
            bar.update()
    return recorded


def make_record(task: Task, cap: int, prompt_tokens: int, result: DecodeResult, shard: str) -> dict:
    """One decode's JSON record: per-decode totals and per-round columns."""
    rounds = result.rounds
    names = list(PHASES) + sorted({k for r in rounds for k in r.phases} - set(PHASES))
    c = task.combo
    return {
        "prompt_id": task.prompt.id, "category": task.prompt.category, "position": task.position,
        "decoder": c.decoder, "temperature": c.temperature, "budget": c.budget, "cap": cap, "seed": c.seed,
        "warmup": task.warmup, "shard": shard, "prompt_tokens": prompt_tokens,
        "tokens": len(result.tokens), "token_ids": list(result.tokens), "hit_limit": result.hit_limit,
        "seconds": result.seconds, "prefill_seconds": result.prefill_seconds, "rounds": len(rounds),
        "target_passes": result.target_passes,
        "accepted": [r.accepted for r in rounds], "tree_sizes": [r.tree_size for r in rounds],
        "available": [r.available for r in rounds],
        "phases": {name: [r.phases.get(name, 0.0) for r in rounds] for name in names},  # absent phase: 0 s
        "finished": time.time(),
    }


def summary(options: SweepOptions, tasks: Sequence[Task], records: Sequence[dict]) -> dict:
    """The shard's state and its speeds per setting (summed tokens / summed seconds, warm-ups left out)."""
    speeds: dict[str, dict[str, float]] = {}
    for r in records:
        if not r["warmup"]:
            s = speeds.setdefault(f"T={r['temperature']:g} B={r['budget']}", {}).setdefault(r["decoder"], [0, 0.0])
            s[0] += r["tokens"]
            s[1] += r["seconds"]
    done = {record_key(r) for r in records}
    return {"out": str(Path(options.out)), "shard": options.shard, "records": len(records),
            "decodes": len(tasks), "complete": all(_key(t) in done for t in tasks),
            "speeds": {k: {d: round(t / s, 3) for d, (t, s) in v.items()} for k, v in speeds.items()}}


def _key(task: Task) -> tuple:
    c = task.combo
    return (task.prompt.id, c.decoder, float(c.temperature), int(c.budget), int(c.seed), task.warmup)


def _check_capacity(capacity: int, ids: dict[str, list[int]], options: SweepOptions, tasks: Sequence[Task]) -> None:
    """Fail before the first decode, not hours in, when a prompt cannot fit the target's KV cache."""
    cap = max(options.cap(t.combo.decoder, t.combo.budget) for t in tasks)
    config = DecodeConfig(budget=cap, max_new_tokens=options.max_new_tokens)
    for prompt_id, prompt in ids.items():
        try:
            config.check_fits(len(prompt), capacity)
        except InputError as e:
            raise type(e)(f"prompt {prompt_id!r}: {e}") from None


def _drafter_launch(text: str | None) -> tuple[ModelOptions | None, dict | None]:
    if text is None:
        return None, None
    try:
        launch = json.loads(text)
        return ModelOptions(**launch["options"]), dict(launch.get("env") or {})
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"`drafter_launch` must be JSON with the drafter's model options ({e})") from None
