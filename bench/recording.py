"""python -m bench.recording: what keeping retained rows costs a recording, per round and in the rounds file.

python -m bench.recording [--prompts SOURCE] [--limit N] [--temperatures 0,1] [--max-new-tokens 48]
                          [--decoder draft] [--budget 59] [--target SPEC] [--drafter SPEC]

In one process, the pair (the embedded SmolLM2 target and its int8 drafter on the CPU unless --target and
--drafter say otherwise; the drafter through a local feed) decodes each prompt at each temperature with the
paper's pool (top-k 10, depth 8, expand 10: 710 candidates) twice under the same verifier seed: once under a
recorder that keeps no retained rows (target_proc.recorder.RoundRecorder without the prompt: schema 1's
recording) and once under one that keeps them (with the prompt: the context pass, the matched, token-only,
cache, same-token and preceding rows, the root row's figures). The order alternates from one pair of decodes
to the next, so that drift hits both ways alike; recording changes no output, so both see the same rounds.

Reported: the recorder's seconds per round (RecordedRound.seconds: the measurement pass and its read-back,
and with rows the reductions and, in a decode's first round, the context pass), median and quartiles each
way over every round; the ratio with rows over without, per pair of decodes the ratio of their mean seconds
per round (the whole cost, context pass included), and of their median seconds per round, each as the median
over pairs with its range; the rounds file's bytes per round each way (each decode's rounds encoded as the
framed chunk a rounds file holds, evaluation.rounds and evaluation.rounds_file, as each recorder recorded
them) and the growth with rows: the mean from those chunks, the max over rounds from each round encoded
alone beside the same round recorded without rows. The issue's bounds: at most 1.5x a round, at most 4 KiB
a round. The load average is printed at the start and the end; the last line of stdout is one JSON document.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

from bench.common import at_least, bench_parser, close, command_line, load_bracket, refuse, spread
from models.options import INT8_SUFFIX, ModelOptions
from pipeline.config import ConfigError, PoolConfig
from pipeline.rules import SPECULATIVE
from timing.options import temperature_list

PAPER_POOL = PoolConfig()  # the paper's pool is the default one (launch/pair.sh --paper-pool): 710 candidates
TARGET = "smollm2"  # the embedded target
DRAFTER = "smollm2" + INT8_SUFFIX  # and its drafter
MOST_RATIO = 1.5  # the bounds: recording with rows over without, per round
MOST_GROWTH = 4096  # ... and the rounds file's growth, bytes a round
WAYS = ("without_rows", "with_rows")


@dataclass(frozen=True, slots=True)
class RecordingOptions:
    """Prompts and decodes"""

    prompts: str = field(default="builtin", metadata={
        "help": "a prompt source (builtin, humaneval, spec-bench:PATH, FILE.jsonl)", "metavar": "SOURCE"})
    limit: int = field(default=3, metadata={"help": "prompts decoded, spread over the source's categories"})
    temperatures: str = field(default="0,1", metadata={"help": "comma-separated", "metavar": "LIST"})
    max_new_tokens: int = field(default=48, metadata={"metavar": "N"})
    decoder: str = field(default="draft", metadata={"help": "the recording trajectory's rule"})
    budget: int = field(default=59, metadata={"help": "its tree budget", "metavar": "B"})
    target: str = field(default=TARGET, metadata={"help": "the target model", "metavar": "SPEC"})
    drafter: str = field(default=DRAFTER, metadata={"help": "the drafter model", "metavar": "SPEC"})
    seed: int = field(default=0, metadata={"help": "the prompt subset's and the verifier's seed", "metavar": "S"})

    def __post_init__(self) -> None:
        at_least("limit", self.limit, 1)
        at_least("max_new_tokens", self.max_new_tokens, 1)
        at_least("seed", self.seed, 0)
        if not 1 <= self.budget <= PAPER_POOL.size:
            raise ConfigError("budget", f"must be from 1 to the pool's {PAPER_POOL.size}, got {self.budget}")
        if self.decoder not in SPECULATIVE:
            raise ConfigError("decoder", f"must be a rule that drafts a tree ({', '.join(SPECULATIVE)}), "
                                         f"got {self.decoder!r}")
        self.temperature_list  # noqa: B018 (checked here)
        for name in ("target", "drafter"):
            try:
                ModelOptions(model=getattr(self, name))
            except ConfigError as e:
                raise ConfigError(name, str(e).removeprefix("`model` ")) from None

    @property
    def temperature_list(self) -> list[float]:
        return temperature_list(self.temperatures)


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(RecordingOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    prompts = chosen_prompts(options)
    with load_bracket() as load:
        print(f"load average at start: {load['before'][0]:.2f} {load['before'][1]:.2f} {load['before'][2]:.2f}",
              flush=True)
        pairs, threads = run(options, prompts)
    summary = summarize(pairs)
    summary.update(target=options.target, drafter=options.drafter, decoder=options.decoder, budget=options.budget,
                   pool={"topk": PAPER_POOL.topk, "depth": PAPER_POOL.depth, "expand": PAPER_POOL.expand,
                         "size": PAPER_POOL.size},
                   temperatures=options.temperature_list, prompts=[p.id for p in prompts],
                   max_new_tokens=options.max_new_tokens, threads=threads,
                   load_average=load)
    for line in render(summary):
        print(line)
    close(summary)
    return 0


def chosen_prompts(options: RecordingOptions) -> list:
    """The prompts, read before any model loads; one line naming --prompts when the source is not one."""
    from evaluation.prompts import PromptError, gather
    from programs.options import PromptOptions

    try:
        return gather(PromptOptions(prompts=(options.prompts,), limit_prompts=options.limit), options.seed)
    except (PromptError, ConfigError) as e:
        refuse(__spec__.name, f"--prompts {options.prompts}: {e}")


# -- the decodes ------------------------------------------------------------------------------------------

class Pair:
    """The loaded target and drafter, each decode's runners made afresh at the size it needs."""

    def __init__(self, options: RecordingOptions) -> None:
        from models.load import load

        self.target = load(ModelOptions(model=options.target), "target")
        self.drafter = load(ModelOptions(model=options.drafter), "drafter")
        self.threads = ModelOptions(model=options.target).cpu_threads  # as deployed: all cores for its passes
        self.eos = frozenset(self.target.tokenizer.eos)

    def recorded(self, ids: list[int], config, key: str, rows: bool) -> list:
        """One decode of `ids` under a recorder that keeps retained rows or not -> the rounds it recorded."""
        import torch

        from bench.prefill import LocalFeed
        from drafter_proc.drafter import Drafter
        from pipeline.decode import decode
        from pipeline.settings import stream_seed
        from target_proc.recorder import RoundRecorder
        from target_proc.target import Target

        capacity = config.kv_slots(len(ids)) + max(0, RoundRecorder.slots(PAPER_POOL.size) - config.largest_tree)
        target = Target(self.target.runner(capacity), self.threads)
        feed = LocalFeed(Drafter(self.drafter.runner(capacity + PAPER_POOL.n_expanded), PAPER_POOL))
        recorder = RoundRecorder(target, config, ids if rows else None)
        generator = torch.Generator().manual_seed(stream_seed(config.seed, key, config.decoder))
        decode(target, feed, ids, config, self.eos, generator, observe=recorder)
        return recorder.rounds


def run(options: RecordingOptions, prompts: list) -> tuple[list[dict], int]:
    """Each prompt at each temperature decoded both ways, the first way alternating from pair to pair, after
    one short warm-up decode off the record -> (per pair, each way's numbers; the threads of the target's
    passes that the recorder runs)."""
    from pipeline.settings import DecodeConfig

    pair = Pair(options)
    settings = dict(decoder=options.decoder, budget=options.budget, seed=options.seed)
    texts = {p.id: pair.target.tokenizer.prompt_ids(p.turns[0]) for p in prompts}
    first = prompts[0].id
    warm = DecodeConfig(temperature=options.temperature_list[0], max_new_tokens=min(8, options.max_new_tokens),
                        **settings)
    pair.recorded(texts[first], warm, first, rows=True)
    pairs = []
    for prompt in prompts:
        for temperature in options.temperature_list:
            config = DecodeConfig(temperature=temperature, max_new_tokens=options.max_new_tokens, **settings)
            key = {"prompt_id": prompt.id, "category": prompt.category, "turn": 0, "decoder": options.decoder,
                   "temperature": temperature, "budget": options.budget, "seed": options.seed}
            ways = WAYS if len(pairs) % 2 == 0 else WAYS[::-1]
            got = {way: decode_numbers(pair.recorded(texts[prompt.id], config, prompt.id, way == "with_rows"), key)
                   for way in ways}
            pairs.append({"prompt": prompt.id, "temperature": temperature, "first": ways[0], **got})
            print(f"{len(pairs)} {prompt.id} T={temperature:g}: {len(got['with_rows']['seconds'])} rounds, "
                  f"{ways[0]} first", file=sys.stderr, flush=True)
    return pairs, pair.threads[1]


def decode_numbers(rounds: list, key: dict) -> dict:
    """What the summary needs of one decode's recorded rounds: the recorder's seconds per round, the bytes of
    the decode's framed chunk in a rounds file and of each round encoded alone, and the tokens emitted."""
    from evaluation.rounds import encode_decode
    from evaluation.rounds_file import frame

    return {"seconds": [float(r.seconds) for r in rounds], "chunk_bytes": len(frame(encode_decode(key, rounds))),
            "round_bytes": [len(frame(encode_decode(key, [r]))) for r in rounds],
            "tokens": [int(t) for r in rounds for t in r.emitted]}


# -- the summary ------------------------------------------------------------------------------------------

def summarize(pairs: list[dict]) -> dict:
    """Per-round seconds each way, the paired ratios with rows over without, bytes per round and the growth."""
    out = {"pairs": len(pairs), "rounds": {}, "round_ms": {}, "first_round_ms": {}}
    for way in WAYS:
        seconds = np.concatenate([p[way]["seconds"] for p in pairs])
        out["rounds"][way] = len(seconds)
        out["round_ms"][way] = {**spread(1e3 * seconds), "mean": float(1e3 * seconds.mean())}
        out["first_round_ms"][way] = spread([1e3 * p[way]["seconds"][0] for p in pairs])
    out["ratio"] = {"of_means": paired(pairs, np.mean), "of_medians": paired(pairs, np.median)}
    out["bytes_per_round"] = file_growth(pairs)
    out["same_trajectories"] = sum(p["with_rows"]["tokens"] == p["without_rows"]["tokens"] for p in pairs)
    out["within_bounds"] = {"ratio": out["ratio"]["of_means"]["median"] <= MOST_RATIO,
                            "growth": out["bytes_per_round"]["growth_max"] <= MOST_GROWTH}
    return out


def paired(pairs: list[dict], statistic) -> dict:
    """Per pair of decodes, `statistic` of the per-round seconds with rows over that without: the median over
    pairs and the range."""
    ratios = [statistic(p["with_rows"]["seconds"]) / statistic(p["without_rows"]["seconds"]) for p in pairs]
    return {"median": float(np.median(ratios)), "min": float(min(ratios)), "max": float(max(ratios))}


def file_growth(pairs: list[dict]) -> dict:
    """Rounds file bytes per round each way (whole chunks), the mean growth with rows, and the largest growth
    of one round (each round alone, against the same round without rows: pairs whose trajectories agree)."""
    per_round = {way: sum(p[way]["chunk_bytes"] for p in pairs) / sum(len(p[way]["seconds"]) for p in pairs)
                 for way in WAYS}
    growth = [w - wo for p in pairs if p["with_rows"]["tokens"] == p["without_rows"]["tokens"]
              for w, wo in zip(p["with_rows"]["round_bytes"], p["without_rows"]["round_bytes"])]
    return {**per_round, "growth_mean": per_round["with_rows"] - per_round["without_rows"],
            "growth_max": max(growth) if growth else None}


def render(s: dict) -> list[str]:
    """The summary in lines."""
    ms, b = s["round_ms"], s["bytes_per_round"]
    lines = [f"{s['decoder']} at B={s['budget']}, pool {s['pool']['size']}, T in "
             f"{','.join(f'{t:g}' for t in s['temperatures'])}, {len(s['prompts'])} prompts, "
             f"{s['max_new_tokens']} new tokens, {s['threads']} threads; {s['pairs']} pairs of decodes"]
    for way in WAYS:
        lines.append(f"  {way.replace('_', ' '):<13} {s['rounds'][way]:4d} rounds, recorder ms per round: median "
                     f"{ms[way]['median']:.1f} [{ms[way]['q1']:.1f}, {ms[way]['q3']:.1f}], mean {ms[way]['mean']:.1f};"
                     f" first round {s['first_round_ms'][way]['median']:.1f}; file {b[way]:.0f} bytes per round")
    for name, r in s["ratio"].items():
        lines.append(f"  with rows over without, {name.replace('_', ' ')} per round: median {r['median']:.3f} "
                     f"[{r['min']:.3f}, {r['max']:.3f}] (at most {MOST_RATIO})")
    growth_max = "—" if b["growth_max"] is None else f"{b['growth_max']}"
    lines.append(f"  file growth with rows: {b['growth_mean']:.0f} bytes per round on average, {growth_max} at most "
                 f"(at most {MOST_GROWTH}); same trajectory in {s['same_trajectories']} of {s['pairs']} pairs")
    lines.append(f"  load average {s['load_average']['before'][0]:.2f} at start, {s['load_average']['after'][0]:.2f} "
                 f"at the end")
    return lines


if __name__ == "__main__":
    sys.exit(main())
