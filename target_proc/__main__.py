"""python -m target_proc: load the target, connect to the drafter, run every requested decode.

With --json, stdout carries one JSON object per decode, written as soon as it ends; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from models.load import ModelNotFound
from models.options import ModelOptions
from pipeline.cli import add_options, from_options
from pipeline.config import PoolConfig
from pipeline.prompts import Prompt, load_prompts
from protocol.errors import PeerDied, PeerTimeout, ProtocolError
from protocol.transport import check_endpoint
from target_proc.options import RunOptions
from target_proc.session import open_session

log = logging.getLogger("target")
PHASES = ("draft", "root", "wait", "select", "tree", "commit")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m target_proc",
                                     description="The target process: drives the rounds of every decode.")
    add_options(parser, ModelOptions)
    parser.add_argument("--endpoint", required=True, help="the drafter's ipc://PATH or tcp://HOST:PORT")
    add_options(parser, PoolConfig, prefix="pool-")
    add_options(parser, RunOptions)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    model = from_options(parser, ns, ModelOptions)
    pool = from_options(parser, ns, PoolConfig, prefix="pool-")
    run = from_options(parser, ns, RunOptions)
    try:
        endpoint = check_endpoint(ns.endpoint)
        prompts = gather_prompts(run)
    except ValueError as e:
        parser.error(str(e))
    logging.basicConfig(level=logging.INFO, format="[target] %(message)s", stream=sys.stderr)
    try:
        with open_session(model, endpoint, pool, run.drafter_timeout, run.ready_timeout) as session:
            results = run_decodes(session, prompts, run)
    except (ModelNotFound, ValueError) as e:
        log.error("%s", e)
        return 2
    except (ProtocolError, PeerDied, PeerTimeout) as e:
        log.error("%s: %s", type(e).__name__, e)
        return 3
    except KeyboardInterrupt:
        return 130
    if not run.json:
        print_summary(results, pool)
    return 0


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
