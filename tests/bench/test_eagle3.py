"""bench.eagle3 and the features leg of bench.protocol run end to end on small sizes and close with one JSON line."""

from __future__ import annotations

import json

import pytest

from bench import eagle3, protocol


@pytest.mark.slow
def test_eagle3_bench_times_both_drafters_at_both_pools(capsys):
    assert eagle3.main(["--rounds", "2", "--warmup", "0", "--context", "16"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(doc["per_round"]) == {"EAGLE-3 cpu", "int8 cpu", "EAGLE-3 paper", "int8 paper"}
    assert doc["per_round"]["EAGLE-3 paper"]["candidates"] == 710


def test_the_features_leg_says_what_the_features_add_per_round(capsys):
    assert protocol.main(["--iterations", "10", "--warmup", "2", "--no-select", "--features", "2",
                          "--feature-width", "12288"]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    added = doc["features"]["commit 2 tokens ipc"]
    assert added["feature_bytes"] == 2 * 12288 * 2 + 12  # two rows of bfloat16, and their array spec
