"""Table 20's late rounds: the rounds that start with LATE or more output tokens give root's and root-draw's gains
over draft as their values do (rounds pooled), beside the whole outputs' gains, the gains over the rounds before
token LATE and the difference of the two, paired by prompt; late intervals come from enough prompts only, and a
recording limited to LATE tokens says it has no late round."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from evaluation.rounds_file import load_rounds
from evaluation.stats import MIN_INTERVAL_PROMPTS
from study.selection_section import with_emitted
from study.table_lines import json_lines as table_json_lines
from study.tables import LATE, table_20
from study.values import Averages, evaluate


@pytest.fixture(scope="module")
def values(tmp_path_factory, mock_session, make_options, sweep):
    """A mock recording of MIN_INTERVAL_PROMPTS prompts along `draft` at T = 0: its rounds' values."""
    out = tmp_path_factory.mktemp("late")
    sweep(mock_session(), make_options(out, decoders="draft", temperatures="0", budgets="4", warmup=0,
                                       record_rounds=True, limit_prompts=MIN_INTERVAL_PROMPTS))
    (rv,) = evaluate(next(iter(load_rounds([out]))).decodes)
    rv = with_emitted(rv)
    assert len(rv.prompts) == MIN_INTERVAL_PROMPTS
    return rv


def lines_of(rv):
    return [line for line in table_json_lines(rv, Averages(rv, n_resamples=200)) if line["kind"] == "late"]


def direct_gain(rv, keep: np.ndarray, rule: str) -> np.ndarray:
    return rv.values[rule][keep].sum(0) / rv.values["draft"][keep].sum(0) - 1


def test_late_rounds_give_their_own_gains_beside_the_whole_outputs(values):
    first = np.r_[True, values.prompt[1:] != values.prompt[:-1]]  # each output's first round stays early
    position = np.where(first, LATE - 1, LATE + np.arange(values.rounds))
    rv = replace(values, position=position)
    late = position >= LATE
    lines = lines_of(rv)
    assert [line["budget"] for line in lines] == [8]  # B = 8 and 59 where reported: 59 is beyond this pool
    (line,) = lines
    k = rv.budgets.tolist().index(8)
    assert (line["late_rounds"], line["outputs"]) == (int(late.sum()), len(rv.prompts))
    assert line["late_prompts"] == len(set(rv.prompt[late].tolist())) >= MIN_INTERVAL_PROMPTS
    for rule, name in (("root", "root_over_draft"), ("root-draw", "root_draw_over_draft")):
        assert line[f"{name}_late"] == pytest.approx(direct_gain(rv, late, rule)[k])
        assert line[name] == pytest.approx(direct_gain(rv, np.ones(rv.rounds, bool), rule)[k])
        assert line[f"{name}_before"] == pytest.approx(direct_gain(rv, ~late, rule)[k])
        assert line[f"{name}_whole_less_before"] == pytest.approx(line[name] - line[f"{name}_before"])
        for field in (f"{name}_late", name, f"{name}_before", f"{name}_whole_less_before"):
            assert line[f"{field}_low"] <= line[field] <= line[f"{field}_high"]
    assert line["root_over_draft_late"] != pytest.approx(line["root_over_draft"])  # not the whole outputs again
    text = "\n".join(table_20(rv, Averages(rv, n_resamples=200)))
    assert f"{int(late.sum())} rounds, in {line['late_prompts']} of {len(rv.prompts)} outputs)" in text
    assert text.count("[") == 8  # every cell with its interval, two rules at one budget


def test_late_rounds_of_too_few_prompts_have_no_interval(values):
    rv = replace(values, position=np.where(values.prompt < MIN_INTERVAL_PROMPTS - 1, LATE, 0))
    (line,) = lines_of(rv)
    assert line["late_prompts"] == MIN_INTERVAL_PROMPTS - 1
    assert line["root_over_draft_late"] is not None and line["root_over_draft_late_low"] is None
    assert line["root_over_draft_low"] is not None  # the whole outputs' interval, from every prompt
    text = "\n".join(table_20(rv, Averages(rv, n_resamples=200)))
    assert text.count("[") == 6  # all but the late rounds' cells


def test_a_recording_limited_to_late_tokens_has_no_late_round(values):
    rv = replace(values, position=np.full(values.rounds, LATE - 1))
    assert lines_of(rv) == [{"kind": "late", "temperature": 0.0, "rounds": rv.rounds, "from_token": LATE,
                             "late_rounds": 0, "late_prompts": 0}]
    assert table_20(rv, Averages(rv, n_resamples=200))[0].startswith("#### Table 20: no late round")
