"""Table 20's late rounds: the rounds that start with LATE or more output tokens give root's and root-draw's gains
over draft as their values do (rounds pooled), beside the whole outputs' gains, the gains over the rounds before
token LATE and the difference of the two, paired by prompt; late intervals come from enough prompts only, and a
recording limited to LATE tokens says it has no late round. The outputs holding a late round are counted apart by
how their records say they end, and a separate run of the same prompts limited to LATE tokens (--short) is paired
with the long one by prompt, or refused where it is not the same run's twin."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from evaluation.rounds_file import load_rounds
from evaluation.stats import MIN_INTERVAL_PROMPTS
from study import tables
from study.selection_section import with_emitted
from study.table_lines import json_lines as table_json_lines
from study.tables import LATE, table_20
from pipeline.config import InputError
from study.values import Averages, evaluate
from tests.study.conftest import json_lines
from timing.record_store import read_records, shard_files
from timing.values import main


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


def late_from_second_round(rv):
    """`rv` with every round late but each output's first."""
    first = np.r_[True, rv.prompt[1:] != rv.prompt[:-1]]
    return replace(rv, position=np.where(first, LATE - 1, LATE + np.arange(rv.rounds)))


@pytest.mark.parametrize("stopped", [MIN_INTERVAL_PROMPTS, MIN_INTERVAL_PROMPTS - 1, 3, 0])
def test_late_outputs_are_counted_apart_by_how_they_end(values, stopped):
    rv = late_from_second_round(values)
    rv = replace(rv, finish=np.where(rv.prompt < stopped, "stop", "length"))
    late = rv.position >= LATE
    (line,) = lines_of(rv)
    n = len(rv.prompts)
    assert (line["stop_outputs"], line["length_outputs"]) == (stopped, n - stopped)
    assert line["limit_share"] == pytest.approx((n - stopped) / n)
    k = rv.budgets.tolist().index(8)
    for end, prompts in (("stop", stopped), ("length", n - stopped)):
        assert line[f"late_prompts_{end}"] == prompts
        for rule, name in (("root", "root_over_draft"), ("root-draw", "root_draw_over_draft")):
            field = f"{name}_late_{end}"
            if prompts < 2:  # too few to give apart: the count alone
                assert line[field] is None and line[f"{field}_low"] is None
                continue
            assert line[field] == pytest.approx(direct_gain(rv, late & (rv.finish == end), rule)[k])
            assert (line[f"{field}_low"] is None) == (prompts < MIN_INTERVAL_PROMPTS)
    text = "\n".join(table_20(rv, Averages(rv, n_resamples=200)))
    assert f"Outputs cut at the limit (`finish_reason` `length`): {n - stopped} of {n}" in text
    assert f"ending at a stop: {stopped}, cut at the limit: {n - stopped};" in text
    kinds = [("stop", stopped), ("length", n - stopped)]
    assert text.count("prompts, no interval)") == 2 * sum(2 <= p < MIN_INTERVAL_PROMPTS for _, p in kinds)
    assert text.count(", no figure") == 2 * sum(p < 2 for _, p in kinds)


def test_without_records_the_late_rounds_are_not_split(values):
    (line,) = lines_of(late_from_second_round(values))  # evaluated without the records: no finish_reason
    assert (line["stop_outputs"], line["length_outputs"], line["limit_share"]) == (0, 0, None)
    text = "\n".join(table_20(late_from_second_round(values), Averages(values, n_resamples=200)))
    assert "No record says how the outputs end" in text


def shorter(rv, keep: np.ndarray, order: list[int]):
    """`rv`'s rounds `keep` as a run of its own whose prompts come in `order` (indices into rv.prompts)."""
    at = np.full(len(rv.prompts), -1)
    at[order] = np.arange(len(order))
    return replace(rv, prompt=at[rv.prompt[keep]], prompts=[rv.prompts[i] for i in order],
                   categories=[rv.categories[i] for i in order], values={n: v[keep] for n, v in rv.values.items()},
                   position=rv.position[keep])


def test_a_short_run_is_paired_with_the_long_one_by_prompt(values):
    rv = late_from_second_round(values)
    avg = Averages(rv, n_resamples=200)
    early = rv.position < LATE
    reverse = list(range(len(rv.prompts)))[::-1]
    (line,) = [x for x in table_json_lines(rv, avg, shorter(rv, early, reverse)) if x["kind"] == "late"]
    # a short run that recorded the long one's rounds before token LATE gives what they give, in any prompt order
    for name in ("root_over_draft", "root_draw_over_draft"):
        for end in ("", "_low", "_high"):
            assert line[f"{name}_short{end}"] == pytest.approx(line[f"{name}_before{end}"])
            assert line[f"{name}_whole_less_short{end}"] == pytest.approx(line[f"{name}_whole_less_before{end}"])
    other = shorter(rv, np.ones(rv.rounds, bool), reverse)
    other.values["root"] = other.values["root"] * np.where(other.prompt == 0, 1.5, 1.0)[:, None]  # its prompt 0
    (line,) = [x for x in table_json_lines(rv, avg, other) if x["kind"] == "late"]
    k = rv.budgets.tolist().index(8)
    short_gain = other.values["root"][:, k].sum() / other.values["draft"][:, k].sum() - 1
    assert line["root_over_draft_short"] == pytest.approx(short_gain) != pytest.approx(line["root_over_draft"])
    assert line["root_over_draft_whole_less_short"] == pytest.approx(line["root_over_draft"] - short_gain)
    assert line["root_over_draft_whole_less_short_low"] < line["root_over_draft_whole_less_short"] \
        < line["root_over_draft_whole_less_short_high"]
    text = "\n".join(table_20(rv, avg, other))
    assert f"whole less the {LATE}-token run's (points)" in text and text.count("[") == 12
    assert "whole less the" not in "\n".join(table_20(rv, avg))


def test_a_short_run_without_one_of_the_prompts_is_refused(values):
    rv = late_from_second_round(values)
    keep = rv.prompt > 0
    short = shorter(rv, keep, list(range(1, len(rv.prompts))))
    with pytest.raises(InputError, match=f"--short: the run limited to {LATE} tokens has no output of prompt "
                                         f"{rv.prompts[0]} at T = 0"):
        table_json_lines(rv, Averages(rv, n_resamples=200), short)


SHORT = 8  # LATE's stand-in in the runs below: the mock's outputs end long before LATE tokens


@pytest.fixture(scope="module")
def runs(tmp_path_factory, mock_session, make_options, sweep):
    """Mock runs along `draft` of the same MIN_INTERVAL_PROMPTS prompts: at T = 0 to 40 tokens (`long`) and to
    SHORT (`short`), and at T = 0 and 1 to SHORT (`temperatures`)."""
    out = {}
    for name, tokens, temperatures in (("long", 40, "0"), ("short", SHORT, "0"), ("temperatures", SHORT, "0,1")):
        out[name] = tmp_path_factory.mktemp(name)
        sweep(mock_session(), make_options(out[name], decoders="draft", temperatures=temperatures, budgets="4",
                                           warmup=0, record_rounds=True, limit_prompts=MIN_INTERVAL_PROMPTS,
                                           max_new_tokens=tokens))
    return out


def test_values_sets_a_run_against_its_short_twin_and_splits_its_outputs_by_their_records(runs, monkeypatch,
                                                                                          capsys, tmp_path):
    monkeypatch.setattr(tables, "LATE", SHORT)
    lines = [x for x in json_lines(capsys, str(runs["long"]), "--short", str(runs["short"])) if x["kind"] == "late"]
    ends = [r.finish_reason for path in shard_files(runs["long"]) for r in read_records(path)]
    assert [x["budget"] for x in lines] == [8] and "stop" in ends and "length" in ends
    (line,) = lines
    assert (line["stop_outputs"], line["length_outputs"]) == (ends.count("stop"), ends.count("length"))
    for name in ("root_over_draft", "root_draw_over_draft"):  # greedy: the short run's rounds are those before
        for end in ("", "_low", "_high"):
            assert line[f"{name}_whole_less_short{end}"] == pytest.approx(line[f"{name}_whole_less_before{end}"])
    assert main([str(runs["long"]), "--short", str(runs["short"]), "--out", str(tmp_path), "--no-plots"]) == 0
    assert f"whole less the {SHORT}-token run's (points)" in (tmp_path / "values.md").read_text()


@pytest.mark.parametrize("short, said", [
    ("temperatures", ["--short {run}: not the same decodes as the run's: temperatures (none only in the run, 1 only "
                      "in {run})"]),
    ("long", ["--short {run}: decode prompt_id='builtin/", f"has rounds from output token {SHORT} on; record it at "
                                                           f"--max-new-tokens {SHORT}"]),
    ("missing", ["--short: {run}: not a directory"])])
def test_values_refuses_a_short_run_that_is_not_the_runs_twin(runs, short, said, monkeypatch, capsys):
    monkeypatch.setattr(tables, "LATE", SHORT)
    run = runs.get(short, runs["long"] / "missing")
    assert main([str(runs["long"]), "--short", str(run), "--json"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert captured.out == "" and all(part.format(run=run) in line for part in said)
