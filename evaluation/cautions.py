"""When a setting's speed gains say nothing about speculation, and why: every summary prints these beside the
gains instead of a bare number (docs/timing.md's table of cautions).

- same work: both decoders of a comparison verified nothing beyond the root in all but a PLAIN_SHARE's
  complement of their rounds: the gain between them is the machine's drift, however narrow its interval.
- spread: the prefill of one prompt took more than SPREAD_LIMIT times as long in one decode as in another.
- load: the machine's load average exceeded what the pair keeps busy itself at the start or end of a decode.

Pure functions of a setting's per-decoder statistics (evaluation.summary's DecoderStats, read by field)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PLAIN_SHARE = 0.99  # a decoder with at least this share of plain rounds did plain decoding's work
SPREAD_LIMIT = 3.0  # slowest over fastest prefill of one prompt beyond which the timings are noise
SPREAD_FLOOR_S = 0.2  # prefills shorter than this are left out: a scheduler's tick is a large share of them
PAIR_THREADS = 1  # threads the pair keeps busy beyond its process's CPUs: the drafter's
KINDS = ("same work", "spread", "load")


@dataclass(frozen=True, slots=True)
class Caution:
    """Why some of a setting's gains measure noise: `pairs` are the comparisons it concerns (every one when
    empty); `message` says it in one sentence."""

    kind: str
    message: str
    pairs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"`kind` must be one of {', '.join(KINDS)}, got {self.kind!r}")

    def concerns(self, pair: tuple[str, str]) -> bool:
        return not self.pairs or pair in self.pairs

    def as_json(self) -> dict:
        return {"kind": self.kind, "message": self.message, "pairs": [f"{a}/{b}" for a, b in self.pairs]}


def cautions(decoders: dict, prompt_ids: list[str], pairs: list[tuple[str, str]]) -> list[Caution]:
    """The cautions of one setting: `decoders` name -> DecoderStats over the setting's prompts `prompt_ids`,
    `pairs` its comparisons."""
    found = [same_work(decoders, pairs), spread(decoders, prompt_ids), load(decoders)]
    return [c for c in found if c is not None]


def same_work(decoders: dict, pairs: list[tuple[str, str]]) -> Caution | None:
    same = tuple(p for p in pairs if decoders[p[0]].plain_work and decoders[p[1]].plain_work)
    if not same:
        return None
    names = [d for d in decoders if any(d in p for p in same)]  # in the setting's order
    who = "every decoder" if len(names) == len(decoders) else ", ".join(names)
    return Caution("same work", f"{who} ran plain rounds (no tree verified beyond the root: none, or the target's "
                                f"own draw alone) in at least {PLAIN_SHARE:.0%} of their rounds: the same work, so a "
                                f"gain among them is the machine's drift, not speculation", same)


def spread(decoders: dict, prompt_ids: list[str]) -> Caution | None:
    """The prompt whose prefill varied most across decoders, when it varied beyond SPREAD_LIMIT."""
    rows = [st.prefill for st in decoders.values() if st.prefill is not None and len(st.prefill) == len(prompt_ids)]
    if len(rows) < 2 or not prompt_ids:
        return None
    prefill = np.stack(rows)  # (decoders, prompts) summed prefill seconds
    low, high = prefill.min(axis=0), prefill.max(axis=0)
    ratio = np.where((high >= SPREAD_FLOOR_S) & (low > 0), high / np.maximum(low, 1e-12), 1.0)
    worst = int(np.argmax(ratio))
    if ratio[worst] <= SPREAD_LIMIT:
        return None
    return Caution("spread", f"the prefill of {prompt_ids[worst]}, the same work for every decoder, took from "
                             f"{low[worst]:.2f} to {high[worst]:.2f} s ({ratio[worst]:.0f}x): the machine's speed "
                             f"changed more than a gain can be told from, and the interval (over prompts) does not "
                             f"carry that")


def load(decoders: dict) -> Caution | None:
    """The machine's peak load against what the pair keeps busy itself; None where no record says."""
    known = [st.load for st in decoders.values() if st.load is not None]
    if not known:
        return None
    peak, cpus = max(p for p, _ in known), min(c for _, c in known)
    busy = sum(st.loaded_decodes for st in decoders.values() if st.load is not None)
    if peak <= cpus + PAIR_THREADS:
        return None
    total = sum(st.decodes for st in decoders.values() if st.load is not None)
    return Caution("load", f"the machine's load average reached {peak:.1f} on {cpus} CPUs (the "
                           f"pair alone keeps at most {cpus + PAIR_THREADS} busy) in {busy} of {total} decodes: "
                           f"other work took cores from the decoders, unevenly")


def loaded(load_average, cpus) -> bool:
    """Whether a record's load average ([start, end]) exceeded what the pair keeps busy itself."""
    return max(load_average) > cpus + PAIR_THREADS
