"""The EAGLE-3 section: its launcher command lines, and its verdicts on launcher runs made up here (equal
outputs, the head's graphs captured with graphs only, a row of features a token told); and, slow, the
rehearsal's pair itself on the CPU."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import pytest

from tests.gpu import eagle3_pair
from tests.gpu.check import REHEARSAL, Plan
from tests.gpu.section import Budget, Section
from tests.gpu.test_pipelined import FAKE_LAUNCHER, PROMPT

ROW = 3 * 64 * 4  # a token's features from the tiny target on the CPU: 3 layers of 64 float32 values
CAPTURED = "[drafter] captured 9 head graphs in 0.0 s"


def record_line(decoder: str, tokens: list[int], accept_lengths: list[int], feature_bytes: list[int]) -> str:
    """A --json line of one decode with its per-round columns (evaluation.record's fields the check reads)."""
    n = len(accept_lengths)
    return json.dumps({"kind": "decode", "decoder": decoder, "prompt_id": "prompt/0", "token_ids": tokens,
                       "seconds": 0.5, "prompt_tokens": len(PROMPT), "accept_lengths": accept_lengths,
                       "feature_bytes": feature_bytes, "phases": {k: [0.001] * n for k in ("draft", "root", "wait",
                                                                                          "select", "tree", "commit")}})


def decodes(start: int = (len(PROMPT) - 1) * ROW) -> list[str]:
    """draft and root, whose requests carry a row a token told: the Start's prompt, then each round's tokens."""
    return [record_line("draft", [5, 6, 7, 8], [2, 1, 1], [start, 2 * ROW, ROW]),
            record_line("root", [5, 6, 7], [1, 1, 1], [start, ROW, ROW])]


def run_section(tmp_path, monkeypatch, runs: dict[bool, list[str]]) -> dict:
    """The rehearsal's section over made-up launcher runs ({graphs: the lines it prints}), after a parity
    section that measured a float32 gap of 5e-5."""
    monkeypatch.setattr(eagle3_pair, "launch_command", lambda plan, graphs: [sys.executable, "-c", FAKE_LAUNCHER,
                                                                             json.dumps(runs[graphs]), "0"])
    earlier = {"parity": {"tiny float32": {"worst_gap": 5e-5}}}
    s = Section("eagle-3 pair", REHEARSAL, Budget(60, time.monotonic() + 60), tmp_path, earlier)
    return eagle3_pair.section(s)


def test_the_pair_is_the_random_head_over_its_target_with_graphs_and_without():
    with_graphs, without = eagle3_pair.launch_command(REHEARSAL, True), eagle3_pair.launch_command(REHEARSAL, False)
    said = " ".join(with_graphs)
    assert "--target random:tiny --drafter random:eagle3-tiny --decoders draft,root" in said
    assert "--rehearse-graphs" in said and "--no-graphs" not in said and "--max-context 512" in said
    assert "--no-graphs" in without and [arg for arg in without if arg != "--no-graphs"] == with_graphs
    gpu = " ".join(eagle3_pair.launch_command(replace(Plan(), gpus="0,1"), True))
    assert "--target random:llama-3.1-8b --drafter random:eagle3-llama-3.1-8b" in gpu and "--gpus 0,1" in gpu
    assert "--rehearse-graphs" not in gpu
    assert eagle3_pair.row_bytes(REHEARSAL) == ROW and eagle3_pair.row_bytes(replace(Plan(), gpus="0")) == 24576
    with pytest.raises(ValueError, match=r"`head` must be a random head's shape \(llama-3.1-8b, .*got 'nope'"):
        Plan(head="nope")


def test_equal_outputs_a_row_a_token_and_the_heads_graphs_with_graphs_only_pass(tmp_path, monkeypatch, capsys):
    result = run_section(tmp_path, monkeypatch, {True: [CAPTURED, *decodes()], False: decodes()})
    assert result["status"] == "passed", result
    assert result["head"] == "random:eagle3-tiny" and result["head_graphs"] == {"graphs": 9, "no-graphs": 0}
    f = result["features"]["graphs"]
    assert (f["start_bytes"], f["commit_bytes"], f["commit_bytes_max"], f["commits"]) == (41 * ROW, ROW, 2 * ROW, 4)
    assert f["bytes_per_token"] == ROW and f["not_a_row_a_token"] == []
    assert list(result["decoders"]) == list(result["decoders_no_graphs"]) == ["draft", "root"]
    assert result["decoders"]["root"]["median_wait_ms"] == pytest.approx(1.0)
    assert result["figure"].startswith(f"features {ROW} B a Commit ({ROW} B a token); 9 head graphs; fastest")
    assert result["figure"].endswith("outputs with and without graphs equal")
    out = capsys.readouterr().out
    assert f"features, with graphs: a Commit {ROW} B median ({2 * ROW:,} B at most, 4 Commits)" in out
    assert f"B a token told, 3 x 64 x 4 B: as each should" in out and "greedy outputs with graphs equal" in out
    assert "pipelined decode, tiny with eagle3-tiny (CPU), with graphs: medians per round, ms" in out


@pytest.mark.parametrize("graphs, eager, problem", [
    ([*decodes()], decodes(), "the run with graphs did not say that the head captured its graphs"),
    ([CAPTURED, *decodes()], [CAPTURED, *decodes()], "the run without graphs captured 9 head graphs"),
    ([CAPTURED, *decodes(start=40 * ROW)], decodes(), "with graphs: features not 768 B a token told in draft "
                                                      "prompt prompt/0, root prompt prompt/0"),
])
def test_the_heads_graphs_where_they_should_not_be_or_features_not_a_row_a_token_fail(tmp_path, monkeypatch, graphs,
                                                                                       eager, problem):
    result = run_section(tmp_path, monkeypatch, {True: graphs, False: eager})
    assert result["status"] == "failed" and result["problems"] == [problem]
    assert result["figure"].endswith("; 1 PROBLEMS")


@pytest.mark.slow  # two pairs of processes start, each importing torch and transformers
def test_the_rehearsals_pair_runs_the_heads_captured_buckets_against_its_plain_passes(tmp_path):
    earlier = {"parity": {"tiny float32": {"worst_gap": 0.0}}}
    s = Section("eagle-3 pair", REHEARSAL, Budget(600, time.monotonic() + 600), tmp_path, earlier)
    result = eagle3_pair.section(s)
    assert result["status"] == "passed", result
    assert result["head_graphs"] == {"graphs": 9, "no-graphs": 0} and result["partings"] == []
    assert list(result["decoders"]) == list(REHEARSAL.head_decoders)
    for label in ("graphs", "no-graphs"):
        f = result["features"][label]
        assert f["bytes_per_token"] == ROW and f["commits"] > 0 and f["not_a_row_a_token"] == []
