"""What a decode returns: its output and one Round per round (pure data, no devices)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from pipeline.ahead import NOT_TRIED

# How a decode's output ended: at an end-of-sequence token, at a stop token id, at a stop string (the
# caller's check of the text), or at the limit (max_new_tokens).
FINISHES = ("eos", "stop_token_id", "stop_string", "limit")


@dataclass(slots=True)
class Phases:
    """Seconds per phase of one round: the drafter's own time growing the pool, then the target's steps in
    the order they run. A phase the round did not run is None (a plain round has no wait, no tree pass)."""

    draft: float = 0.0  # drafter side: its seconds on this round's pool once the round's request reached it
    root: float | None = None  # the root pass (rules with one; a plain round's only pass)
    wait: float | None = None  # waiting for the pool
    select: float | None = None
    tree: float | None = None  # the tree pass and the traversal
    commit: float | None = None

    def add(self, name: str, seconds: float) -> None:
        setattr(self, name, (getattr(self, name) or 0.0) + seconds)

    def ran(self) -> dict[str, float]:
        """The phases the round ran, by name (the drafter's included)."""
        return {name: value for name in PHASES if (value := getattr(self, name)) is not None}

    def seconds(self, name: str) -> float:
        """A phase's seconds, 0 when the round did not run it."""
        return getattr(self, name) or 0.0

    def on_target(self) -> float:
        """The target's seconds in the round's phases: every phase but the drafter's."""
        return sum(self.seconds(name) for name in PHASES if name != "draft")


PHASES = tuple(f.name for f in fields(Phases))  # draft, root, wait, select, tree, commit


@dataclass(slots=True, kw_only=True)
class Round:
    accepted: int  # tree nodes accepted (a drawn first token that is a tree node counts)
    tree_size: int  # nodes verified in the tree pass; 0 when no tree pass ran
    emitted: int  # accepted + 1 continuation: the round's accept length, bonus token included
    phases: Phases
    available: int = 0  # with a first draw X1: X1 plus its pool descendants (the tree size cap c would give
    #                     is min(c, available)); 0 for decoders without a first draw
    tried: int = 0  # tree depths at which a draw met candidate children: accepted, plus one when the walk
    #                 ended at a node that had children (a rejection rather than the end of the tree)
    budget: int = 0  # the budget this round ran with (budget auto's choice; 0: plain decoding)
    ahead: int = NOT_TRIED  # whether this round's pool was grown ahead (pipeline.ahead: HIT, MISSED, NOT_TRIED)
    ahead_seconds: float = 0.0  # on a hit, drafting that was done before the round started waiting for it
    pool_depth: int = 0  # levels of the pool the drafter sent (fewer than the configured depth when cut); 0: no pool
    held_row: bool = False  # the round held its root's exact row from the pass before (`cover`): no root scored
    feature_bytes: int = 0  # the target's features the request for this round's pool carried (its Start or Commit
    #                         to an EAGLE-3 drafter), in bytes; 0 without features or without a pool
    copied: int = 0  # accepted tokens only the context lookup's chain proposed (pipeline.lookup); 0 without one


@dataclass(slots=True)
class DecodeResult:
    tokens: list[int]  # the output: new tokens up to the first stop (an end-of-sequence token, a stop token id,
    #                    the token that completes a stop string; included), at most the limit
    rounds: list[Round]
    target_passes: int  # target passes after the prefill
    seconds: float  # start of the prefill to the last commit
    finish: str  # how the output ended, one of FINISHES
    prefill_seconds: float = 0.0
    beyond: list[int] = field(default_factory=list)  # what the last round produced past the limit (up to
    #                                                  its first stop): verified, not output

    @property
    def hit_limit(self) -> bool:
        """The output was cut by the limit, not ended by a stop."""
        return self.finish == "limit"

    @property
    def overshoot(self) -> int:
        return len(self.beyond)

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0
