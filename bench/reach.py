"""python -m bench.reach: what do the pools hold, beside what the trees take from them?

Its results: results/cpu-smollm2-reach.txt (results/benchmarks.md); it backs README.md's line on the head's
pools bounding tau (verifying every candidate would make 3.00 a round) and docs/training.md's.

Each decoder decodes each prompt at T = 0 in this process, keeping every round's pool. At T = 0 the output
from a round's root on is the target's greedy continuation, so the pool's reach (how many of the next tokens it
holds as a path: Pool.path) bounds what any tree from it could accept. Per decoder: rounds, tau, the whole-pool
tau (that bound's mean over the same rounds), the pools' median size, and how often the target's next token was
the pool's likeliest first candidate, among its three likeliest, or in its first level. A tau well below the
whole-pool tau: the budget or the rule leaves tokens in the pool; the two close: the drafter limits. Nothing is
timed. The last line of the output is one JSON document."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

from bench.common import bench_parser, close, command_line, refuse
from bench.pair import BenchPrompts, prompts_or_refuse
from pipeline.config import ConfigError, InputError, PoolConfig, check_int, split_list
from pipeline.settings import DecodeConfig
from programs.options import check_decoders


@dataclass(frozen=True, slots=True)
class ReachOptions(BenchPrompts):
    """Prompts, the pair and its decodes"""

    budget: int = field(default=8, metadata={"help": "the tree budget B of every round", "metavar": "B"})
    decoders: str = field(default="draft", metadata={
        "help": "decoders to decode with, comma-separated (not ar: it has no pool)", "metavar": "LIST"})
    target: str = field(default="", metadata={"help": "the pair's target (default: the embedded pair)"})
    drafter: str = field(default="", metadata={"help": "the pair's drafter (default: the pair's default)"})
    paper_pool: bool = field(default=False, metadata={
        "help": "the paper's pool (10, 8, 10) in place of the pair's default"})
    lookup: int = field(default=0, metadata={
        "help": "context lookup: up to N tokens copied from the context grafted into each pool (0: off; "
                "launch/pair.sh's decode runs of the embedded pair take 8)", "metavar": "N"})

    def __post_init__(self) -> None:
        BenchPrompts.__post_init__(self)
        check_int("budget", self.budget, 1)
        check_decoders("decoders", self.decoders)
        if "ar" in self.decoder_list:
            raise ConfigError("decoders", "must not hold ar: it selects from no pool")
        for decoder in self.decoder_list:  # every decode's settings checked before the pair starts
            self.config(decoder)

    @property
    def decoder_list(self) -> list[str]:
        return split_list(self.decoders)

    def config(self, decoder: str) -> DecodeConfig:
        return DecodeConfig(decoder, 0.0, self.budget, self.max_new_tokens, lookup=self.lookup)


@dataclass(frozen=True, slots=True)
class RoundReach:
    """One round: the tokens it emitted, the most it could have (reach and the token after), its pool's size,
    and the rank of the target's next token among the pool's first level (0: not there)."""

    prompt: int
    tokens: int
    bound: int
    pool_size: int
    first_rank: int


def round_reaches(kept: list[tuple], output: list[int], first_free: bool, prompt: int = 0) -> list[RoundReach]:
    """Each kept round's (pool, emitted tokens, whether its first token came from a row already scored) walked along
    `output`, the decode's greedy output (the tokens verified past the limit included): round k's pool stands at the
    output's position after the tokens the rounds before it emitted. A round without a pool (a plain one, at budget 0)
    only moves that position. `first_free`: every round of the decoder draws its first token from a root pass."""
    rows, at = [], 0
    for pool, emitted, drawn in kept:
        left = len(output) - at  # a round that stops the output keeps its tokens up to the stop
        if left <= 0:
            break
        if pool is None:
            at += emitted
            continue
        ahead = output[at:]
        reach = len(pool.path(ahead))
        bound = min(max(reach, 1 if first_free or drawn else 0) + 1, left)
        tokens = min(emitted, left)
        if tokens > bound:
            raise AssertionError(f"a round emitted {tokens} tokens where its pool reaches {reach}: the rounds and "
                                 f"the output are out of step")
        rows.append(RoundReach(prompt, tokens, bound, len(pool), pool.first_rank(ahead[0])))
        at += emitted
    return rows


def summarize(rows: list[RoundReach]) -> dict:
    """A decoder's figures over its rounds (all prompts)."""
    tokens = np.array([r.tokens for r in rows], float)
    bound = np.array([r.bound for r in rows], float)
    rank = np.array([r.first_rank for r in rows])
    by_prompt = {}
    for p in sorted({r.prompt for r in rows}):
        mine = [r for r in rows if r.prompt == p]
        by_prompt[p] = {"tau": sum(r.tokens for r in mine) / len(mine),
                        "whole_pool_tau": sum(r.bound for r in mine) / len(mine)}
    return {"rounds": len(rows), "tau": float(tokens.mean()), "whole_pool_tau": float(bound.mean()),
            "pool_size_median": float(np.median([r.pool_size for r in rows])),
            "first_top1": float(np.mean(rank == 1)), "first_top3": float(np.mean((rank >= 1) & (rank <= 3))),
            "first_in_pool": float(np.mean(rank >= 1)), "prompts": list(by_prompt.values())}


def run(options: ReachOptions, prompts: list[str]) -> dict[str, list[RoundReach]]:
    """Each decoder decodes each prompt, its rounds' pools kept -> each decoder's rounds, walked."""
    from launch.api import Pair
    from pipeline.rules import RULES

    try:
        pair = Pair(**({"target": options.target} if options.target else {}),
                    **({"drafter": options.drafter} if options.drafter else {}),
                    **({"pool": PoolConfig()} if options.paper_pool else {}))
    except (InputError, RuntimeError, TimeoutError) as e:  # a model that will not load, named by its side
        refuse(__spec__.name, str(e))
    rows: dict[str, list[RoundReach]] = {}
    with pair:
        session = pair.session
        print(f"pool {session.pool.topk}, {session.pool.depth}, {session.pool.expand}; drafter "
              f"{session.models.get('drafter', {}).get('model', '?')}", file=sys.stderr)
        for decoder in options.decoder_list:
            rows[decoder] = []
            for i, text in enumerate(prompts):
                ids = session.tokenizer.prompt_ids(text)
                kept: list[tuple] = []

                def keep(step, root, budget, kept=kept) -> None:
                    kept.append((step.pool, len(step.emitted), bool(step.held)))

                result = session.decode(ids, options.config(decoder), f"reach/{i}", observe=keep)
                first_free = RULES[decoder].root_pass
                rows[decoder] += round_reaches(kept, result.tokens + result.beyond, first_free, i)
                print(f"{decoder} {i + 1}/{len(prompts)}", file=sys.stderr)
    return rows


def render(summary: dict, options: ReachOptions, n_prompts: int) -> list[str]:
    lines = [f"{n_prompts} prompts, T=0, B={options.budget}, {options.max_new_tokens} new tokens, context lookup "
             f"{options.lookup or 'off'}",
             f"  {'':<12}{'rounds':>7}{'tau':>7}{'whole-pool tau':>16}{'pool size':>11}"
             f"{'next token: top-1':>19}{'top-3':>7}{'in pool':>9}"]
    for decoder, s in summary.items():
        lines.append(f"  {decoder:<12}{s['rounds']:>7}{s['tau']:>7.2f}{s['whole_pool_tau']:>16.2f}"
                     f"{s['pool_size_median']:>11.0f}{s['first_top1']:>19.2f}{s['first_top3']:>7.2f}"
                     f"{s['first_in_pool']:>9.2f}")
    return lines


def build_parser() -> argparse.ArgumentParser:
    return bench_parser(ReachOptions, __spec__.name, __doc__)


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    prompts = prompts_or_refuse(options, __spec__.name)
    rows = run(options, prompts)
    summary = {decoder: summarize(r) for decoder, r in rows.items()}
    for line in render(summary, options, len(prompts)):
        print(line)
    close({"decoders": summary, "prompts": len(prompts), "max_new_tokens": options.max_new_tokens,
           "budget": options.budget, "lookup": options.lookup, "target": options.target or "embedded",
           "drafter": options.drafter or "default", "paper_pool": options.paper_pool})
    return 0


if __name__ == "__main__":
    sys.exit(main())
