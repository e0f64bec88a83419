"""A decode run's verdict in words: whether the best speculative decoder paid against `ar`, and why.

A speculative round pays when its tokens per round (τ) outweigh its cost: at a round cost of c plain rounds the τ
that pays is c itself, so the verdict sets the τ measured beside the τ needed. Pure: numbers in, lines out
(programs.target_program prints them)."""

from __future__ import annotations

from dataclasses import dataclass

from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import DecoderStats, Setting
from pipeline.budget import MeasuredPasses
from pipeline.rules import RULES, SPECULATIVE

BASELINE = "ar"


PAID, LOST, UNDECIDED = "paid", "did not pay", "was not shown to pay"
SPEC_BENCH = ("PATH being Spec-Bench's question file, data/spec_bench/question.jsonl in its repository "
              "(github.com/hemingkx/Spec-Bench)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The best speculative decoder of a setting against `ar`: the one with the highest gain among those whose
    rounds verified something beyond the root; where none did, the best of them all, `worked` False."""

    decoder: str
    gain: float  # speed / ar's speed - 1, over the setting's prompts
    interval: tuple[float, float] | None  # the paired-bootstrap interval of `gain`; None from too few prompts
    round_cost: float  # its mean seconds per round over ar's: what one of its rounds costs in plain rounds
    tau: float  # its tokens per round, the bonus token included
    prompts: int
    tree: float = 0.0  # its mean tree size over rounds that ran a tree pass
    tokens_per_pass: float = 0.0  # its output tokens per target pass after the prefill
    worked: bool = True  # its rounds verified something beyond the root (not plain decoding's work)

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
    def rounds_pay(self) -> bool:
        """Whether its τ is above what a round of its cost needs."""
        return self.tau > self.tau_needed

    @property
    def outcome(self) -> str:
        """PAID: its interval lies above zero and its τ above what pays; LOST: it was no faster than `ar`;
        UNDECIDED: faster, but without an interval above zero or without the τ that explains it."""
        if self.gain <= 0:
            return LOST
        return PAID if self.settled and self.interval[0] > 0 and self.rounds_pay else UNDECIDED

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
    """The verdict on the speculative decoder with the highest gain over `ar` among those that did more than
    plain decoding's work (all of them, `worked` False, where none did); None when the setting has no `ar`, no
    speculative decoder with a gain over it, or rounds whose time cannot be told."""
    if BASELINE not in setting.decoders:
        return None
    plain = mean_round_seconds(setting.decoders[BASELINE])
    gains = {d: g for (d, b), g in setting.gains.items() if b == BASELINE and d in SPECULATIVE}
    if not gains or not plain or plain <= 0:
        return None
    worked = [d for d in gains if not setting.decoders[d].plain_work]
    best = max(worked or gains, key=lambda d: gains[d].gain)
    stats = setting.decoders[best]
    seconds = mean_round_seconds(stats)
    if seconds is None or seconds <= 0:
        return None
    g = gains[best]
    return Verdict(best, g.gain, (g.low, g.high) if g.has_interval else None, seconds / plain, stats.rounds.tau,
                   len(setting.prompt_ids), stats.rounds.mean_tree_size, stats.tokens_per_pass, bool(worked))


def verdict_lines(v: Verdict, *, budget, machine: str, drafter: str, loaded: bool,
                  measured: MeasuredPasses | None = None) -> list[str]:
    """The verdict in words: paid or not and by how much, why (round cost against τ), what to try next, and
    the machine (its CPU's model and vector width, evaluation.machine.device_words) and drafter it holds for,
    with `measured`, this machine's pass timings, what a plain pass and the decoder's tree pass cost here (where
    speculation did not pay, a line that says so and names budget auto; where no decoder did more than plain
    decoding's work, a verdict of plain decoding). `loaded`: other work shared the machine (a caution said so)."""
    on = (f"  on: {machine or 'an unnamed machine'}, drafter {drafter or 'unnamed'}, {v.prompts} prompts"
          + (f"; {passes}" if measured is not None and (passes := _passes(v, budget, measured)) else ""))
    if not v.worked:
        return _plain_lines(v, on, budget)
    outcome, auto = v.outcome, str(budget) == "auto"
    lines = [f"verdict: {v.decoder}, the best speculative decoder here, {outcome} against ar: {_size(v)}",
             f"  why: {_why(v)}", on]
    if outcome == LOST:
        lines.append("speculation did not pay on this machine with this drafter: " + (
            "--budget auto, used here, settles on plain decoding where it sees speculation lose" if auto else
            "launch/pair.sh --budget auto sizes each round's tree to what pays here and settles on plain decoding "
            "where speculation does not pay (the first run times the passes)"))
    tries = []
    if not auto and outcome != LOST:
        tries.append("--budget auto (trees sized to what pays on this machine; the first run times its passes)")
    if not v.settled:
        tries.append(f"more prompts (an interval needs {MIN_INTERVAL_PROMPTS}; a narrow one, more), e.g. --prompts "
                     f"spec-bench:PATH --limit-prompts 20, {SPEC_BENCH}")
    if loaded or not v.settled:
        tries.append("a quiet machine (other work moves a round's time more than speculation does)")
    return lines + [f"  next: launch/pair.sh {t}" if t.startswith("--") else f"  next: {t}" for t in tries]


def _passes(v: Verdict, budget, measured: MeasuredPasses) -> str:
    """What a plain pass and the decoder's tree pass (of the run's budget, else of the timed size nearest its
    mean tree) cost on this machine: a tree pass's cost in plain passes is what sets one machine's gain apart
    from another's (a CPU with narrow vectors pays more for a tree's rows)."""
    trees = measured.tree if RULES[v.decoder].root_pass else measured.tree_with_root
    if not trees or measured.plain <= 0:
        return ""
    size = budget if budget in trees else min(trees, key=lambda b: (abs(b - v.tree), b))
    return (f"here a plain pass takes {1000 * measured.plain:.1f} ms, {v.decoder}'s tree pass of {size} tokens "
            f"{1000 * trees[size]:.1f} ms ({trees[size] / measured.plain:.2f} plain passes)")


def _size(v: Verdict) -> str:
    """The gain with its interval, and what keeps a faster decoder from having paid."""
    size = f"{100 * v.gain:+.1f}%" + (f" [95% interval {100 * v.interval[0]:+.1f}, {100 * v.interval[1]:+.1f}]"
                                      if v.interval else f" (no interval: fewer than {MIN_INTERVAL_PROMPTS} prompts)")
    if v.interval is not None and not v.settled:
        size += ", an interval that spans zero: not settled"
    if v.outcome == UNDECIDED and v.settled and not v.rounds_pay:
        size += ", a gain its rounds do not explain (τ below what pays): time outside them, not speculation"
    return size


def _why(v: Verdict) -> str:
    """Its round cost against its τ, its tree and tokens a target pass."""
    why = (f"a {v.decoder} round cost {v.round_cost:.2f} plain rounds, so it pays from τ {v.tau_needed:.2f}; it "
           f"reached τ {v.tau:.2f} ({'above' if v.rounds_pay else 'below'} what pays) with trees of {v.tree:.1f} "
           f"nodes, {v.tokens_per_pass:.2f} tokens a target pass")
    if v.outcome == LOST and v.rounds_pay:
        why += "; its rounds paid, but the time outside them (its prefill, the machine's drift) cost more"
    return why


def _plain_lines(v: Verdict, on: str, budget) -> list[str]:
    """The verdict where no speculative decoder verified anything beyond the root: plain decoding's work."""
    size = f"{100 * v.gain:+.1f}%" + (f" [{100 * v.interval[0]:+.1f}, {100 * v.interval[1]:+.1f}]" if v.interval
                                      else "")
    return [f"verdict: plain decoding here: no decoder verified anything beyond the root; {v.decoder}'s rounds (trees "
            f"of {v.tree:.1f} nodes, {v.tokens_per_pass:.2f} tokens a target pass) did the work of ar, so its "
            f"{size} over ar is the machine's drift, not speculation", on,
            "  next: launch/pair.sh --budget 8 (trees that verify more than the root's own draw" + (
                "; budget auto, used here, kept to the root where it timed speculation as not paying)"
                if str(budget) == "auto" else ")")]
