"""`launch/pair.sh pool`: the pool a drafter grows to follow raw token ids as the committed context.

    launch/pair.sh pool --target SPEC --drafter SPEC --prompt-ids 1,2,3 [pool options, --paper-pool] [--json]

The ids are taken as they are (no chat template), as the drafter's Start would carry them; an EAGLE-3
drafter gets the target's features of them too (the target prefills all but the last). Both models run in
this one process, on one device. The pool comes out in pool order: its tokens, parents (pool indices, -1 for
the root) and scores (cumulative draft log-probabilities), as one JSON object with --json, else a table."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from models.options import DEFAULT_DRAFTER, EMBEDDED, EMBEDDED_POOL, ModelOptions, drafted_for, embedded_pool
from pipeline.config import ConfigError, PoolConfig
from programs.cli import (EXIT_OK, Parser, add_log_level, add_options, flags_of, from_options, parse_token_ids,
                          run_program, setup_logging)

SLACK = 16  # KV slots past the context and the pool's scratch


def build_parser(prog: str) -> Parser:
    parser = Parser(prog=prog, description="Print the pool a drafter grows after raw token ids (no chat template).")
    parser.add_argument("--target", metavar="SPEC",
                        help=f"the target (an EAGLE-3 drafter takes its features; default: the one the drafter was "
                             f"made for, else {EMBEDDED})")
    parser.add_argument("--drafter", metavar="SPEC", default=DEFAULT_DRAFTER,
                        help=f"the drafter, as launch/pair.sh names one (default {DEFAULT_DRAFTER})")
    parser.add_argument("--prompt-ids", metavar="IDS", required=True, help="the committed context: ids, comma-separated")
    flags_of(parser)["prompt_ids"] = "--prompt-ids"
    parser.add_argument("--device", default="cpu", help="torch device of both models (default: cpu)")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16 (default: auto)")
    parser.add_argument("--paper-pool", action="store_true",
                        help=f"the paper's pool (top-k {PoolConfig().topk}, depth {PoolConfig().depth}, expand "
                             f"{PoolConfig().expand}: {PoolConfig().size} candidates)")
    add_options(parser, PoolConfig, prefix="pool-", defaults=dict.fromkeys(("topk", "depth", "expand")))
    head = embedded_pool(DEFAULT_DRAFTER)
    parser.epilog = (f"Pool: the one a decode run of the same pair uses: for {EMBEDDED}, the CPU pool (top-k "
                     f"{head.topk}, depth {head.depth}, expand {head.expand} with a head; depth {EMBEDDED_POOL.depth} "
                     f"with a standalone drafter), else the paper's, unless --pool-* or --paper-pool say otherwise.")
    parser.add_argument("--json", action="store_true", help="print one JSON object (default: a table)")
    add_log_level(parser)  # INFO: the models' loads and the kernels' timing are said as they start
    return parser


def context_pool(target, drafter, ids: list[int], config: PoolConfig):
    """The pool `drafter` (models.load.Loaded) grows after `ids`; an EAGLE-3 drafter from the features the
    target (a Loaded, loaded only then) gives them -> pipeline.pool.Pool."""
    capacity = len(ids) + config.n_expanded + SLACK
    if not drafter.is_head:
        from drafter_proc.drafter import Drafter

        return Drafter(drafter.runner(capacity), config).start(ids).pool
    from drafter_proc.head import HeadDrafter
    from target_proc.target import Target

    if len(ids) < 2:
        raise ConfigError("prompt_ids", "must hold two ids at least for an EAGLE-3 drafter (the features of one "
                          "beside the embedding of the next)")
    head = HeadDrafter(drafter.runner(capacity), config)
    side = Target(target.runner(capacity))
    side.keep_features(head_layers(drafter, target))
    side.prefill(ids[:-1])
    features = side.features(0, len(ids) - 1).to(head.runner.device)
    return head.start(ids, features).pool


def head_layers(drafter, target) -> tuple[int, ...]:
    """The target layers whose inputs an EAGLE-3 drafter takes (any one for the mock head)."""
    return drafter.model.feature_layers(target.shape[1])


def chosen_pool(parser: argparse.ArgumentParser, ns, notes: list[str]) -> PoolConfig:
    """The pool of the pair in `ns`, the same in a decode run, a sweep and `launch/pair.sh pool`: the paper's
    with --paper-pool, the one --pool-* give (the rest the paper's), else the CPU pool for the embedded target
    (models.options.embedded_pool, by the drafter), named or not, and the paper's for any other; a default is
    said in `notes`."""
    given = {k: getattr(ns, "pool_" + k) for k in ("topk", "depth", "expand")}
    if ns.paper_pool:
        if any(v is not None for v in given.values()):
            parser.error("--paper-pool sets --pool-topk, --pool-depth and --pool-expand: give one or the others")
        return PoolConfig()
    if any(v is not None for v in given.values()):
        chosen = {"pool_" + k: getattr(PoolConfig(), k) if v is None else v for k, v in given.items()}
        return from_options(parser, argparse.Namespace(**chosen), PoolConfig, prefix="pool-")
    pool = embedded_pool(ns.drafter) if ns.target == EMBEDDED else PoolConfig()
    notes.append(f"embedded target {EMBEDDED} on the CPU: pool reduced to {_sizes(pool)} (paper: 10, 8, 10); "
                 f"--pool-* options or --paper-pool change it" if ns.target == EMBEDDED else
                 f"pool: the paper's, {_sizes(pool)} ({pool.size} candidates); --pool-* options change it")
    return pool


def _sizes(pool: PoolConfig) -> str:
    return f"topk={pool.topk} depth={pool.depth} expand={pool.expand}"


def pair_of(ns) -> None:
    """The pool program's pair in `ns`: a drafter alone stands beside the target it was made for, as in a decode
    run (models.options.drafted_for), else beside the embedded target."""
    ns.target = ns.target or drafted_for(ns.drafter) or EMBEDDED


def main(argv: list[str] | None = None, prog: str = "python -m programs.pool_program") -> int:
    parser = build_parser(prog)
    ns = parser.parse_args(argv)
    ids = parse_token_ids(ns.prompt_ids)
    if isinstance(ids, str) or not ids or min(ids) < 0:
        parser.error(f"--prompt-ids must list token ids (integers >= 0), comma-separated, got {ns.prompt_ids!r}")
    notes: list[str] = []
    pair_of(ns)
    config = chosen_pool(parser, ns, notes)
    for note in notes:
        print(f"[pool] {note}", file=sys.stderr)
    setup_logging("pool", ns.log_level)

    def body() -> int:
        logging.getLogger("pool").info("the pool of %s (top-k %d, depth %d, expand %d: %d candidates) after %d ids, "
                                       "its target %s, on %s: loading both", ns.drafter, config.topk, config.depth,
                                       config.expand, config.size, len(ids), ns.target, ns.device)
        import torch

        from models.load import load

        torch.manual_seed(0)
        common = dict(device=ns.device, dtype=ns.dtype, max_context=max(16, len(ids) + config.n_expanded + SLACK))
        target = load(ModelOptions(model=ns.target, **common), "target")
        drafter = load(ModelOptions(model=ns.drafter, head_target=ns.target, **common), "drafter")
        if max(ids) >= drafter.vocab_size:
            raise ConfigError("prompt_ids", f"holds id {max(ids)}, outside the drafter's vocabulary of "
                                            f"{drafter.vocab_size}")
        pool = context_pool(target, drafter, list(ids), config)
        out = {"tokens": pool.token.tolist(), "parents": pool.parent.tolist(),
               "scores": [float(s) for s in pool.cum]}
        if ns.json:
            print(json.dumps(out))
        else:
            print("index\tparent\ttoken\tscore")
            for i, (t, p, s) in enumerate(zip(out["tokens"], out["parents"], out["scores"])):
                print(f"{i}\t{p}\t{t}\t{s:.4f}")
        sys.stdout.flush()
        return EXIT_OK

    return run_program(body, flags_of(parser))


if __name__ == "__main__":
    raise SystemExit(main())
