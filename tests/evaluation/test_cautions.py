"""A setting's gains come with the cautions that say when they measure the machine, not speculation: decoders
that did the same work, timings of the same work that spread beyond what the interval carries, and load."""

from __future__ import annotations

import dataclasses

import pytest

from evaluation.cautions import SPREAD_LIMIT, Caution
from evaluation.record import DecodeRecord
from evaluation.summary import analyse, as_json
from evaluation.tally import Tally


def plain(make_record, prompt, decoder, **kw):
    """A record whose every round ran plain (budget 0), as budget auto leaves speculation off."""
    return make_record(prompt, decoder, budget="auto", tree_sizes=(0, 0, 0), accepted=(0, 0, 0), budgets=(0, 0, 0),
                       **kw)


def both(records, temperature=0.0, budget="auto"):
    """analyse's and the running tally's setting of the same records."""
    tally = Tally(temperature, budget)
    for r in records:
        tally.add(r)
    return analyse(records, temperature, budget), tally.setting()


def test_decoders_that_all_ran_plain_rounds_are_said_to_have_done_the_same_work(make_record):
    records = [plain(make_record, f"p/{i}", d, seconds=1.0 if d == "draft" else 1.9) for i in range(6)
               for d in ("ar", "draft", "root-draw")]
    for s in both(records):
        (caution,) = s.cautions
        assert caution.kind == "same work" and caution.message.startswith("every decoder ran plain rounds (no tree")
        assert set(caution.pairs) == set(s.gains) and s.gains[("draft", "ar")].gain > 0.8  # a gain, flagged
        doc = as_json(s)
        assert doc["gains"]["draft/ar"]["cautions"] == ["same work"] and doc["cautions"][0]["kind"] == "same work"


def test_a_decoder_that_speculated_is_no_same_work(make_record):
    records = [plain(make_record, f"p/{i}", "ar") for i in range(3)]
    records += [make_record(f"p/{i}", "draft", budget="auto", budgets=(8, 0)) for i in range(3)]
    records += [plain(make_record, f"p/{i}", "root-draw") for i in range(3)]
    (caution,) = analyse(records, 0.0, "auto").cautions
    assert caution.pairs == (("root-draw", "ar"),) and caution.message.startswith("ar, root-draw ran plain")
    assert not caution.concerns(("draft", "ar"))


def test_a_decoder_that_speculated_in_one_round_of_a_hundred_did_plain_decodings_work(make_record):
    records = [plain(make_record, f"p/{i}", "ar") for i in range(3)]
    records += [make_record(f"p/{i}", "draft", budget="auto", tree_sizes=(8,) + (0,) * (99 + i),
                            accepted=(2,) + (0,) * (99 + i), budgets=(8,) + (0,) * (99 + i)) for i in range(3)]
    (caution,) = analyse(records, 0.0, "auto").cautions
    assert caution.pairs == (("draft", "ar"),)
    records[3] = make_record("p/0", "draft", budget="auto", tree_sizes=(8, 8) + (0,) * 98,
                             accepted=(2, 2) + (0,) * 98, budgets=(8, 8) + (0,) * 98)  # 2 of 100: speculation
    assert analyse(records, 0.0, "auto").cautions == []


def test_the_same_works_timings_spreading_beyond_the_limit_are_flagged(make_record):
    records = [make_record(f"p/{i}", d, prefill_seconds=0.3) for i in range(4) for d in ("ar", "draft")]
    assert analyse(records, 0.0, 8).cautions == []
    records[5] = dataclasses.replace(records[5], prefill_seconds=0.3 * SPREAD_LIMIT * 1.5)  # p/2's draft
    for s in both(records, budget=8):
        (caution,) = s.cautions
        assert caution.kind == "spread" and "the prefill of p/2" in caution.message
        assert "0.30 to 1.35 s" in caution.message
        assert not caution.pairs  # every gain of the setting
    tiny = [make_record(f"p/{i}", d, prefill_seconds=0.01 if d == "ar" else 0.1) for i in range(4)
            for d in ("ar", "draft")]
    assert analyse(tiny, 0.0, 8).cautions == []  # prefills below the floor: a scheduler's tick


def test_a_machine_busier_than_the_pair_keeps_itself_is_flagged(make_record):
    quiet = [make_record(f"p/{i}", d, load_average=(2.5, 3.0), cpus=2) for i in range(3) for d in ("ar", "draft")]
    assert analyse(quiet, 0.0, 8).cautions == []
    busy = quiet[:-1] + [make_record("p/2", "draft", load_average=(3.2, 5.2), cpus=2)]
    for s in both(busy, budget=8):
        (caution,) = s.cautions
        assert caution.kind == "load" and "reached 5.2 on 2 CPUs" in caution.message
        assert "in 1 of 6 decodes" in caution.message
    since_4 = ("load_average", "cpus", "prompt_token_ids", "feature_bytes", "ignore_eos", "lookup", "copied")
    old = [DecodeRecord.from_json({k: v for k, v in r.to_json().items() if k not in since_4} | {"schema": 3})
           for r in busy]
    assert analyse(old, 0.0, 8).cautions == []  # schema 3 records say nothing of the load


def test_a_caution_kind_is_one_of_those_known():
    with pytest.raises(ValueError, match="`kind` must be one of"):
        Caution("noise", "x")


def test_trees_of_the_target_s_own_draw_alone_are_plain_decoding_s_work(make_record):
    """A root-pass rule's tree of one node holds the draw X1 its root pass made (it runs no tree pass otherwise):
    nothing beyond the root is verified, one token a target pass, as `ar`; draft's tree of one node is a candidate
    of the drafter's, speculation."""
    records = [plain(make_record, f"p/{i}", "ar") for i in range(3)]
    records += [make_record(f"p/{i}", d, budget="auto", tree_sizes=(1, 1, 1), accepted=(1, 1, 1), budgets=(1, 1, 1))
                for i in range(3) for d in ("pearl", "root", "draft")]
    for s in both(records):
        (caution,) = s.cautions
        assert caution.kind == "same work" and set(caution.pairs) == {("pearl", "ar"), ("root", "ar")}
        assert s.decoders["pearl"].bare == s.decoders["root"].bare == 9 and s.decoders["draft"].bare == 0
    held = [make_record(f"p/{i}", "cover", budget="auto", tree_sizes=(1, 1), accepted=(1, 0), budgets=(1, 1),
                        held_rows=(1, 0)) for i in range(3)]
    assert analyse(held, 0.0, "auto").decoders["cover"].bare == 3  # its held rounds' trees held the draw alone
