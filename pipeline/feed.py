"""What the drafter has been told of one decode's committed context, and the requests that tell it more."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class DrafterFeed:
    """What the drafter has been told of a decode's committed context: `told` tokens (0: not started), the budget of the
    round before (`previous`, None before the first) and the tokens it missed while rounds were plain (`missed`, as of
    the current round's request). With a `window` (DecodeConfig.drafter_window) the drafter starts on the context's last
    `window` tokens and is told every token after them. A drafter that takes the target's features (an EAGLE-3 head) is
    told, with each token but the context's last, that token's features: `features(start, stop)` gives those of
    committed positions [start, stop). `feature_bytes` is what the last request's features frame held: the bytes of the
    array it hands the drafter, which a Start or Commit sends as they are (0 without features)."""

    def __init__(self, drafter, window: int = 0, features: Callable[[int, int], object] | None = None) -> None:
        self.drafter, self.window, self.features = drafter, window, features
        self.told, self.previous, self.missed = 0, None, 0
        self.feature_bytes = 0

    def start_tokens(self, context: int) -> int:
        """How many tokens the drafter's prefill takes when it starts on `context` tokens."""
        return min(context, self.window) if self.window else context

    def ask(self, history: Sequence[int]) -> None:
        """Ask for the next round's pool, with every token of `history` the drafter has not seen."""
        if self.told:
            self.drafter.commit(history[self.told:], *self._features(self.told - 1, len(history) - 1))
        else:  # the drafter's prefill; its first pool follows
            start = len(history) - self.start_tokens(len(history))
            self.drafter.start(history[start:], *self._features(start, len(history) - 1))
        self.told = len(history)

    def _features(self, start: int, stop: int) -> tuple:
        """(the features of committed positions [start, stop),) for a drafter that takes them, else ()."""
        if self.features is None:
            return ()
        rows = self.features(start, stop)  # (stop - start, F) in the target's dtype
        self.feature_bytes = rows.numel() * rows.element_size()
        return (rows,)

    def waiting(self) -> bool:
        """Whether the drafter is still growing its first pool (the prefill then leaves it its cores)."""
        return not self.drafter.has_pool()

    def ran(self, budget: int, history: Sequence[int]) -> None:
        """A round at `budget` ended and the context is now `history`."""
        self.previous, self.missed = budget, len(history) - self.told if self.told else 0

    def end(self) -> None:
        if self.told:
            self.drafter.end()
