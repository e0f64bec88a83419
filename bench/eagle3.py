"""python -m bench.eagle3: an EAGLE-3 head's pool growth on the CPU beside the int8 drafter's, per round.

    .venv/bin/python -m bench.eagle3 [--rounds 30] [--context 256] [--accepted 3] [--threads 1] [--head SPEC]

A head over the default target (`--head`: by default a random one of its shape, random:eagle3-smollm2-135m:
hidden 576, 9 heads, 3 KV heads, draft vocabulary 32,000, fusing three layer inputs of SmolLM2-135M's 30; or
the trained smollm2:eagle3, with :int8 for its dynamic int8 linear layers) and the embedded int8 drafter
(smollm2:int8) each start on the same random context, then answer `--rounds` Commits of `--accepted` + 1
random tokens: the head its rows for them from random features of the target's width (3 x 576 float32, what
the target would send), the int8 drafter its prefill of them; then each grows the round's pool. A round is
timed from the Commit to the pool, at the CPU pool (top-k 10, depth 4, expand 3: 100 candidates) and at the
paper's (10, 8, 10: 710). A random head's pools are meaningless; its arithmetic and its pass sizes are a
public head's at this shape. Drafters run with `--threads` intra-op threads, as the
drafter process does beside its target. The last line is one JSON document: medians and quartiles in ms.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from bench.common import at_least, bench_parser, close, command_line, load_average, spread
from models.options import EMBEDDED_POOL
from pipeline.config import PoolConfig

HEAD = "random:eagle3-smollm2-135m"
INT8 = "smollm2:int8"
POOLS = {"cpu": EMBEDDED_POOL, "paper": PoolConfig()}


@dataclass(frozen=True, slots=True)
class Eagle3Options:
    """Pool growth"""

    rounds: int = field(default=30, metadata={"help": "timed rounds per drafter and pool"})
    warmup: int = field(default=3, metadata={"help": "untimed rounds first"})
    context: int = field(default=256, metadata={"help": "tokens of the context both drafters start on"})
    accepted: int = field(default=3, metadata={"help": "accepted tokens a round commits (and the bonus token)"})
    threads: int = field(default=1, metadata={"help": "intra-op CPU threads of the drafters"})
    head: str = field(default=HEAD, metadata={"help": "the EAGLE-3 head over the default target (smollm2:eagle3, "
                                                      "smollm2:eagle3:int8, eagle3:PATH, ...)"})

    def __post_init__(self) -> None:
        for name in ("rounds", "context", "threads"):
            at_least(name, getattr(self, name), 1)
        at_least("warmup", self.warmup, 0)
        at_least("accepted", self.accepted, 0)


def build_parser():
    return bench_parser(Eagle3Options, __spec__.name, __doc__)


def time_rounds(drafter, options: Eagle3Options, features_width: int, rng) -> list[float]:
    """Seconds of each timed round (Commit to pool) of one drafter, after its start and warm-up rounds."""
    import torch

    def feats(n: int):
        return torch.from_numpy(rng.standard_normal((n, features_width)).astype("float32"))

    context = rng.integers(1, 32000, options.context).tolist()
    head = features_width > 0
    drafter.start(context, feats(len(context) - 1)) if head else drafter.start(context)
    samples = []
    for i in range(options.warmup + options.rounds):
        tokens = rng.integers(1, 32000, options.accepted + 1).tolist()
        t0 = time.perf_counter()
        drafter.commit(tokens, feats(len(tokens))) if head else drafter.commit(tokens)
        if i >= options.warmup:
            samples.append(time.perf_counter() - t0)
    return samples


def main(argv: list[str] | None = None) -> int:
    options, _ = command_line(build_parser(), argv)
    import numpy as np
    import torch

    from drafter_proc.drafter import Drafter
    from drafter_proc.head import HeadDrafter
    from models.load import load
    from models.options import ModelOptions

    torch.set_num_threads(options.threads)
    start_load = load_average()
    head = load(ModelOptions(model=options.head, head_target="smollm2"), "drafter")
    int8 = load(ModelOptions(model=INT8), "drafter")
    width = 3 * head.model.cfg.target_hidden  # a token's features: three layer inputs of the target
    capacity = options.context + (options.warmup + options.rounds) * (options.accepted + 1) + PoolConfig().n_expanded + 8
    out = {}
    print(f"pool growth per round (Commit of {options.accepted + 1} tokens to pool), context {options.context}, "
          f"{options.threads} thread(s); medians over {options.rounds} rounds, IQR in brackets")
    print(f"{'drafter':<42}{'pool':<8}{'candidates':>11}{'median ms':>11}{'IQR ms':>22}")
    for pool_name, config in POOLS.items():
        for name, make, w in (("EAGLE-3 head " + options.head, lambda: HeadDrafter(head.runner(capacity), config),
                               width),
                              ("int8 drafter " + INT8, lambda: Drafter(int8.runner(capacity), config), 0)):
            samples = time_rounds(make(), options, w, np.random.default_rng(0))
            s = {k: 1e3 * v for k, v in spread(samples).items()}
            out[f"{name.split()[0]} {pool_name}"] = {"median_ms": s["median"], "q1_ms": s["q1"], "q3_ms": s["q3"],
                                                     "candidates": config.size}
            print(f"{name:<42}{pool_name:<8}{config.size:>11}{s['median']:>11.1f}   [{s['q1']:.1f}, {s['q3']:.1f}]")
    end_load = load_average()
    print(f"load average at the start {start_load[0]:.2f}, at the end {end_load[0]:.2f}")
    close({"rounds": options.rounds, "context": options.context, "threads": options.threads,
           "accepted": options.accepted, "load_average": [start_load, end_load], "per_round": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
