"""A drafter client for tests: the drafter in the test's process, one call after another.

Same rules and pools as the two-process deployment without the overlap (pipeline.decode.DrafterClient).
"""

from __future__ import annotations

from collections.abc import Sequence

from drafter_proc.drafter import Drafter
from pipeline.ahead import Drafted


class LocalDrafter:
    def __init__(self, drafter: Drafter) -> None:
        self.drafter = drafter
        self.wants_features = getattr(drafter, "wants_features", False)  # an EAGLE-3 head (HeadDrafter)
        self._pending: Drafted | None = None
        self.predictions: list[list[int]] = []  # per ahead() call, the tokens the pool was grown after

    def start(self, prompt: Sequence[int], *features) -> None:
        self._pending = self.drafter.start(prompt, *features)

    def commit(self, tokens: Sequence[int], *features) -> None:
        self._pending = self.drafter.commit(tokens, *features)

    def ahead(self, tokens: Sequence[int]) -> None:
        self.drafter.ahead(tokens)
        self.predictions.append(self.drafter.written.tolist())

    def waiting(self, cut: int = 0) -> None:
        pass  # grown in the caller's process already: whole

    def pool(self) -> Drafted:
        assert self._pending is not None, "pool() before start() or commit()"
        pending, self._pending = self._pending, None
        return pending

    def has_pool(self) -> bool:
        return self._pending is not None  # grown in the caller's process: there as soon as asked for

    def end(self) -> None:
        self._pending = None
