"""A decode run's target keeps running sums for its summary, not its records: its memory after many short mock
decodes is that after a few (tests.programs.long_run measures it over 10,000)."""

from __future__ import annotations

import pytest

from tests.programs.long_run import target_memory


@pytest.mark.slow
def test_the_targets_memory_does_not_grow_with_its_decodes():
    result = target_memory(4000, [500])
    assert result["status"] == 0 and result["decodes"] == 4000
    assert result["after_4000_mib"] - result["after_500_mib"] < 5  # their records alone took about 13 MiB
