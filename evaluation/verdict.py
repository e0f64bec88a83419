"""A decode run's verdict in words: whether the best speculative decoder paid against `ar`, and why.

A speculative round costs more than a plain one (a tree pass, the drafter's pool, the selection); it pays
when its tokens per round (τ) outweigh that cost. `ar` emits one token a round, so the τ that pays at a
round cost of c plain rounds is c itself: the verdict sets the τ measured beside the τ needed, so that a
slow decoder with a high τ says which side lost. Pure: numbers in, lines out (programs.target_program prints
them).
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import DecoderStats, Setting
from pipeline.rules import SPECULATIVE

BASELINE = "ar"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The best speculative decoder of a setting against `ar`."""

    decoder: str
    gain: float  # speed / ar's speed - 1, over the setting's prompts
    interval: tuple[float, float] | None  # the paired-bootstrap interval of `gain`; None from too few prompts
    round_cost: float  # its mean seconds per round over ar's: what one of its rounds costs in plain rounds
    tau: float  # its tokens per round, the bonus token included
    prompts: int

    def __post_init__(self) -> None:
        if self.round_cost <= 0:
            raise ValueError(f"`round_cost` must be positive, got {self.round_cost!r}")
        if self.interval is not None and not self.interval[0] <= self.interval[1]:
            raise ValueError(f"`interval` must be (low, high), got {self.interval!r}")

    @property
    def tau_needed(self) -> float:
        """The τ at which a round of this cost breaks even with `ar` (one token a round)."""
        return self.round_cost

    @property
    def paid(self) -> bool:
        return self.gain > 0

    @property
    def settled(self) -> bool:
        """Whether the interval lies wholly on one side of zero (no interval: not settled)."""
        return self.interval is not None and (self.interval[0] > 0 or self.interval[1] < 0)


def mean_round_seconds(stats: DecoderStats) -> float | None:
    """A decoder's mean seconds per round: its decode seconds less its prefills, over its rounds."""
    if not stats.rounds.rounds:
        return None
    prefill = float(stats.prefill.sum()) if stats.prefill is not None else 0.0
    return (float(stats.seconds.sum()) - prefill) / stats.rounds.rounds


def verdict_of(setting: Setting) -> Verdict | None:
    """The verdict on the speculative decoder with the highest gain over `ar`; None when the setting has no
    `ar`, no speculative decoder with a gain over it, or rounds whose time cannot be told."""
    if BASELINE not in setting.decoders:
        return None
    plain = mean_round_seconds(setting.decoders[BASELINE])
    gains = {d: g for (d, b), g in setting.gains.items() if b == BASELINE and d in SPECULATIVE}
    if not gains or not plain or plain <= 0:
        return None
    best = max(gains, key=lambda d: gains[d].gain)
    seconds = mean_round_seconds(setting.decoders[best])
    if seconds is None or seconds <= 0:
        return None
    g = gains[best]
    return Verdict(best, g.gain, (g.low, g.high) if g.has_interval else None, seconds / plain,
                   setting.decoders[best].rounds.tau, len(setting.prompt_ids))


def verdict_lines(v: Verdict, *, budget, machine: str, drafter: str, loaded: bool) -> list[str]:
    """The verdict in words: paid or not and by how much, why (round cost against τ), what to try next, and
    the machine and drafter it holds for (where speculation did not pay, a line that says so and names budget
    auto). `loaded`: other work shared the machine (a caution said so)."""
    size = f"{100 * v.gain:+.1f}%" + (f" [95% interval {100 * v.interval[0]:+.1f}, {100 * v.interval[1]:+.1f}]"
                                      if v.interval else f" (no interval: fewer than {MIN_INTERVAL_PROMPTS} prompts)")
    said = "paid" if v.paid else "did not pay"
    if v.interval is not None and not v.settled:
        size += ", an interval that spans zero: not settled"
    why = (f"a {v.decoder} round cost {v.round_cost:.2f} plain rounds, so it pays from τ {v.tau_needed:.2f}; "
           f"it reached τ {v.tau:.2f}")
    lines = [f"verdict: {v.decoder}, the best speculative decoder here, {said} against ar: {size}",
             f"  why: {why} ({'above' if v.tau > v.tau_needed else 'below'} what pays)",
             f"  on: {machine or 'an unnamed machine'}, drafter {drafter or 'unnamed'}, {v.prompts} prompts"]
    auto = str(budget) == "auto"
    if not v.paid:
        lines.append("speculation did not pay on this machine with this drafter: " + (
            "--budget auto, used here, settles on plain decoding where it sees speculation lose" if auto else
            "launch/pair.sh --budget auto sizes each round's tree to what pays here and settles on plain decoding "
            "where speculation does not pay (the first run times the passes)"))
    tries = []
    if not auto and v.paid:
        tries.append("--budget auto (trees sized to what pays on this machine; the first run times its passes)")
    if v.interval is None or not v.settled:
        tries.append(f"more prompts, e.g. --prompts spec-bench:PATH --limit-prompts 20 (an interval needs "
                     f"{MIN_INTERVAL_PROMPTS}; a narrow one, more)")
    if loaded or not v.settled:
        tries.append("a quiet machine (other work moves a round's time more than speculation does)")
    lines += [f"  next: launch/pair.sh {t}" if t.startswith("--") else f"  next: {t}" for t in tries]
    return lines
