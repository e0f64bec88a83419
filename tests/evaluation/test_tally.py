"""A run's running tally gives what analysing its records gives: the same speeds, round metrics, budget shares
and gains, over the same complete prompts, while keeping no record."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evaluation.summary import analyse, as_json
from evaluation.tally import Tally
from pipeline.result import PHASES

from tests.evaluation.test_summary import sweep_records


def tallied(records, temperature=0.0, budget=8, category=None, **kw) -> Tally:
    tally = Tally(temperature, budget, category, **kw)
    for r in records:
        tally.add(r)
    return tally


def assert_same(got, want) -> None:
    """Equal but for the phases, which a tally does not keep (the records' analysis gives their medians)."""
    phases = {"round_ms", *(f"{p}_ms" for p in PHASES)}
    analysed = as_json(want)
    analysed["decoders"] = {d: {k: v for k, v in entry.items() if k not in phases}
                            for d, entry in analysed["decoders"].items()}
    assert as_json(got) == analysed
    assert (got.prompt_ids, got.prompts_seen, got.seeds, got.gains) == (want.prompt_ids, want.prompts_seen,
                                                                        want.seeds, want.gains)
    for d, st in want.decoders.items():
        assert np.array_equal(got.decoders[d].tokens, st.tokens) and np.array_equal(got.decoders[d].seconds, st.seconds)
        assert got.decoders[d].budget_shares() == st.budget_shares() and got.decoders[d].phases is None


def test_a_tally_equals_the_analysis_of_the_same_records(make_record):
    records = sweep_records(make_record, n_prompts=7, seeds=(0, 1), rng=4)
    records = [dataclasses.replace(r, cut_pools=True, pool_depths=[1 + i % 3] * r.rounds)  # some decodes cut their pools
               if r.decoder == "root-draw" and r.seed == 1 else r for i, r in enumerate(records)]
    records = [dataclasses.replace(r, lookup=8, copied=[min(a, i % 3) for a in r.accepted])  # context lookup's copies
               if r.decoder == "draft" else r for i, r in enumerate(records)]
    records += [make_record("p/9", "draft", tokens=5)]  # a prompt without every decoder: not complete
    records += [make_record("p/0", "draft", warmup=True, tokens=10**6)]  # warm-ups never count
    records += [dataclasses.replace(r, budget=59) for r in sweep_records(make_record, n_prompts=2)]  # another setting
    for speed_tokens in ("output", "round"):
        assert_same(tallied(records, speed_tokens=speed_tokens).setting(n_resamples=300, rng=2),
                    analyse(records, 0.0, 8, speed_tokens=speed_tokens, n_resamples=300, rng=2))
    assert_same(tallied(records, category="c1").setting(), analyse(records, 0.0, 8, "c1"))


def test_turns_rounds_and_budgets_add_up_as_in_the_analysis(make_record):
    records = [make_record(f"q/{i}", d, tokens=10 + i, seconds=1.0 + t, overshoot=2, turn=t, budget="auto",
                           tree_sizes=(0, 3, 9)[: 1 + (i + t) % 3], accepted=(0, 2, 4)[: 1 + (i + t) % 3])
               for i in range(5) for d in ("ar", "root-draw") for t in (0, 1)]
    records = [dataclasses.replace(r, budgets=[4 + (i % 3) * 4 for i in range(r.rounds)]) for r in records]
    assert_same(tallied(records, budget="auto").setting(), analyse(records, 0.0, "auto"))


def test_a_decode_run_summarises_with_the_tally(mock_session):
    from evaluation.prompts import Prompt
    from pipeline.settings import DecodeConfig
    from programs.options import RunOptions
    from programs.target_program import run_decodes

    run = RunOptions(decode=DecodeConfig(max_new_tokens=12), decoders="ar,pearl,root-draw", num_seeds=2)
    prompts = [Prompt(f"t/{i}", "t", text) for i, text in enumerate(("a poem", "the sea", "at night"))]
    records, tally = [], Tally(0.0, 8, speed_tokens="output")
    for record in run_decodes(mock_session(), prompts, run):
        records.append(record)
        tally.add(record)
    assert len(records) == 18
    assert_same(tally.setting(), analyse(records, 0.0, 8, speed_tokens="output"))


def shape(obj):
    """What an object holds, its numbers left out: containers with their keys and lengths, scalars as types."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return type(obj).__name__, len(obj), [shape(x) for x in sorted(obj, key=repr)]
    if dataclasses.is_dataclass(obj):
        return {f.name: shape(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return type(obj).__name__


def test_what_a_tally_keeps_does_not_grow_with_its_decodes(make_record):
    def kept(seeds: int):
        tally = tallied(sweep_records(make_record, n_prompts=3, seeds=range(seeds)))
        return shape(tally.sums), shape(tally.conversations)

    assert kept(1000) == kept(100)  # ten times the decodes: the same sums, only larger numbers in them
