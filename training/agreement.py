"""python -m training.agreement: how far a head's agreement with its target carries to prompts it was not
trained on.

The target answers the prompts greedily (the answers and features the training records, training.distill),
and the head drafts from every position of each answer at once through the training-time test's unrolled steps
(training.ttt), its own outputs fed back. Per drafting step: the share of the answers' rows whose top draft
token is the target's most likely next token (top-1), and whose three most likely draft tokens hold it
(top-3), in all and by Spec-Bench's group of the prompts' categories. Beside the same figures on the
training's own answers (`--work`, its shards) they tell a head that learnt its training prompts from one that
learnt its target: a decode accepts what the first figures say.

    python -m training.agreement --head DIR --prompts SOURCE [--limit N] [--stratify group] [--work DIR]

The last line of stdout is one JSON document with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from training.cli import device_arguments
from training.distill import Answer, answer_batch, read_shard, shard_path
from training.ttt import scored_rows, unrolled_rows

TOP = 3  # the wider of the two agreements: a tree keeps a few first tokens


def agreement(head, answers: list[Answer], steps: int) -> dict[str, list[float]]:
    """Per drafting step over `answers`' rows from each answer's start: {"rows", "top1", "top3"} (shares)."""
    rows, top1, top3 = [0] * steps, [0] * steps, [0] * steps
    dev = head.device
    with torch.inference_mode():
        for a in answers:
            tokens, argmax = a.tokens.to(dev), a.argmax.to(dev).long()
            for k, logits in enumerate(unrolled_rows(head, tokens, a.features.to(dev, torch.float32), steps)):
                row, keep = scored_rows(len(tokens), a.start, k, dev)
                want = argmax[row][keep]
                drafted = head.ids[logits[keep].topk(min(TOP, logits.shape[-1]), -1).indices]  # (r, TOP) target ids
                rows[k] += len(want)
                top1[k] += int((drafted[:, 0] == want).sum())
                top3[k] += int((drafted == want[:, None]).any(-1).sum())
    return {"rows": rows, "top1": [h / max(r, 1) for h, r in zip(top1, rows)],
            "top3": [h / max(r, 1) for h, r in zip(top3, rows)]}


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
    p.add_argument("--work", type=Path, help="a training's work directory: its first shards' answers scored too")
    p.add_argument("--shards", type=int, default=2, help="of --work's shards, how many (default: %(default)s)")
    device_arguments(p, "drafts")
    return p


def main(argv: list[str] | None = None) -> int:
    from evaluation.prompts import gather
    from evaluation.summary import category_group, group_order
    from models.eagle3 import Eagle3Head
    from models.eagle3_config import read_head
    from programs.options import PromptOptions
    from training.cli import check_device, ends_and_pad, load_target

    p = build_parser()
    args = p.parse_args(argv)
    for name in ("limit", "max_new", "steps", "shards"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if not args.prompts:
        p.error("--prompts: name at least one prompt source (spec-bench:PATH, humaneval, a .jsonl file)")
    if args.work is not None and not shard_path(args.work, 0).is_file():
        p.error(f"--work: {args.work} holds no training shard ({shard_path(args.work, 0).name})")
    try:
        check_device(args.device)
        cfg, weights = read_head(args.head)
        chosen = gather(PromptOptions(prompts=tuple(args.prompts), limit_prompts=args.limit, stratify=args.stratify),
                        0)[: args.limit]
        texts = [q.text for q in chosen]
        model, tokenizer = load_target(args.target, args.device, args.dtype)
    except (OSError, ValueError) as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    text_config = model.config.get_text_config()
    cfg.check_target(text_config.hidden_size, text_config.vocab_size, text_config.num_hidden_layers)
    embed = None if "embed_tokens.weight" in weights else model.get_input_embeddings().weight.detach().float()
    head = Eagle3Head.build(cfg, weights, embed, model.device, torch.float32)
    ends, pad = ends_and_pad(tokenizer)
    answers = answer_batch(model, [tokenizer.chat_ids([t]) for t in texts], sample=False, max_new=args.max_new,
                           end_ids=ends, pad_id=pad, layers=cfg.feature_layers(text_config.num_hidden_layers), seed=0)
    report = {"head": str(args.head), "target": args.target, "prompts": len(texts), "max_new": args.max_new,
              "held_out": agreement(head, answers, args.steps)}
    groups = [category_group(q.category) for q in chosen]
    report["held_out_by_group"] = {g: agreement(head, [a for a, h in zip(answers, groups) if h == g], args.steps)
                                   for g in group_order(groups)}  # a few prompts each: where a head falls short
    if args.work is not None:
        shards = [shard_path(args.work, s) for s in range(args.shards) if shard_path(args.work, s).is_file()]
        report["training"] = agreement(head, [a for s in shards for a in read_shard(s)], args.steps)
        report["training_shards"] = len(shards)
    for name in ("held_out", "training"):
        if name in report:
            r = report[name]
            steps = "; ".join(f"step {k + 1}: top-1 {t1:.3f}, top-3 {t3:.3f}"
                              for k, (t1, t3) in enumerate(zip(r["top1"], r["top3"])))
            print(f"{name.replace('_', '-')} ({r['rows'][0]} rows): {steps}")
    print("held-out by group, step 1: " + "; ".join(f"{g} {r['top1'][0]:.3f} ({r['rows'][0]} rows)"
                                                    for g, r in report["held_out_by_group"].items()))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
