"""The recorded-rounds section's reading of the values program: lines read by their kind (new kinds left
alone), every decoder with a value held to its values, and a values run cut by time keeps its lines."""

from __future__ import annotations

import sys
from dataclasses import replace

from tests.gpu import recorded
from tests.gpu.pipelined import Record, decoder_names


def value(rule: str, budget: int, v: float) -> dict:
    return {"kind": "value", "temperature": 1.0, "rule": rule, "budget": budget, "value_per_round": v,
            "gain_over_draft": 0.1}


def agreement(decoder: str, disagrees: bool = False, rounds: int = 100, realized: float = 0.5,
              value: float = 0.6) -> dict:
    return {"kind": "agreement", "temperature": 1.0, "decoder": decoder, "budget": "59", "rounds": rounds,
            "realized_per_round": realized, "value_per_round": value, "difference": realized - value, "low": -0.5,
            "high": 0.3, "disagrees": disagrees, "ahead_hit_probability": None, "ahead_rounds": 0}


def records(*decoders: str) -> list[Record]:
    return [Record(d, "prompt/0", [1, 2, 3], 0.5, {"root": [0.1, 0.1]}, 42) for d in decoders]


LINES = [value(rule, 59, 2.0) for rule in ("draft", "root", "oracle")] + [
    {"kind": "a kind values may print one day", "rule": "root"}, {"kind": "cut", "rule": "root", "levels": 1}]


def test_the_command_samples_every_decoder_and_records_at_the_papers_pool(tmp_path):
    cmd = recorded.record_command("tiny", "tiny", None, ("a prompt",), 12, tmp_path / "rounds")
    assert cmd[cmd.index("--decoders") + 1].split(",") == decoder_names()
    assert cmd[cmd.index("--temperature") + 1] == "1" and cmd[cmd.index("--record-rounds") + 1] == str(
        tmp_path / "rounds")
    assert "--pool-depth" in cmd and "--gpus" not in cmd


def test_every_speculative_decoder_agrees_with_its_values():
    result = recorded.summarize(LINES + [agreement("draft"), agreement("root")], records("ar", "draft", "root"))
    assert result["status"] == "passed" and result["rules"] == ["draft", "oracle", "root"]
    assert result["rounds"] == 6 and result["values_b59"] == {"draft": 2.0, "oracle": 2.0, "root": 2.0}
    assert result["figure"].startswith("6 rounds of 3 decoders at T = 1; 2 of 2 judged agree with their values")


def test_a_decoder_without_a_value_is_only_run(monkeypatch):
    monkeypatch.setitem(recorded.RULES, "cover", replace(recorded.RULES["cover"], value=None))
    result = recorded.summarize(LINES + [agreement("draft")], records("ar", "draft", "cover"))
    assert result["status"] == "passed" and result["without_agreement"] == []
    assert list(result["decoders"]) == ["ar", "draft", "cover"]


def test_a_decoder_that_disagrees_or_has_no_agreement_fails():
    result = recorded.summarize(LINES + [agreement("draft", disagrees=True)], records("draft", "root"))
    assert result["status"] == "failed" and result["disagree"] == ["draft"]
    assert result["without_agreement"] == ["root"]
    assert recorded.summarize(LINES[1:] + [agreement("root")], records("root"))["status"] == "failed"  # no draft


def test_rare_acceptances_are_not_judged_but_a_verifier_accepting_far_more_than_its_value_is():
    """12 rounds that expect 0.4 drafted tokens in all and realize none: the interval, from the rounds'
    own spread, excludes zero, yet nothing tells them from chance. Draws count one token a round."""
    rare = [agreement("draft", True, 12, 0.0, 0.032), agreement("root-draw", True, 12, 1.0, 1.03)]
    result = recorded.summarize(LINES + rare, records("draft", "root-draw"))
    assert result["status"] == "passed" and [a["judged"] for a in result["agreement"]] == [False, False]
    assert result["figure"].endswith("too few accepted tokens to judge any against its values")
    wrong = recorded.summarize(LINES + [agreement("draft", True, 12, 2.0, 0.001)], records("draft"))
    assert wrong["status"] == "failed" and wrong["disagree"] == ["draft"]


def test_a_values_run_cut_by_time_keeps_the_lines_it_wrote(tmp_path):
    script = ("import json, sys, time\nprint(json.dumps({'kind': 'value', 'rule': 'draft'}), flush=True)\n"
              "sys.stdout.write('{\"kind\": \"val'); sys.stdout.flush(); time.sleep(60)")
    lines, said = recorded.run_values([sys.executable, "-c", script], tmp_path / "values.jsonl", 5)
    assert said == "out of time" and lines == [{"kind": "value", "rule": "draft"}]
    lines, said = recorded.run_values([sys.executable, "-c", "import sys; sys.exit('no rounds here')"],
                                      tmp_path / "values.jsonl", 30)
    assert said == "failed" and lines == [] and (tmp_path / "values.jsonl").read_text() == ""
