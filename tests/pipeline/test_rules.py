"""The table of rules: what each row declares is what the round loop does with it, and the report's
comparisons follow from it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.config import ConfigError, PoolConfig
from pipeline.decode import decode
from pipeline.pool import ROOT, Pool
from pipeline.rules import DECODERS, RULES, SPECULATIVE, Flow, RootDraw, Rule, comparisons
from pipeline.settings import DecodeConfig


def test_decoders_are_the_designed_set_in_table_order():
    assert DECODERS == ("ar", "draft", "pearl", "pearl-top1", "root-draw", "root", "cover")
    assert SPECULATIVE == DECODERS[1:]
    assert [n for n, r in RULES.items() if r.root_pass] == ["pearl", "pearl-top1", "root-draw", "root"]
    assert [n for n, r in RULES.items() if r.covers] == ["cover"]
    assert {n: r.flow for n, r in RULES.items()} == {
        "ar": Flow.PLAIN, "draft": Flow.TREE, "pearl": Flow.PIPELINED, "pearl-top1": Flow.PIPELINED,
        "root-draw": Flow.PIPELINED, "root": Flow.PIPELINED, "cover": Flow.COVERING}


def test_the_plain_flow_alone_selects_no_tree():
    with pytest.raises(ValueError, match=r"rule 'x': the plain flow, and it alone, selects no tree"):
        Rule("x", Flow.TREE, None, (), "no selection")
    with pytest.raises(ValueError, match=r"rule 'x': the plain flow, and it alone, selects no tree"):
        Rule("x", Flow.PLAIN, RULES["draft"].select, (), "a selection")


def test_comparisons_pair_each_rule_with_its_baselines_then_everything_with_ar():
    assert comparisons(["draft", "pearl", "root-draw", "root"]) == [
        ("pearl", "draft"), ("root-draw", "draft"), ("root-draw", "pearl"), ("root", "draft")]
    assert comparisons(["pearl", "root-draw"]) == [("root-draw", "pearl")]
    assert comparisons(["draft"]) == []
    assert comparisons(["ar", "draft", "root"]) == [("root", "draft"), ("draft", "ar"), ("root", "ar")]


def test_every_rule_selects_an_ancestor_closed_tree_within_budget(mock_pool):
    from models.mock import MockModel

    grown = mock_pool(MockModel(32, 3), MockModel(32, 3, 1.0), [5, 6], PoolConfig(topk=4, depth=4, expand=2))
    pool: Pool = grown.pool
    row = torch.log(torch.from_numpy(grown.root_probs).float())
    for name in SPECULATIVE:
        rule = RULES[name]
        for budget in (1, 3, 8, 100):
            for x1 in (int(pool.token[0]), 31):  # a first-level token of the pool, and maybe one it lacks
                first = RootDraw(x1, row, 1.0) if rule.root_pass else None
                tree = rule.select(pool, budget, first)
                assert 1 <= len(tree) <= budget
                assert np.all(tree.parent < np.arange(len(tree)))
                if rule.root_pass and name != "root":
                    assert tree.child(ROOT, x1) >= 0  # the drawn token is always verified


def test_a_new_rule_is_one_row(monkeypatch, mock_pair):
    """A rule added to the table decodes through the loop with no other change: here `draft` at half the
    budget, under another name, equals `draft` at that budget token for token."""
    from pipeline.select import select_draft

    half = Rule("half-draft", Flow.TREE, lambda pool, budget, _: select_draft(pool, max(1, budget // 2)), ("draft",),
                "draft selection at half the budget")
    monkeypatch.setitem(RULES, half.name, half)
    pair = mock_pair(32, 2, 1.0, PoolConfig(topk=3, depth=3, expand=2))
    got = decode(pair.target, pair.drafter, [4, 5], DecodeConfig("half-draft", 0.0, 8, 20), frozenset(), None)
    want = decode(pair.target, pair.drafter, [4, 5], DecodeConfig("draft", 0.0, 4, 20), frozenset(), None)
    assert got.tokens == want.tokens
    assert [r.tree_size for r in got.rounds] == [r.tree_size for r in want.rounds]


def test_decode_config_takes_the_names_of_the_table_and_no_other(monkeypatch):
    with pytest.raises(ConfigError, match="`decoder` must be one of"):
        DecodeConfig("half-draft")
    monkeypatch.setitem(RULES, "half-draft", Rule("half-draft", Flow.TREE, RULES["draft"].select, (), "a test row"))
    assert DecodeConfig("half-draft").decoder == "half-draft"  # a row added to the table is a decoder at once


@pytest.mark.parametrize("decoder", SPECULATIVE)
def test_a_rule_that_says_its_tree_holds_the_draw_accepts_depth_one_in_every_tree_round(decoder, mock_session):
    session = mock_session()
    accepted = []
    for temperature in (0.0, 1.0):
        for prompt in ([3, 5, 7], [11, 2], [40, 41, 42, 43]):
            result = session.decode(prompt, DecodeConfig(decoder, temperature, 4, 40), f"{prompt}")
            accepted += [r.accepted for r in result.rounds if r.budget > 0]  # tree rounds, as reports count them
    assert accepted
    if RULES[decoder].draw_in_tree:
        assert min(accepted) >= 1
    else:
        assert min(accepted) == 0  # a draft that misses: the mock drafter's noise makes one
