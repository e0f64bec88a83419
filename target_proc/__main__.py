"""python -m target_proc: load the target, connect to the drafter, run every requested decode.

With --json, stdout carries one JSON object per decode, written as soon as it ends; logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys

from pipeline.config import PoolConfig
from pipeline.decode import PHASES
from pipeline.prompts import Prompt, load_prompts
from target_proc.cli import build_parser, parse, run_reporting
from target_proc.options import RunOptions
from target_proc.session import open_session

log = logging.getLogger("target")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("python -m target_proc", "The target process: drives the rounds of every decode.",
                          RunOptions)
    args = parse(parser, argv, RunOptions)
    try:
        prompts = gather_prompts(args.run)
    except ValueError as e:
        parser.error(str(e))

    def body() -> int:
        with open_session(args.model, args.endpoint, args.pool, args.run.drafter_timeout,
                          args.run.ready_timeout) as session:
            results = run_decodes(session, prompts, args.run)
        if not args.run.json:
            print_summary(results, args.pool)
        return 0

    return run_reporting(body, log, "target")


def gather_prompts(run: RunOptions) -> list[Prompt]:
    prompts = [Prompt(f"prompt/{i}", "cli", text) for i, text in enumerate(run.prompt)]
    if run.prompts:
        prompts += load_prompts(run.prompts)
    return prompts or load_prompts("builtin")


def run_decodes(session, prompts: list[Prompt], run: RunOptions) -> list[dict]:
    results = []
    for index, prompt in enumerate(prompts):
        ids = session.tokenizer.prompt_ids(prompt.text)
        for seed in range(run.seed, run.seed + run.num_seeds):
            for decoder in run.decoder_list:
                result = session.decode(ids, run.decode_config(decoder, seed), prompt.id)
                record = {
                    "decoder": decoder, "temperature": run.temperature, "budget": run.budget, "seed": seed,
                    "prompt_index": index, "prompt_id": prompt.id, "new_tokens": result.tokens,
                    "text": session.tokenizer.decode(result.tokens), "rounds": len(result.rounds),
                    "target_passes": result.target_passes, "seconds": result.seconds,
                    "tokens_per_second": result.tokens_per_second, "hit_limit": result.hit_limit,
                    "accepted_per_round": [r.accepted for r in result.rounds],
                    "tree_sizes": [r.tree_size for r in result.rounds],
                    "prefill_seconds": result.prefill_seconds,
                    "round_phases": {name: [r.phases.get(name, 0.0) for r in result.rounds]
                                     for name in PHASES},
                }
                results.append(record)
                if run.json:
                    print(json.dumps(record), flush=True)
                else:
                    log.info("prompt %d seed %d %-10s %4d tokens %6.2f s %7.1f tok/s", index, seed, decoder,
                             len(result.tokens), result.seconds, result.tokens_per_second)
    return results


def print_summary(results: list[dict], pool: PoolConfig) -> None:
    if not results:
        return
    first = results[0]
    print(f"--- prompt {first['prompt_id']}, {first['decoder']}:\n{first['text'].strip()}\n")
    print(f"pool: topk={pool.topk} depth={pool.depth} expand={pool.expand}; T={first['temperature']} "
          f"B={first['budget']}")
    print(f"{'decoder':<11}{'decodes':>8}{'tokens':>8}{'seconds':>9}{'tok/s':>8}{'accepted/round':>16}"
          f"{'tokens/pass':>13}")
    for decoder in dict.fromkeys(r["decoder"] for r in results):
        rows = [r for r in results if r["decoder"] == decoder]
        tokens = sum(len(r["new_tokens"]) for r in rows)
        seconds = sum(r["seconds"] for r in rows)
        accepted = [a for r in rows for a in r["accepted_per_round"]]
        passes = sum(r["target_passes"] for r in rows)
        print(f"{decoder:<11}{len(rows):>8}{tokens:>8}{seconds:>9.2f}{tokens / seconds:>8.1f}"
              f"{sum(accepted) / len(accepted):>16.2f}{tokens / passes:>13.2f}")


if __name__ == "__main__":
    sys.exit(main())
