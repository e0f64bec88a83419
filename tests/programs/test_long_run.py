"""A decode run's target keeps running sums for its summary, not its records: its memory after many short mock
decodes is that after a few (tests.programs.long_run measures it over 10,000)."""

from __future__ import annotations

import pytest

from tests.programs.long_run import target_memory


@pytest.mark.slow
def test_the_targets_memory_does_not_grow_with_its_decodes():
    result = target_memory(2000, [250])
    assert result["status"] == 0 and result["decodes"] == 2000
    assert result["after_2000_mib"] - result["after_250_mib"] < 5  # its records alone would take about 19 MiB
