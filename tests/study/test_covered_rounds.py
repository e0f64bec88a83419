"""Table 27's selection figures: a mock sweep recorded along `cover` (and `draft`) gives, per temperature, the
share of `cover`'s rounds that held a covered row and the rules' values there, equal to the figures computed
directly from the held rounds' values; rounds without held rows (`draft`, or no record) give none."""

from __future__ import annotations

import re

import numpy as np
import pytest

from evaluation.rounds import RecordedDecode, RecordedRound
from pipeline.pool import Pool
from programs.cli import build
from study.covered_rounds import covered_rounds
from study.options import ValuesOptions
from study.program import load
from study.selection_section import with_emitted
from study.table_lines import json_lines as table_json_lines
from study.tables import table_27
from study.values import Averages, evaluate
from tests.study.conftest import json_lines
from timing.record_store import load_records
from timing.values import main, run_records

ESTIMATES = ("held_share", "draft_value", "root_value", "root_draw_value", "root_over_draft", "root_draw_over_draft")


@pytest.fixture(scope="module")
def covered(tmp_path_factory, mock_session, make_options, sweep):
    """A mock sweep along `draft` and `cover` with its rounds recorded, once for the module."""
    out = tmp_path_factory.mktemp("covered")
    sweep(mock_session(), make_options(out, decoders="draft,cover", temperatures="0,1", budgets="4", warmup=0,
                                       record_rounds=True))
    return out


def test_held_rows_join_the_rounds_of_their_decode(covered):
    data = load([str(covered)], build(ValuesOptions), run_records([str(covered)]))
    records = {(r.prompt_id, r.decoder, r.temperature): r for r in load_records([covered])}
    assert len(records) == len(data.decodes)
    for d in data.decodes:
        r = records[d.key["prompt_id"], d.key["decoder"], d.key["temperature"]]
        assert d.held.tolist() == [bool(h) for h, b in zip(r.held_rows, r.budgets) if b > 0]
        assert d.held.any() == (d.key["decoder"] == "cover" and any(r.held_rows))
    assert any(d.held.any() for d in data.decodes)


def test_a_cover_recording_gives_table_27_as_its_held_rounds_do(covered, capsys):
    lines = [line for line in json_lines(capsys, str(covered)) if line["kind"] == "held-row"]
    data = load([str(covered)], build(ValuesOptions), run_records([str(covered)]))
    records = [r for r in load_records([covered]) if r.decoder == "cover"]
    assert {(line["temperature"], line["decoder"], line["recorded_budget"]) for line in lines} == \
           {(0.0, "cover", "4"), (1.0, "cover", "4")}  # `draft`'s setting holds no row: no line
    for rv in evaluate(data.decodes):
        mine = [line for line in lines if line["temperature"] == rv.temperature]
        assert [line["budget"] for line in mine] == rv.budgets.tolist()
        assert [line["budget"] for line in mine if line["own_budget"]] == [4]
        inside = rv.recorded_in == rv.recorded.index(("cover", "4"))
        held = inside & rv.held
        ran = [r for r in records if r.temperature == rv.temperature]
        assert held.sum() == sum(sum(r.held_rows) for r in ran) > 0
        for k, line in enumerate(mine):
            assert line["setting_rounds"] == inside.sum() and line["held_rounds"] == held.sum()
            assert line["held_share"] == pytest.approx(held.sum() / inside.sum())
            assert 0 < line["held_share"] < 1
            values = {rule: rv.values[rule][held, k] for rule in ("draft", "root", "root-draw")}
            assert line["draft_value"] == pytest.approx(values["draft"].mean())
            assert line["root_draw_value"] == pytest.approx(values["root-draw"].mean())
            assert line["root_over_draft"] == pytest.approx(values["root"].sum() / values["draft"].sum() - 1)
            assert line["root_draw_over_draft"] == pytest.approx(values["root-draw"].sum() / values["draft"].sum() - 1)
            if rv.temperature == 0.0:  # under greedy decoding root never falls below draft
                assert line["root_value"] >= line["draft_value"] - 1e-12
            for name in ESTIMATES:
                assert line[f"{name}_low"] - 1e-12 <= line[name] <= line[f"{name}_high"] + 1e-12, (name, line)


def test_the_report_gives_table_27_beside_the_papers_words(covered, tmp_path, capsys):
    assert main([str(covered), "--out", str(tmp_path), "--resamples", "200", "--no-plots"]) == 0
    text = (tmp_path / "values.md").read_text()
    assert text.count("#### Table 27: selection in the rounds of the covering decoder") == 2  # one per temperature
    rows = re.findall(r"^\| cover at B = 4 \| 4 \| (\d+) of (\d+) \| [\d.]+% \[", text, re.M)
    assert len(rows) == 2 and all(0 < int(a) < int(b) for a, b in rows)
    assert "| draft at B = 4 |" not in text
    assert text.count("selection improves in the rounds that hold the root row") == 2


def round_of(edge: float) -> RecordedRound:
    pool = Pool.from_edges(np.array([1]), np.array([-1]), np.array([-0.1]), np.zeros(1, bool))
    return RecordedRound(budget=1, accepted=0, emitted=np.array([1]), pool=pool, edge=np.array([edge]))


KEY = dict(category="qa", turn=0, decoder="cover", temperature=1.0, budget=1, seed=0)


def test_each_round_keeps_its_own_held_flag():
    """Two prompts' rounds with their held flags: the held rounds' draft value is theirs, (0.1 + 0.3) / 2, and
    held and values stay aligned however the decodes are read (b before a here)."""
    decodes = [RecordedDecode({**KEY, "prompt_id": "b"}, [round_of(0.3), round_of(0.7)], held=np.array([True, False])),
               RecordedDecode({**KEY, "prompt_id": "a"}, [round_of(0.9), round_of(0.1), round_of(0.5)],
                              held=np.array([False, True, False]))]
    (rv,) = evaluate(decodes, budgets=(1,))
    assert rv.values["draft"][rv.held, 0].tolist() == pytest.approx([0.1, 0.3])
    (c,) = covered_rounds(rv, Averages(rv, n_resamples=50))
    assert (c.decoder, c.budget, c.rounds, c.held_rounds) == ("cover", "1", 5, 2)
    assert c.held_share.value == pytest.approx(0.4)
    assert c.values["draft"][0].value == pytest.approx(0.2)
    assert c.values["root-draw"][0].value == pytest.approx(1.0)  # the draw counts, nothing beneath it at B = 1
    assert c.gains["root"][0].value == pytest.approx(0.0)  # one candidate: root keeps draft's tree


def test_rounds_without_held_rows_give_no_table_27():
    decodes = [RecordedDecode({**KEY, "prompt_id": "a"}, [round_of(0.9), round_of(0.1)])]  # no record said
    (rv,) = evaluate(decodes, budgets=(1,))
    rv = with_emitted(rv)
    avg = Averages(rv, n_resamples=50)
    assert rv.held.tolist() == [False, False] and rv.recorded_in.tolist() == [0, 0]
    assert covered_rounds(rv, avg) == []
    assert not [line for line in table_json_lines(rv, avg) if line["kind"] == "held-row"]
    assert table_27(rv, avg)[0].startswith("#### Table 27: not given")
