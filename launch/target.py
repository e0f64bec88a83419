"""python -m launch.target: the target process of a decode run (launch/pair.sh starts it with its drafter).

Loads the target, connects to the drafter at --endpoint and runs every requested decode. A live line per
decode goes to stderr; with --json, stdout carries one JSON record per decode as soon as it ends.
`build_parser` and `parse` are shared with the sweep's target process (timing.sweep).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

from launch.cli import (add_endpoint, add_log_level, add_options, endpoint_option, flags_of, from_options,
                        run_program, setup_logging)
from launch.options import ConnectOptions, KeyOptions, RunOptions
from launch.prompts import Prompt, gather
from models.options import ModelOptions
from pipeline.config import PoolConfig
from pipeline.decode import PHASES
from target_proc.session import Session, open_session

log = logging.getLogger("target")


@dataclass(frozen=True, slots=True)
class TargetArgs:
    model: ModelOptions
    pool: PoolConfig
    connect: ConnectOptions
    run: object  # the program's run options: RunOptions or SweepOptions
    endpoint: str
    namespace: argparse.Namespace  # for the program's own extra arguments


def build_parser(prog: str, description: str, run_cls: type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_options(parser, ModelOptions)
    add_endpoint(parser, "the drafter's ipc://PATH or tcp://HOST:PORT")
    add_options(parser, PoolConfig, prefix="pool-")
    add_options(parser, run_cls)
    add_options(parser, ConnectOptions)
    add_options(parser, KeyOptions, skip=("curve",))  # CURVE is on when --drafter-key names the drafter
    add_log_level(parser)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None, run_cls: type) -> TargetArgs:
    """Parse and check; a bad value exits with a usage error naming its flag."""
    ns = parser.parse_args(argv)
    args = TargetArgs(from_options(parser, ns, ModelOptions), from_options(parser, ns, PoolConfig, prefix="pool-"),
                      from_options(parser, ns, ConnectOptions), from_options(parser, ns, run_cls),
                      endpoint_option(parser, ns.endpoint), ns)
    setup_logging("target" if run_cls is RunOptions else "timing", ns.log_level)
    return args


def connect(args: TargetArgs):
    """The session context of a target program: load, connect and handshake."""
    return open_session(args.model, args.endpoint, args.pool, args.connect.drafter_timeout,
                        args.connect.ready_timeout, args.connect.drafter_key, args.namespace.key_dir)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("python -m launch.target", "The target process: drives the rounds of every decode.",
                          RunOptions)
    args = parse(parser, argv, RunOptions)

    def body() -> int:
        run: RunOptions = args.run
        prompts = gather(run.sources, run.decode.seed)
        emit = (lambda record: print(json.dumps(record), flush=True)) if run.json else None
        with connect(args) as session:
            records = run_decodes(session, prompts, run, emit)
        if not run.json:
            print_summary(records, args.pool)
        return 0

    return run_program(body, flags_of(parser))


def run_decodes(session: Session, prompts: list[Prompt], run: RunOptions,
                emit: Callable[[dict], None] | None = None) -> list[dict]:
    """Every decode of every prompt; each record goes to `emit` as soon as its decode ends."""
    records = []
    for index, prompt in enumerate(prompts):
        ids = session.tokenizer.prompt_ids(prompt.text)
        for config in run.configs():
            result = session.decode(ids, config, prompt.id)
            record = {
                "decoder": config.decoder, "temperature": config.temperature, "budget": config.budget,
                "seed": config.seed, "prompt_index": index, "prompt_id": prompt.id, "new_tokens": result.tokens,
                "text": session.tokenizer.decode(result.tokens), "rounds": len(result.rounds),
                "target_passes": result.target_passes, "seconds": result.seconds,
                "tokens_per_second": result.tokens_per_second, "hit_limit": result.hit_limit,
                "accepted_per_round": [r.accepted for r in result.rounds],
                "tree_sizes": [r.tree_size for r in result.rounds],
                "prefill_seconds": result.prefill_seconds,
                "round_phases": {name: [r.phases.get(name, 0.0) for r in result.rounds] for name in PHASES},
            }
            records.append(record)
            log.info("prompt %d seed %d %-10s %4d tokens %6.2f s %7.1f tok/s", index, config.seed, config.decoder,
                     len(result.tokens), result.seconds, result.tokens_per_second)
            if emit is not None:
                emit(record)
    return records


def print_summary(records: list[dict], pool: PoolConfig) -> None:
    if not records:
        return
    first = records[0]
    print(f"--- prompt {first['prompt_id']}, {first['decoder']}:\n{first['text'].strip()}\n")
    print(f"pool: topk={pool.topk} depth={pool.depth} expand={pool.expand}; T={first['temperature']} "
          f"B={first['budget']}")
    print(f"{'decoder':<11}{'decodes':>8}{'tokens':>8}{'seconds':>9}{'tok/s':>8}{'accepted/round':>16}"
          f"{'tokens/pass':>13}")
    for decoder in dict.fromkeys(r["decoder"] for r in records):
        rows = [r for r in records if r["decoder"] == decoder]
        tokens = sum(len(r["new_tokens"]) for r in rows)
        seconds = sum(r["seconds"] for r in rows)
        accepted = [a for r in rows for a in r["accepted_per_round"]]
        passes = sum(r["target_passes"] for r in rows)
        print(f"{decoder:<11}{len(rows):>8}{tokens:>8}{seconds:>9.2f}{tokens / seconds:>8.1f}"
              f"{sum(accepted) / len(accepted):>16.2f}{tokens / passes:>13.2f}")


if __name__ == "__main__":
    sys.exit(main())
