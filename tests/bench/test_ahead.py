"""The side-by-side benchmark of drafting ahead: its summary arithmetic, its command line, and a run on the mock
pair."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from bench.ahead import summarize, variant_settings
from evaluation.record import DecodeRecord


def row(prompt, group, budget, variant, tokens, seconds, wait=(0.01,), tried=0, hits=0, hidden=(), depths=(4,),
        emitted=(2,)):
    return {"prompt": prompt, "group": group, "budget": budget, "variant": variant, "tokens": tokens,
            "seconds": seconds, "rounds": 1, "wait": list(wait), "tried": tried, "hits": hits, "hidden": list(hidden),
            "depths": list(depths), "emitted": list(emitted)}


def test_the_summary_pairs_each_prompt_with_itself():
    rows = [row("a", "qa", None, None, 10, 1.0), row("b", "code", None, None, 10, 2.0),
            row("a", "qa", 8, "none", 20, 1.0, wait=(0.04, 0.06)),
            row("a", "qa", 8, "ahead", 20, 0.5, wait=(0.0,), tried=4, hits=1, hidden=(0.02,)),
            row("b", "code", 8, "none", 10, 1.0),
            row("b", "code", 8, "ahead", 10, 2.0, tried=4, hits=3, hidden=(0.01, 0.03, 0.05), depths=(2, 3),
                emitted=(1, 4))]
    s = summarize(rows, [8])["budgets"]["8"]
    assert "lend" not in s  # a variant not run is left out
    assert s["ahead"]["over_none_median"] == pytest.approx(1.25) and s["ahead"]["over_none_range"] == [0.5, 2.0]
    assert s["ahead"]["hit_rate"] == pytest.approx(0.5) and s["ahead"]["hidden_ms_median"] == pytest.approx(25.0)
    assert s["none"]["hit_rate"] is None and s["none"]["wait_ms_median"] == pytest.approx(40.0)
    assert s["none"]["over_ar"] == pytest.approx((30 / 2.0) / (20 / 3.0))
    assert s["ahead"]["pool_depth_mean"] == pytest.approx(3.0) and s["ahead"]["tau"] == pytest.approx(7 / 3)
    assert s["by_group"]["qa"] == {"prompts": 1, "ar": 10.0, "none": 20.0, "ahead": 40.0}


def test_window_variants_name_their_window():
    assert variant_settings("window-256") == {"drafter_window": 256}
    assert variant_settings("cut+window-64") == {"cut_pools": True, "drafter_window": 64}
    assert variant_settings("cut") == {"cut_pools": True}
    assert [variant_settings(v) for v in ("window-0", "window-x", "window", "lend+window-8", "window-²")] == [None] * 5


def test_the_summary_keeps_the_variants_as_run():
    rows = [row("a", "qa", None, None, 10, 1.0), row("a", "qa", 8, "none", 20, 1.0),
            row("a", "qa", 8, "window-64", 30, 1.0, emitted=(3,))]
    s = summarize(rows, [8])["budgets"]["8"]
    assert list(s) == ["none", "window-64", "by_group"] and s["window-64"]["over_none_median"] == pytest.approx(1.5)


@pytest.mark.slow
def test_a_run_on_the_mock_pair_ends_with_one_json_document(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "category": c, "prompt": f"Tell me about {c} {i}"}) + "\n"
                               for i, c in enumerate(["qa", "math", "qa", "coding"])))
    done = subprocess.run([sys.executable, "-m", "bench.ahead", "--target", "mock", "--prompts", str(prompts),
                           "--limit-prompts", "2", "--budgets", "4", "--max-new-tokens", "16",
                           "--records", str(tmp_path / "records.jsonl")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.splitlines()[-1])
    assert doc["prompts"] == 2
    records = [DecodeRecord.from_json(json.loads(line), f"records.jsonl:{n}")
               for n, line in enumerate((tmp_path / "records.jsonl").read_text().splitlines(), 1)]
    assert len(records) == 2 * 7  # per prompt: ar, then each of the 6 variants at the one budget
    assert [(r.decoder, r.bench.variant) for r in records[:7]].count(("ar", None)) == 1
    assert {r.bench.variant for r in records[1:7]} == set(doc["budgets"]["4"]) - {"by_group"}
    assert {r.bench.budget for r in records[1:7]} == {4}
    tokens = sum(r.new_tokens for r in records if r.bench.variant == "cut")
    seconds = sum(r.seconds for r in records if r.bench.variant == "cut")
    assert doc["budgets"]["4"]["cut"]["tokens_per_second"] == pytest.approx(tokens / seconds)
    assert set(doc["budgets"]["4"]) == {"none", "lend", "ahead", "cut", "cut-weigh", "cut+ahead", "by_group"}
    assert doc["budgets"]["4"]["ahead"]["hit_rate"] is not None and doc["budgets"]["4"]["none"]["hit_rate"] is None


@pytest.mark.parametrize("make, message", [
    (lambda d: (d / "old.jsonl").write_text("{}\n") and d / "old.jsonl",
     r"holds old.jsonl already; write elsewhere \(--records NEW_FILE\) or give --overwrite"),
    (lambda d: d / "missing" / "r.jsonl", r"--records .*r.jsonl: no directory .*missing"),
], ids=["exists", "no-directory"])
def test_records_go_to_a_new_file_only(tmp_path, make, message):
    path = make(tmp_path)
    before = path.read_text() if path.exists() else None
    done = subprocess.run([sys.executable, "-m", "bench.ahead", "--target", "mock", "--prompts", "humaneval",
                           "--records", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and re.search(r"error: .*" + message, done.stderr), done.stderr
    assert (path.read_text() if path.exists() else None) == before  # another run's records untouched


@pytest.mark.parametrize("argv, words", [
    (["--budgets", "8,x"], "--budgets takes comma-separated positive integers or auto, got '8,x'"),
    (["--budgets", "0"], "--budgets takes comma-separated positive integers or auto, got '0'"),
    (["--decoder", "nope"], "--decoder must be one of"),
    (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be a positive integer"),
], ids=["budget-text", "budget-zero", "decoder", "temperature", "max-new-tokens"])
def test_bad_values_end_with_one_line_before_the_pair_starts(argv, words, capsys):
    from bench.ahead import main

    with pytest.raises(SystemExit) as stop:
        main(["--target", "mock", "--prompts", "builtin", *argv])
    assert stop.value.code == 2
    assert words in capsys.readouterr().err.strip().splitlines()[-1]
