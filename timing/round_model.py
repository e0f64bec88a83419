"""python -m timing.round_model: one pipelined round on two GPUs, plain, drafting ahead or cutting pools (a prediction).

A model, not a measurement. A root-pass round runs the target's root pass R while the drafter drafts D, waits
max(0, D - R), selects and commits (S) and verifies the tree (V). Drafting ahead starts the next pool when the
tree pass starts: a right prediction waits max(0, D - (V + S + R)), a wrong one as before plus half a drafter
level on average (L / 2, L = D / levels). With cut pools the round does not wait and its pool is shallower (the
levels that end by the end of the root pass, at least one); the model gives the share of tokens per round above
which that pays, and with `--cut-weigh` the same for each depth to the whole pool. `launch/pair.sh values` gives
a run's hit probability and the tokens of pools cut at each depth.

The defaults are the paper's D.14 medians (two RTX A6000, Llama-3.1-8B with Llama-3.2-1B and Qwen3-8B with
Qwen3-0.6B): drafting 50.5 ms a round, the one-token target pass 27 ms; V defaults to 30 ms (the paper gives
none) and is a flag. The last line of stdout is one JSON document."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class Phases:
    draft: float = 50.5  # ms a pool takes to grow (the paper's median drafting time)
    root: float = 27.0  # ms of the one-token target pass
    tree: float = 30.0  # ms of the tree pass (assumed: not given in the paper)
    between: float = 1.0  # ms of selection and commit together (assumed)
    levels: int = 8  # passes a pool growth takes (the prefill and one per level below the first)


def round_ms(p: Phases, hit_rate: float | None) -> float:
    """Expected ms of one steady round: without drafting ahead (hit_rate None), or with it at `hit_rate`."""
    wait = max(0.0, p.draft - p.root)
    if hit_rate is None:
        return p.root + wait + p.between + p.tree
    ahead_wait = max(0.0, p.draft - (p.tree + p.between + p.root))
    miss_wait = wait + 0.5 * p.draft / p.levels
    return p.root + p.between + p.tree + hit_rate * ahead_wait + (1 - hit_rate) * miss_wait


def cut_round(p: Phases, depth: int | None = None) -> tuple[float, int]:
    """(ms of one steady round with cut pools, the depth the pool reaches): by default the passes that end by
    the end of the root pass, at least one, each one level (the first: the prefill); or `depth` levels, the
    target waiting for those that end after its root pass."""
    if depth is None and p.draft <= p.root:
        return round_ms(p, None), p.levels
    pass_ms = p.draft / p.levels
    passes = max(1, math.floor(p.root / pass_ms + 1e-9)) if depth is None else depth
    return max(p.root, passes * pass_ms) + p.between + p.tree, passes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m timing.round_model", description=__doc__.split("\n\n")[0])
    defaults = Phases()
    for name in ("draft", "root", "tree", "between"):
        parser.add_argument(f"--{name}", type=float, default=getattr(defaults, name), metavar="MS")
    parser.add_argument("--levels", type=int, default=defaults.levels)
    parser.add_argument("--hit-rates", default="0.1,0.2,0.3,0.5,0.7", metavar="LIST")
    ns = parser.parse_args(argv)
    for name in ("draft", "root", "tree", "between"):
        if not (math.isfinite(value := getattr(ns, name)) and value >= 0):
            parser.error(f"`--{name}` takes milliseconds >= 0, got {value}")
    if ns.levels < 1:
        parser.error(f"`--levels` must be at least 1, got {ns.levels}")
    try:
        hit_rates = [float(h) for h in ns.hit_rates.split(",")]
    except ValueError:
        hit_rates = []
    if not hit_rates or not all(0 <= h <= 1 for h in hit_rates):
        parser.error(f"`--hit-rates` takes comma-separated rates from 0 to 1, got {ns.hit_rates!r}")
    phases = Phases(ns.draft, ns.root, ns.tree, ns.between, ns.levels)
    base = round_ms(phases, None)
    rows = [{"hit_rate": h, "round_ms": round_ms(phases, h), "speedup": base / round_ms(phases, h)}
            for h in hit_rates]
    print(f"A prediction, not a measurement. Round without drafting ahead: {base:.1f} ms "
          f"(root {phases.root:g} + wait {max(0.0, phases.draft - phases.root):.1f} + select/commit "
          f"{phases.between:g} + tree {phases.tree:g})")
    for r in rows:
        print(f"  hit rate {r['hit_rate']:.0%}: {r['round_ms']:.1f} ms a round, {r['speedup']:.3f}x")
    even = next((h / 100 for h in range(101) if round_ms(phases, h / 100) <= base), None)
    print(f"  drafting ahead breaks even at a hit rate of {even:.0%}" if even is not None else
          "  drafting ahead never breaks even with these phases")
    cut_ms, depth = cut_round(phases)
    print(f"  cut pools: the pool has {depth} of {phases.levels} levels when the root pass ends; a round takes "
          f"{cut_ms:.1f} ms ({base / cut_ms:.3f}x as many rounds a second), so cut pools pay while the pool cut "
          f"there keeps over {cut_ms / base:.0%} of the tokens per round")
    deeper = [{"levels": d, "round_ms": ms, "tokens_share_to_pay": ms / base}
              for d in range(depth + 1, phases.levels) for ms in [cut_round(phases, d)[0]]]
    for r in deeper:
        print(f"    or {r['levels']} levels: {r['round_ms']:.1f} ms a round, paying while they keep over "
              f"{r['tokens_share_to_pay']:.0%} of the tokens per round")
    print(json.dumps({"phases_ms": asdict(phases), "round_ms": base, "with_ahead": rows, "break_even": even,
                      "cut": {"round_ms": cut_ms, "levels": depth, "tokens_share_to_pay": cut_ms / base,
                              "deeper": deeper}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
