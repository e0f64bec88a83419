"""The retained-row section of the values program, end to end on a mock sweep of eight prompts recorded with
--record-rounds: its JSON kinds and fields, agreement figures equal to those computed from the rounds file by
hand (a mock's rows are exact, so a matched row is the next root row itself), the exact row at T = 1 valued as
`root`, and the report's tables and figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from study.first_factor import CONTROLS
from evaluation.rounds import ROW_KINDS
from evaluation.rounds_file import load_rounds
from study.retained_rows import ROWS
from programs.cli import build
from study.options import ValuesOptions
from study.program import SECTIONS, load
from study.rows_section import rows_section
from study.selection_section import selection_section

PROMPTS = 8  # four in each half: enough for the rerankers to be fitted
GRID = dict(decoders="draft,root-draw", temperatures="0,1", budgets="4", warmup=1, record_rounds=True)
ROW_FIELDS = {"kind", "temperature", "rounds", "row", "available_share", "mean_tv", "median_tv", "argmax_agreement"}
CONTROL_FIELDS = {"kind", "temperature", "rounds", "control", "budget", "value_per_round", "gain_over_draft",
                  "gain_low", "gain_high"}
RERANKER_FIELDS = {"kind", "temperature", "rounds", "reranker", "top1_accuracy", "draft_top1_accuracy",
                   "squared_error", "draft_squared_error"}


@pytest.fixture(scope="module")
def run(tmp_path_factory, mock_session, make_options, sweep):
    out = tmp_path_factory.mktemp("rows")
    prompts = out / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "category": ("qa", "code")[i % 2],
                                           "prompt": f"Prompt number {i}: say something about {i * 7}."}) + "\n"
                               for i in range(PROMPTS)))
    sweep(mock_session(), make_options(out, prompts=(str(prompts),), **GRID))
    return out


@pytest.fixture(scope="module")
def section(run):
    """The section over the run as the values program builds it, once (its rerankers are the costly part)."""
    data = load([str(run)], build(ValuesOptions, resamples=200, budgets="1,2,4,8"))
    return rows_section(data)


@pytest.fixture(scope="module")
def lines(section):
    selection = selection_section(section.data)
    return [json.loads(json.dumps(x)) for x in selection.json_lines() + section.json_lines()]


def test_the_values_program_reports_the_section_after_the_selection_rules():
    order = [make for _, make in SECTIONS]
    assert order.index(rows_section) > order.index(selection_section)


def test_json_has_every_kind_with_its_fields(lines):
    rows = [x for x in lines if x["kind"] == "rows"]
    controls = [x for x in lines if x["kind"] == "control"]
    rerankers = [x for x in lines if x["kind"] == "reranker"]
    assert {(x["temperature"], x["row"]) for x in rows} == {(t, r) for t in (0.0, 1.0) for r in ROWS}
    assert {(x["temperature"], x["control"], x["budget"]) for x in controls} == \
           {(t, c, b) for t in (0.0, 1.0) for c in CONTROLS for b in (1, 2, 4, 8)}
    assert {(x["temperature"], x["reranker"]) for x in rerankers} == {(t, r) for t in (0.0, 1.0) for r in ("base", "rows")}
    for found, fields in ((rows, ROW_FIELDS), (controls, CONTROL_FIELDS), (rerankers, RERANKER_FIELDS)):
        for x in found:
            assert fields <= set(x), x
    for x in controls:
        assert x["gain_low"] <= x["gain_over_draft"] + 1e-9 <= x["gain_high"] + 2e-9
        if x["control"].startswith("mix-"):
            assert set(x["weights"]) <= {0.25, 0.5, 0.75} and len(x["weights"]) == 2
    for x in rerankers:
        assert 0 <= x["top1_accuracy"] <= 1 and 0 <= x["squared_error"] <= 1


def test_agreement_figures_are_those_of_the_rounds_file(run, lines):
    """Every row kind's share, mean total variation and argmax agreement, computed here from the recorded
    reductions; matched rows are the next root row itself on a mock (its rows at every address are exact)."""
    (found,) = load_rounds([run])
    for x in (line for line in lines if line["kind"] == "rows" and line["row"] not in ("own-root",)):
        rounds = [r for d in found.decodes if d.key["temperature"] == x["temperature"] and not d.key.get("warmup")
                  for r in d.rounds if r.prefix_root >= 0]
        kind = "token-only" if x["row"].startswith("token-only") else x["row"]
        want_path = {"token-only-on-path": True, "token-only-off-path": False}.get(x["row"])

        def picked(r):
            keep = r.rows.kind == ROW_KINDS.index(kind)
            return keep if want_path is None else keep & (r.rows.on_path == want_path)

        tv = np.concatenate([r.rows.tv[picked(r)] for r in rounds])
        agree = np.concatenate([r.rows.agree[picked(r)] for r in rounds])
        assert x["rounds"] == len(rounds) and x["rows"] == len(tv)
        assert x["available_share"] == pytest.approx(np.mean([picked(r).any() for r in rounds]))
        if len(tv):
            assert x["mean_tv"] == pytest.approx(tv.mean(), abs=1e-6)
            assert x["median_tv"] == pytest.approx(np.median(tv), abs=1e-6)
            assert x["argmax_agreement"] == pytest.approx(agree.mean())
        if x["row"] == "matched":
            assert x["rows"] > 0 and x["mean_tv"] < 1e-5 and x["argmax_agreement"] == 1.0


def test_the_exact_row_at_t1_is_valued_as_root(lines):
    root = {x["budget"]: x["value_per_round"] for x in lines
            if x["kind"] == "value" and x["rule"] == "root" and x["temperature"] == 1.0}
    exact = {x["budget"]: x["value_per_round"] for x in lines
             if x["kind"] == "control" and x["control"] == "substitute-exact" and x["temperature"] == 1.0}
    assert exact.keys() == root.keys()
    for b in root:
        assert exact[b] == pytest.approx(root[b], abs=1e-9)


def test_report_has_the_papers_tables_and_figure_6(section, tmp_path):
    text = "\n".join(section.markdown())
    for table in ("Table 22", "Table 23", "Table 26", "Table 19", "Table 4", "Table 25", "Figure 6"):
        assert table in text, table
    assert text.count("The paper:") == 2 * 4  # Tables 22, 19, 4, 25 (23 and 26 in a column), both temperatures
    for row in ("| rows |", "| base |", "| isotonic-q1 |", "| per-depth |", "| substitute-exact |", "| mix-cache |",
                "| own-root |", "| token-only-on-path |"):
        assert row in text, row
    assert "int8 copy" not in text  # mock models: no note on the default pair's drafter
    assert section.plots(tmp_path) == ["rows_substitution.png"]
    assert (tmp_path / "rows_substitution.png").stat().st_size > 10_000
