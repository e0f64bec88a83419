"""The address example of Appendix A.6: every scored row is exact at its own address, yet a verifier that
accepts siblings as one sequence emits `abb` where autoregressive decoding emits `aba`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.decode import decode
from pipeline.pool import ROOT, Pool
from pipeline.rules import DECODERS
from pipeline.select import select_draft
from pipeline.settings import DecodeConfig
from pipeline.tree import Tree
import pipeline.verify
from pipeline.verify import traverse

EOS, A, B, C = 0, 1, 2, 3
VOCAB = 4
# Deterministic target: c -> a, ca -> b, cab -> a, cb -> b; every other address ends the output.
NEXT = {(C,): A, (C, A): B, (C, A, B): A, (C, B): B}


def address_pool() -> Pool:
    # First level a, b (a ranked first); a has children b, a and b has children a, b, so a budget of two
    # gives the paper's tree {a, b} and larger budgets add the children.
    return Pool.from_edges(
        token=[A, B, B, A, A, B],
        parent=[ROOT, ROOT, 0, 0, 1, 1],
        logp=np.log([0.6, 0.4, 0.5, 0.3, 0.5, 0.3]),
        expanded=[True, True, False, False, False, False],
        vocab_size=VOCAB,
    )


def siblings_as_sequence(tree: Tree, first: int, draws: np.ndarray, stopping=None) -> tuple[list[int], int]:
    """A wrong verifier: when a draw labels no child, it accepts a sibling with that label as the next
    token and keeps going from that sibling's row, which was scored at another address."""
    accepted: list[int] = []
    at, token = ROOT, first
    while True:
        nxt = tree.child(at, token)
        if nxt == ROOT and at != ROOT:
            sibling = tree.child(int(tree.parent[at]), token)
            nxt = sibling if sibling != at else ROOT
        if nxt == ROOT:
            return accepted, token
        accepted.append(nxt)
        at, token = nxt, int(draws[nxt])


def run(decoder: str, temperature: float, budget: int, drafter, target):
    config = DecodeConfig(decoder, temperature, budget, max_new_tokens=16, seed=0)
    generator = torch.Generator().manual_seed(7)
    return decode(target, drafter, [C], config, frozenset({EOS}), generator)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [1, 2, 3, 6, 8])
@pytest.mark.parametrize("decoder", DECODERS)
def test_every_decoder_emits_aba(decoder, budget, temperature, fixed_pool_drafter, prefix_target):
    drafter = fixed_pool_drafter(address_pool())
    result = run(decoder, temperature, budget, drafter, prefix_target(NEXT, VOCAB))
    assert result.tokens == [A, B, A, EOS]
    if decoder != "ar":
        assert drafter.started == drafter.ended == 1
        # The drafter holds the prompt and exactly the tokens of every round but the last, in order.
        told = sum(r.emitted for r in result.rounds[:-1])
        assert drafter.context == [C] + result.tokens[:told]
        assert len(result.rounds) == 1 or told > 0


def test_paper_tree_is_selected_at_budget_two():
    tree = select_draft(address_pool(), 2)
    assert tree.token.tolist() == [A, B] and tree.parent.tolist() == [ROOT, ROOT]


def test_sibling_sequence_verifier_emits_abb(monkeypatch, fixed_pool_drafter, prefix_target):
    # The same harness with the wrong verifier fails: the check above can detect an address error. The
    # target is told not to check commits, since the wrong verifier's accepted nodes are no root path.
    lenient = prefix_target(NEXT, VOCAB, strict=False)
    assert run("draft", 0.0, 2, fixed_pool_drafter(address_pool()), lenient).tokens == [A, B, A, EOS]
    monkeypatch.setattr(pipeline.verify, "traverse", siblings_as_sequence)
    lenient = prefix_target(NEXT, VOCAB, strict=False)
    assert run("draft", 0.0, 2, fixed_pool_drafter(address_pool()), lenient).tokens == [A, B, B, EOS]


def test_sibling_sequence_verifier_differs_from_traverse_on_paper_tree():
    tree = Tree(np.array([A, B]), np.array([ROOT, ROOT]), np.array([0, 1]))
    draws = np.array([B, B])  # rows at ca and cb
    assert traverse(tree, A, draws) == ([0], B)
    assert siblings_as_sequence(tree, A, draws) == ([0, 1], B)
