"""python -m training.agreement: how far a head's agreement with its target carries to prompts it was not
trained on.

The target answers the prompts greedily and the head drafts from every position of each answer through the
training-time test's unrolled steps (training.ttt): per step, its top-1 and top-3 agreement with the target's
most likely token (docs/training.md gives the figures and --against's comparison of two heads). The last line
of stdout is one JSON document with every figure."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from training.batched import answer_batch
from training.cli import device_arguments
from training.distill import read_shard, shard_path
from training.ttt import agreement, answer_counts, shares


def compared(mine: list[torch.Tensor], theirs: list[torch.Tensor], seed: int = 0) -> dict:
    """The first step's top-1 agreement of one head over another's on the same answers: the ratio less one,
    with a 95% interval from resampling the prompts (paired: both heads' hits of a resample's prompts)."""
    from evaluation.stats import paired_gains

    kept = [j for j, c in enumerate(mine) if c[0, 0] > 0]  # an answer with no scored row says nothing
    rows = [float(mine[j][0, 0]) for j in kept]
    hits = {name: [float(c[j][1, 0]) for j in kept] for name, c in (("head", mine), ("against", theirs))}
    if len(kept) < 2 or not sum(hits["against"]):
        why = "fewer than 2 prompts with rows" if len(kept) < 2 else "no hit to compare against"
        share = {name: sum(h) / max(sum(rows), 1) for name, h in hits.items()}
        return {"top1_step1": share["head"], "against_top1_step1": share["against"], "gain": None, "low": None,
                "high": None, "prompts": len(kept), "interval": f"none ({why})"}
    g = paired_gains(hits, {"head": rows, "against": rows}, [("head", "against")], rng=seed)["head", "against"]
    return {"top1_step1": g.speed_a, "against_top1_step1": g.speed_b, "gain": g.gain,
            "low": g.low if g.has_interval else None, "high": g.high if g.has_interval else None,
            "prompts": g.n_prompts, "interval": g.interval_text()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training.agreement", description=__doc__.split("\n\n")[0])
    p.add_argument("--head", type=Path, required=True, help="a head's directory (as --drafter eagle3:DIR takes it)")
    p.add_argument("--target", default="smollm2", help="its target (default: %(default)s)")
    p.add_argument("--prompts", action="append", default=[], help="prompt source, repeatable, as a sweep takes it")
    p.add_argument("--limit", type=int, default=12, help="prompts (default: %(default)s)")
    p.add_argument("--stratify", choices=("category", "group"), default="group",
                   help="spread --limit over categories or Spec-Bench's groups, under seed 0 (default: %(default)s)")
    p.add_argument("--max-new", type=int, default=96, help="answer tokens at most (default: %(default)s)")
    p.add_argument("--steps", type=int, default=3, help="drafting steps unrolled (default: %(default)s)")
    p.add_argument("--against", type=Path, metavar="HEAD", help="another head for the same target, scored on the "
                   "same answers: its agreement, and the first head's gain over it with a paired prompt interval")
    p.add_argument("--work", type=Path, help="a training's work directory: its first shards' answers scored too")
    p.add_argument("--shards", type=int, default=2, help="of --work's shards, how many (default: %(default)s)")
    device_arguments(p, "drafts")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = checked(p, p.parse_args(argv))
    try:
        setup = prepare(args)
    except (OSError, ValueError) as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    report = measure(args, setup)
    say(report, args)
    print(json.dumps(report))
    return 0


def checked(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """The command line's values, or a usage error naming the flag."""
    for name in ("limit", "max_new", "steps", "shards"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not args.prompts:
        p.error("--prompts: name at least one prompt source (spec-bench:PATH, humaneval, a .jsonl file)")
    if args.work is not None and not shard_path(args.work, 0).is_file():
        p.error(f"--work: {args.work} holds no training shard ({shard_path(args.work, 0).name})")
    return args


def prepare(args: argparse.Namespace) -> dict:
    """Everything read and loaded before any answer: the shards (a damaged one is said first), the prompts, the
    target, the heads built for it and the target layers they fuse. ValueError or OSError in one line."""
    from evaluation.prompts import gather
    from models.eagle3 import Eagle3Head
    from models.eagle3_config import read_head
    from programs.options import PromptOptions
    from training.cli import check_device, load_target

    check_device(args.device)
    shards = [] if args.work is None else [shard_path(args.work, s) for s in range(args.shards)
                                           if shard_path(args.work, s).is_file()]
    trained = [a for path in shards for a in read_shard(path)]
    heads = [read_head(path) for path in (args.head, args.against) if path is not None]
    chosen = gather(PromptOptions(prompts=tuple(args.prompts), limit_prompts=args.limit, stratify=args.stratify),
                    0)[: args.limit]
    model, tokenizer = load_target(args.target, args.device, args.dtype)
    text_config = model.config.get_text_config()
    shape = text_config.hidden_size, text_config.vocab_size, text_config.num_hidden_layers
    built = []
    for (cfg, weights), path in zip(heads, (args.head, args.against)):
        try:
            cfg.check_target(*shape)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        embed = None if "embed_tokens.weight" in weights else model.get_input_embeddings().weight.detach().float()
        built.append(Eagle3Head.build(cfg, weights, embed, model.device, torch.float32))
    layers = [cfg.feature_layers(shape[2]) for cfg, _ in heads]
    if layers[-1] != layers[0]:
        raise ValueError(f"the heads fuse different target layers ({layers[0]} and {layers[-1]}): their "
                         f"answers' features differ")
    return {"shards": shards, "trained": trained, "chosen": chosen, "model": model, "tokenizer": tokenizer,
            "heads": built, "layers": layers[0]}


def measure(args: argparse.Namespace, setup: dict) -> dict:
    """The target answers the prompts; each head's agreement on its answers (and on the shards'), by group."""
    from evaluation.summary import category_group, group_order
    from training.cli import ends_and_pad

    head, tokenizer, chosen = setup["heads"][0], setup["tokenizer"], setup["chosen"]
    ends, pad = ends_and_pad(tokenizer)
    answers = answer_batch(setup["model"], [tokenizer.chat_ids([q.text]) for q in chosen], sample=False,
                           max_new=args.max_new, end_ids=ends, pad_id=pad, layers=setup["layers"], seed=0)
    counts = [answer_counts(head, a, args.steps) for a in answers]
    groups = [category_group(q.category) for q in chosen]
    by_group = lambda c: {g: shares([x for x, h in zip(c, groups) if h == g])  # noqa: E731
                          for g in group_order(groups)}  # a few prompts each: where a head falls short
    report = {"head": str(args.head), "target": args.target, "prompts": len(chosen), "max_new": args.max_new,
              "held_out": shares(counts), "held_out_by_group": by_group(counts)}
    if args.against is not None:
        theirs = [answer_counts(setup["heads"][1], a, args.steps) for a in answers]
        report["against"] = {"head": str(args.against), "held_out": shares(theirs),
                             "held_out_by_group": by_group(theirs), **compared(counts, theirs)}
    if args.work is not None:
        report["training"] = agreement(head, setup["trained"], args.steps)
        report["training_shards"] = len(setup["shards"])
    return report


def say(report: dict, args: argparse.Namespace) -> None:
    """The report in lines: agreement per step, by group, and against the second head."""
    from evaluation.stats import percent

    for name in ("held_out", "training"):
        if name in report:
            r = report[name]
            steps = "; ".join(f"step {k + 1}: top-1 {t1:.3f}, top-3 {t3:.3f}"
                              for k, (t1, t3) in enumerate(zip(r["top1"], r["top3"])))
            print(f"{name.replace('_', '-')} ({r['rows'][0]} rows): {steps}")
    print("held-out by group, step 1: " + "; ".join(f"{g} {r['top1'][0]:.3f} ({r['rows'][0]} rows)"
                                                    for g, r in report["held_out_by_group"].items()))
    if args.against is not None:
        c = report["against"]
        print("against's by group, step 1: " + "; ".join(f"{g} {r['top1'][0]:.3f}"
                                                        for g, r in c["held_out_by_group"].items()))
        print(f"against {args.against}: held-out top-1 at step 1 {c['top1_step1']:.3f} against "
              f"{c['against_top1_step1']:.3f}: {'no gain' if c['gain'] is None else percent(c['gain'])}, 95% "
              f"interval over {c['prompts']} prompts {c['interval']}")


if __name__ == "__main__":
    sys.exit(main())
