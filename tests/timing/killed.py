"""A session killed in the middle of a decode, for the tests of resumed sweeps."""

from __future__ import annotations


class Killed(Exception):
    """Stands for the process being killed in the middle of a decode."""


class DiesAfter:
    """A session that is killed during its (n + 1)-th decode."""

    def __init__(self, session, n: int) -> None:
        self.session, self.n = session, n
        self.tokenizer, self.target, self.pool, self.models = (session.tokenizer, session.target, session.pool,
                                                               session.models)

    def decode(self, *args, **kwargs):
        if self.n == 0:
            raise Killed
        self.n -= 1
        return self.session.decode(*args, **kwargs)
