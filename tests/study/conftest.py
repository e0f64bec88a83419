"""The study's tests read the rounds of the timing tests' in-process mock sweeps: the same fixtures."""

from tests.timing.conftest import make_options, sweep  # noqa: F401  (pytest finds fixtures by their names)
