"""Where two greedy outputs of one target part, and how near a tie the token there was: the margin between
the two tokens' logits in the target's eager row at their common prefix, on passes.relative_gap's scale.

A graph replay and an eager pass give rows equal within rounding, and the parity section measures how
far apart (the gap). A token flips between them only where its row's two logits are within twice the gap
(each may move by the gap): outputs that part there are both right. A wider margin cannot come from
rounding, so one of the runs computed a wrong row.

  python -P -m tests.gpu.margins --shape S --device D --capacity N --request FILE --result FILE
reads the partings (JSON) from --request and writes their margins to --result (a child of the pipelined
section: building the target takes its GPU memory, 16 GB for Llama-3.1-8B in bf16).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

FLIP = 2.0  # a token flips when each of two logits moves by the gap: margins up to twice the gap


@dataclass(frozen=True, slots=True)
class Parting:
    """The first token at which two runs' outputs of one decoder and prompt differ."""

    decoder: str
    prompt: str  # the records' prompt id
    position: int  # index into the outputs
    tokens: tuple[int | None, int | None]  # each run's token there (None: that output ended before it)
    prefix: tuple[int, ...]  # the prompt's ids and the outputs' common start: what the target had read

    def __post_init__(self) -> None:
        if self.position < 0 or not self.prefix:
            raise ValueError(f"`position` {self.position} or `prefix` of {len(self.prefix)} ids: not a parting")


def first_parting(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index at which outputs a and b differ (the shorter's length when it starts the longer);
    None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def relative_margin(row, a: int, b: int) -> float:
    """|row[a] - row[b]| over the larger of max |row| and 1. row: (V,) logits. Reads the device: a sync."""
    row = row.float()
    return float((row[a] - row[b]).abs() / row.abs().max().clamp(min=1.0))


def explained(margin: float | None, gap: float) -> bool:
    """Whether a parting at `margin` can come from rows that differ by `gap` (relative): a near tie."""
    return margin is not None and margin <= FLIP * gap


def margins(target, partings: Sequence[Parting]) -> list[float | None]:
    """Each parting's margin in `target`'s row after its prefix (None where a run's output had ended)."""
    out = []
    for p in partings:
        if None in p.tokens:
            out.append(None)
            continue
        target.prefill(list(p.prefix[:-1]))
        out.append(relative_margin(target.root_pass(p.prefix[-1]), *p.tokens))
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -P -m tests.gpu.margins", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, help="the target's random:SHAPE")
    parser.add_argument("--device", required=True)
    parser.add_argument("--capacity", type=int, required=True, help="KV slots, as the decodes had (--max-context)")
    parser.add_argument("--request", type=Path, required=True, help="the partings, a JSON list")
    parser.add_argument("--result", type=Path, required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    from models.hf import HFRunner
    from models.shapes import random_model
    from target_proc.target import Target
    from tests.gpu.children import write_result

    partings = [Parting(**{**p, "tokens": tuple(p["tokens"]), "prefix": tuple(p["prefix"])})
                for p in json.loads(args.request.read_text(encoding="utf-8"))]
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32  # the launcher's `auto`
    target = Target(HFRunner(random_model(args.shape, args.device, dtype), args.capacity, graphs=False))
    write_result(args.result, {"status": "passed", "margins": margins(target, partings)})
    return 0


def request(partings: Sequence[Parting], path: Path) -> Path:
    """The partings as main reads them."""
    path.write_text(json.dumps([asdict(p) for p in partings]), encoding="utf-8")
    return path


if __name__ == "__main__":
    sys.exit(main())
