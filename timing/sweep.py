"""python -m timing sweep: the target-side process of a timing sweep (DESIGN.md section 6).

Runs the shard's decodes in the schedule's order (through programs.decodes), writing one record per decode to
DIR/records.shard-I-of-N.jsonl as it ends (with --record-rounds, its rounds to DIR/rounds.shard-I-of-N.bin just
before); rerunning the same command resumes. The last line of stdout is one JSON document summarising the shard."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from evaluation.rounds_file import RoundStore, rounds_path
from evaluation.prompts import Prompt, gather
from evaluation.record import DecodeRecord, SweepPlace
from evaluation.paths import output_dir
from evaluation.summary import counted_tokens
from models.options import ModelOptions
from pipeline.config import InputError
from pipeline.settings import DecodeConfig
from programs import decodes, target_program
from programs.cli import flags_of, run_program
from programs.progress import Progress
from target_proc.recorder import RoundRecorder
from timing import prog, run_config
from timing.options import SweepOptions
from timing.record_store import RecordStore, record_key, records_path
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
        done = summary(options, sweep_tasks(options, prompts), store.records)
        done["next"] = next_commands(options)
        log.info("shard %s %s; read %s with:\n  %s", options.shard, "complete" if done["complete"] else "incomplete",
                 options.out, "\n  ".join(done["next"]))
        print(json.dumps(done))
        return 0

    return run_program(body, flags_of(parser))


def run_shard(options: SweepOptions, prompts: Sequence[Prompt], config: dict, drafter_env: dict | None,
              connect: Callable[[], AbstractContextManager], progress: bool = True) -> RecordStore:
    """Claim the directory for this shard, then decode what it has not recorded yet -> its (closed) store.
    The shard's record file is locked first, so a second sweep on the same shard is refused before it records a start in
    config.json; `connect` opens the session only when a decode is left."""
    tasks = sweep_tasks(options, prompts)
    output_dir(options.out, "--out")
    with RecordStore(records_path(options.out, *options.shard_index)) as store:
        start = run_config.environment(options.shard, drafter_env)
        run_config.claim(options.out, config, start)
        if all(_done(t, store) for t in tasks):
            log.info("every decode of shard %s is recorded in %s", options.shard, store.path)
        else:
            rounds = rounds_path(options.out, *options.shard_index) if options.record_rounds else None
            with connect() as session, decodes.rounds_file(rounds, config, session.target.runner.vocab_size) as round_store:
                run_config.note_identity(options.out, start["id"], session.models)
                run_sweep(session, options, tasks, store, progress, round_store)
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
              progress: bool = True, rounds: RoundStore | None = None) -> int:
    """Run every task not yet in `store`, appending a record per turn as it ends -> records appended.
    Warm-ups run at every start that has timed decodes left, because a restarted process is cold again; a warm-up
    already recorded is decoded again but not recorded twice. A multi-turn task cut short resumes at its first missing
    turn, with the recorded answers of the turns before it in context. With `rounds`, each timed decode's recorded
    rounds are written there before its record."""
    _check_capacity(session, options, tasks)
    timed_left = any(not t.warmup and not _done(t, store) for t in tasks)
    todo = [_decode(options, t, store) for t in tasks if not _done(t, store) or (t.warmup and timed_left)]
    turns = sum(len(t.prompt.turns) for t in tasks)
    recorded = 0
    recorded_before = sum(k in store for t in tasks for k in _keys(t))
    with Progress(turns, initial=recorded_before, bar=None if progress else False) as counter:
        for record in decodes.run_decodes(session, todo, counter, rounds):
            store.append(record)
            recorded += 1
    return recorded


def _decode(options: SweepOptions, task: Task, store: RecordStore) -> decodes.Decode:
    """A task as the decode runner takes it: its config, the turns recorded before, and its records' fields.
    A warm-up recorded before is decoded again (a restarted process is cold) and not recorded twice."""
    c = task.combo
    config = dataclasses.replace(options.decode, decoder=c.decoder, temperature=c.temperature,
                                 budget=options.cap(c.decoder, c.budget), seed=c.seed)
    where = SweepPlace(grid_budget=c.budget, position=task.position, warmup=task.warmup,
                       shard="{}/{}".format(*options.shard_index))
    again = task.warmup and _done(task, store)
    done = {} if again else {k[1]: store.records_by_key[k] for k in _keys(task) if k in store}
    return decodes.Decode(task.prompt, config, done, where, counted=not again, keep_rounds=not task.warmup,
                          warmup=task.warmup)


def summary(options: SweepOptions, tasks: Sequence[Task], records: Sequence[DecodeRecord]) -> dict:
    """The shard's state and its speeds per setting (summed tokens / summed seconds, warm-ups left out)."""
    speeds: dict[str, dict[str, float]] = {}
    for r in records:
        if not r.warmup:
            key = f"T={r.temperature:g} B={r.setting_budget}"
            s = speeds.setdefault(key, {}).setdefault(r.decoder, [0, 0.0])
            s[0] += counted_tokens(r, options.speed_tokens)
            s[1] += r.seconds
    done = {record_key(r) for r in records}
    return {"out": str(Path(options.out)), "shard": options.shard, "records": len(records),
            "decodes": len(tasks), "complete": all(k in done for t in tasks for k in _keys(t)),
            "speed_tokens": options.speed_tokens,
            "speeds": {k: {d: round(t / s, 3) for d, (t, s) in v.items()} for k, v in speeds.items()}}


def next_commands(options: SweepOptions) -> list[str]:
    """The commands that read a sweep's directory, as its user would type them (with --overwrite where what one
    writes is there already, from before this run's records: it refuses otherwise)."""
    out, answers = shlex.quote(options.out), options.out.rstrip("/") + "-spec-bench"
    commands = [f"{prog('report')} {out}{_again(Path(options.out) / 'report.md')}   # speeds, gains and plots "
                f"(--by-category: per prompt group)",
                f"{prog('export')} {out} {shlex.quote(answers)} --format spec-bench"
                f"{_again(*Path(answers).glob('*.jsonl'))}"]
    if {"pearl", "root-draw"} <= set(options.decoder_list):
        commands.append(f"{prog('matched')} {out}   # root-draw's cap that matches pearl's tree size")
    if options.record_rounds:
        commands.append(f"{prog('values')} {out}{_again(Path(options.out) / 'values.md')}   # every rule on the "
                        f"recorded rounds")
    if options.shard_index[1] > 1:
        commands = [f"{c}   # once every shard has ended" if "#" not in c else c for c in commands]
    return commands


def _again(*held: Path) -> str:
    """--overwrite where a file a next command writes is there already (a report of fewer records, say)."""
    return " --overwrite" if any(p.exists() for p in held) else ""


def _keys(task: Task) -> list[tuple]:
    """The record keys of a task's turns (see timing.record_store.record_key)."""
    c = task.combo
    return [(task.prompt.id, turn, c.decoder, float(c.temperature), c.budget, int(c.seed), task.warmup)
            for turn in range(len(task.prompt.turns))]


def _done(task: Task, store: RecordStore) -> bool:
    return all(k in store for k in _keys(task))


ANSWER_SLACK = 8  # tokens a re-tokenized answer may take beyond its generated length


def _check_capacity(session, options: SweepOptions, tasks: Sequence[Task]) -> None:
    """Fail before the first decode, not hours in, when a prompt cannot fit the target's KV cache. A later
    turn's context holds the earlier answers, each at most max_new_tokens (plus a little for re-tokenizing)."""
    largest = max(DecodeConfig(budget=options.cap(t.combo.decoder, t.combo.budget),
                               budget_max=options.decode.budget_max).largest_tree for t in tasks)
    if options.record_rounds:  # the measurement pass over the whole pool, past a round's commit
        largest = max(largest, RoundRecorder.slots(session.pool.size))
    config = DecodeConfig(budget=largest, max_new_tokens=options.max_new_tokens)
    for prompt in {t.prompt.id: t.prompt for t in tasks}.values():
        turns = list(prompt.turns)
        bare = [x for user in turns for x in (user, "")][:-1]  # every user turn, empty answers between
        need = len(session.tokenizer.chat_ids(bare)) + (len(turns) - 1) * (options.max_new_tokens + ANSWER_SLACK)
        try:
            config.check_fits(need, session.target.capacity)
        except InputError as e:
            raise type(e)(f"prompt {prompt.id!r}: {e}") from None


def _drafter_launch(text: str | None) -> tuple[ModelOptions | None, dict | None]:
    if text is None:
        return None, None
    try:
        launch = json.loads(text)
        return ModelOptions(**launch["options"]), dict(launch.get("env") or {})
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise InputError(f"`drafter_launch` must be JSON with the drafter's model options ({e})") from None
