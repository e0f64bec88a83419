"""The pipelined section on launcher runs made up here: records read and summarised, a run cut by time keeps
what ran, and outputs that part with and without graphs fail only beyond a near tie."""

from __future__ import annotations

import json
import sys
import time

import pytest

from models.tokenizers import MockTokenizer
from tests.gpu import pipelined
from tests.gpu.check import REHEARSAL
from tests.gpu.section import Budget, Section

PROMPT = REHEARSAL.prompts[0]
# A launcher that prints the decode lines it is given, then sleeps: argv[1] the lines, argv[2] the seconds.
FAKE_LAUNCHER = "import json, sys, time\nfor line in json.loads(sys.argv[1]): print(line, flush=True)\n" \
                "time.sleep(float(sys.argv[2]))"


def record_line(decoder: str, prompt: int, tokens: list[int], phases: dict[str, list[float]] | None = None) -> str:
    """A --json line of one decode (evaluation.record's fields that the check reads)."""
    return json.dumps({"kind": "decode", "decoder": decoder, "prompt_id": f"prompt/{prompt}", "token_ids": tokens,
                       "new_tokens": len(tokens), "seconds": 0.5, "phases": phases or {"root": [0.1] * len(tokens)},
                       "text": "", "budget": 8, "prompt_tokens": len(PROMPT)})


def test_records_are_read_and_summarised_per_decoder():
    phases = {"draft": [0.004, 0.004], "root": [0.002, 0.002], "wait": [0.001, 0.003], "select": [0.0002, 0.0004],
              "tree": [0.005, 0.005], "commit": [0.0001, 0.0001]}
    records = [pipelined.read_record(record_line("pearl", p, [1, 2, 3], phases)) for p in (0, 1)]
    assert pipelined.read_record("[target] loaded") is None
    assert pipelined.read_record(json.dumps({"kind": "run", "models": {}})) is None
    s = pipelined.summarize(records)["pearl"]
    assert s["rounds"] == 4 and s["tok_per_s"] == 6.0
    assert s["median_host_ms"] == pytest.approx(0.4) and s["median_round_ms"] == pytest.approx(9.4)
    assert s["median_draft_ms"] == pytest.approx(4.0)


def test_partings_name_the_first_differing_token_and_what_the_target_had_read():
    def record(decoder, prompt, tokens):
        return pipelined.read_record(record_line(decoder, prompt, tokens))

    a = [record("ar", 0, [1, 2]), record("root", 0, [3, 4, 5]), record("root", 1, [4])]
    b = [record("ar", 0, [1, 2]), record("root", 0, [3, 9])]
    assert pipelined.missing(a, b) == ["root prompt prompt/1"] and pipelined.missing(a, a) == []
    ids = MockTokenizer(512).chat_ids([PROMPT])
    assert len(ids) == len(PROMPT)  # one id a character: the count the records say the target read
    (parting,) = pipelined.partings(a, b, pipelined.prompt_ids_of(REHEARSAL))
    assert (parting.decoder, parting.prompt, parting.position, parting.tokens) == ("root", "prompt/0", 1, (4, 9))
    assert parting.prefix == (*ids, 3)
    with pytest.raises(ValueError, match="prompt prompt/0: 2 ids here, but the decode read 42"):
        pipelined.partings(a, b, lambda prompt_id: [1, 2])


def run_section(tmp_path, monkeypatch, runs: dict[bool, tuple[list[str], float]], seconds: float,
                margins: list[float | None] | None = None) -> dict:
    """The section over made-up launcher runs ({graphs: (lines, seconds it then sleeps)}), after a parity
    section that measured a float32 gap (the rehearsal's dtype) of 5e-5, with the margins a child would
    measure."""
    monkeypatch.setattr(pipelined, "launch_command", lambda *a: [sys.executable, "-c", FAKE_LAUNCHER,
                                                                 json.dumps(runs[a[-1]][0]), str(runs[a[-1]][1])])
    monkeypatch.setattr(pipelined, "measure_margins", lambda s, parts: (margins or [None] * len(parts), "passed"))
    earlier = {"parity": {"tiny float32": {"worst_gap": 5e-5}, "tiny bfloat16": {"worst_gap": 1e-3}}}
    s = Section("pipelined", REHEARSAL, Budget(seconds, time.monotonic() + seconds), tmp_path, earlier)
    return pipelined.section(s)


def test_a_run_cut_by_time_keeps_the_decodes_that_ran(tmp_path, monkeypatch):
    done = [record_line("ar", 0, [1, 2]), record_line("root", 0, [3])]
    result = run_section(tmp_path, monkeypatch, {True: (done, 60), False: (done[:1], 0)}, seconds=10)
    assert result["status"] == "out of time"
    assert list(result["decoders"]) == ["ar", "root"] and list(result["decoders_no_graphs"]) == ["ar"]
    assert result["missing"] == [] and result["partings"] == []  # root never ran without graphs: not missing


@pytest.mark.parametrize("margin, status", [(9e-5, "passed"), (1.1e-4, "failed"), (None, "failed")])
def test_outputs_that_part_fail_only_beyond_twice_the_parity_gap(tmp_path, monkeypatch, margin, status):
    graphs = [record_line("ar", 0, [1, 2, 3]), record_line("root", 0, [3, 4])]
    eager = [record_line("ar", 0, [1, 7, 7]), record_line("root", 0, [3, 4])]
    result = run_section(tmp_path, monkeypatch, {True: (graphs, 0), False: (eager, 0)}, 30, [margin])
    assert result["status"] == status and result["parity_gap"] == {"gap": 5e-5, "from": "parity, tiny float32"}
    assert result["partings"] == [{"decoder": "ar", "prompt": "prompt/0", "position": 1, "tokens": [2, 7],
                                   "margin": margin, "explained": status == "passed"}]
    assert result["outputs_differ"] == ([] if status == "passed" else ["ar prompt prompt/0"])
    assert result["figure"].endswith("1 outputs part at near ties" if status == "passed" else "1 outputs DIFFER")


def test_a_decode_one_whole_run_lacks_fails(tmp_path, monkeypatch):
    graphs = [record_line("ar", 0, [1]), record_line("root", 0, [3])]
    result = run_section(tmp_path, monkeypatch, {True: (graphs, 0), False: (graphs[:1], 0)}, 30)
    assert result["status"] == "failed" and result["outputs_differ"] == result["missing"] == ["root prompt prompt/0"]


def test_the_parity_gap_is_the_largest_measured_in_the_dtype_within_its_tolerance():
    parity = {"tiny bfloat16": {"worst_gap": 2e-3}, "llama-3.2-1b bfloat16": {"worst_gap": 4e-3},
              "tiny float32": {"worst_gap": 1e-6}, "different": []}
    assert pipelined.parity_gap(parity, "bfloat16") == (4e-3, "parity, llama-3.2-1b bfloat16")
    assert pipelined.parity_gap({"tiny bfloat16": {"worst_gap": 0.3}}, "bfloat16")[0] == 1e-2
    gap, said = pipelined.parity_gap({}, "bfloat16")
    assert gap == 1e-2 and said == "the bfloat16 tolerance: the parity section measured no bfloat16 gap"
