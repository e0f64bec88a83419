"""Rows kept while recording (the paper's Appendix C): on mocks, whose row at every address is known, every
figure the recording stores of a retained row or of the root row equals the figure computed here from whole
rows, and the rows the token-keyed cache, same-token and preceding definitions pick are the ones recorded."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from evaluation.rounds import ROW_KINDS
from models.mock import EOS
from pipeline.budget import PassCosts
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.pool import ROOT
from pipeline.rules import RULES
from pipeline.select import draft_order, select_root
from pipeline.settings import DecodeConfig
from target_proc.recorder import SCORED, RoundRecorder
from target_proc.retained import TOKEN_ONLY, Retained

VOCAB = 12  # small: tokens repeat, so the cache, same-token and token-only rows are often there
POOL = PoolConfig(topk=4, depth=3, expand=2)
COSTS = PassCosts(0.04, 0.045, {1: 0.042, 2: 0.043, 4: 0.045, 8: 0.06, 16: 0.09})


@dataclass(frozen=True)
class Draw:
    token: int  # the selections that take a draw read only its token


def record(pair, prompt, config):
    recorder = RoundRecorder(pair.target, config, prompt)
    generator = torch.Generator().manual_seed(5)
    result = decode(pair.target, pair.drafter, prompt, config, frozenset({EOS}), generator,
                    costs=copy.deepcopy(COSTS), observe=recorder)
    return result, recorder.rounds


class Exact:
    """The mock target's soft rows at any address, and the paper's retained rows picked from them."""

    def __init__(self, model, temperature: float) -> None:
        self.model, self.temperature = model, temperature

    def row(self, address) -> torch.Tensor:
        logits = torch.from_numpy(self.model.logits(self.model.digest(address)))
        return torch.softmax(logits.double() / (self.temperature or 1.0), -1)

    @staticmethod
    def tree(decoder, rnd):
        """The tree the round verified (None: `root`'s draw was off it), rebuilt from the pool and its draw."""
        rule, pool, x1 = RULES[decoder], rnd.pool, int(rnd.emitted[0])
        if decoder == "root":  # ranked with the root row's law at the first level: the first-level edges
            tree = select_root(pool, rnd.budget, np.where(pool.parent < 0, rnd.edge, 0.0))
            return tree if tree.child(ROOT, x1) >= 0 else None
        return rule.select(pool, rnd.budget, Draw(x1) if rule.root_pass else None)


def expected_rows(exact: Exact, decoder: str, prompt: list[int], rounds) -> list[list[tuple]]:
    """Per round, the retained rows the paper's definitions give: (kind, row, on path, age)."""
    cache = {}
    for i, t in enumerate(prompt[:-1]):
        cache[t] = (exact.row(prompt[: i + 1]), 0)
    context, out, pending = list(prompt), [], []
    for n, rnd in enumerate(rounds, 1):
        out.append(pending)
        root, c = context[-1], int(rnd.emitted[-1])
        tree = exact.tree(decoder, rnd)
        accepted = []  # tree indices of the accepted path
        if tree is not None:
            at = ROOT
            for token in rnd.emitted[:-1].tolist():
                at = tree.child(at, token)
                accepted.append(at)
        address = lambda i: context + tree.token[tree.path(i)].tolist()  # noqa: E731
        rank = [] if tree is None else sorted(range(len(tree)), key=lambda i: (-float(rnd.pool.cum[tree.node[i]]),
                                                                              int(tree.depth[i]), int(tree.node[i])))
        for i in reversed(rank):
            cache[int(tree.token[i])] = (exact.row(address(i)), n)
        cache[root] = (exact.row(context), n)
        pool = rnd.pool
        scored = np.zeros(len(pool), bool)
        scored[draft_order(pool)[:SCORED]] = True
        scored |= pool.expanded
        if tree is not None:
            scored[tree.node[tree.node >= 0]] = True
        path = [int(tree.node[i]) for i in accepted]
        end = path[-1] if path else ROOT
        matched = [v for v in np.flatnonzero((pool.parent == end) & (pool.token == c) & scored).tolist()]
        pool_address = lambda v: context + pool.token[_pool_path(pool, v)].tolist()  # noqa: E731
        pending = [("matched", exact.row(pool_address(matched[0])), False, -1)] if matched else []
        others = [v for v in np.flatnonzero((pool.token == c) & scored).tolist() if v not in matched][:TOKEN_ONLY]
        pending += [("token-only", exact.row(pool_address(v)), v in path, -1) for v in others]
        if root == c:
            pending.append(("token-only", exact.row(context), True, -1))
        if c in cache:
            pending.append(("cache", cache[c][0], False, n + 1 - cache[c][1]))
        if root == c:
            pending.append(("same-token", exact.row(context), False, -1))
        else:
            hits = [i for i in rank if int(tree.token[i]) == c]
            if hits:
                pending.append(("same-token", exact.row(address(hits[0])), False, -1))
        preceding = exact.row(address(accepted[-1]) if accepted else context).clone()
        preceding[c] = 0
        pending.append(("preceding", preceding / preceding.sum(), False, -1))
        context = context + rnd.emitted.tolist()
    return out


def _pool_path(pool, v: int) -> list[int]:
    out = []
    while v >= 0:
        out.append(v)
        v = int(pool.parent[v])
    return out[::-1]


@pytest.mark.parametrize("decoder", ["draft", "root-draw", "root", "pearl"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_reduced_figure_equals_the_one_from_whole_rows(mock_pair, decoder, temperature):
    pair = mock_pair(VOCAB, 3, 0.8, POOL)
    exact = Exact(pair.target_model, temperature)
    prompt = [3, 7, 3, 9, 5, 7]
    config = DecodeConfig(decoder, temperature, 6, 30)
    result, rounds = record(pair, prompt, config)
    assert len(rounds) == len(result.rounds) >= 5  # a fixed budget: every round recorded
    expected = expected_rows(exact, decoder, prompt, rounds)
    context, kinds_seen = list(prompt), set()
    for rnd, want in zip(rounds, expected):
        root_row = exact.row(context)
        first = rnd.pool.token[rnd.first]
        assert rnd.root == context[-1] and rnd.position == len(context) - len(prompt)
        assert rnd.root_argmax == int(root_row.argmax())
        assert rnd.root_entropy == pytest.approx(float(-(root_row * root_row.log()).sum()), abs=1e-4)
        np.testing.assert_allclose(rnd.first_soft, root_row[first].numpy(), atol=1e-6)
        assert rnd.own_tv == pytest.approx(0.0, abs=1e-6) and rnd.own_agree == 1  # a mock's rows are exact
        got = rnd.rows
        assert [ROW_KINDS[k] for k in got.kind] == [w[0] for w in want]
        for j, (kind, row, on_path, age) in enumerate(want):
            kinds_seen.add(kind)
            assert got.tv[j] == pytest.approx(0.5 * float((row - root_row).abs().sum()), abs=1e-5), kind
            assert got.agree[j] == (int(row.argmax()) == int(root_row.argmax())), kind
            assert got.on_path[j] == on_path and got.age[j] == age, kind
            np.testing.assert_allclose(got.logp[j], torch.log(row[first]).numpy(), atol=1e-4, rtol=1e-5)
        context += rnd.emitted.tolist()
    assert {"cache", "preceding"} <= kinds_seen


def test_a_matched_row_is_the_next_root_row_itself(mock_pair):
    """The emitted address is where the next root row is computed: on a mock both rows are the same row."""
    pair = mock_pair(VOCAB, 3, 0.8, POOL)
    _, rounds = record(pair, [3, 7, 3, 9, 5, 7], DecodeConfig("draft", 1.0, 6, 30))
    matched = [rnd.rows.tv[rnd.rows.of("matched")] for rnd in rounds]
    assert sum(len(m) for m in matched) >= 2
    assert all(np.all(m < 1e-6) for m in matched)


def test_recording_rows_changes_neither_outputs_nor_rounds(mock_pair):
    pair = mock_pair(VOCAB, 3, 0.8, POOL)
    for decoder in ("draft", "root-draw"):
        config = DecodeConfig(decoder, 1.0, 6, 30)
        generator = torch.Generator().manual_seed(5)
        plain = decode(pair.target, pair.drafter, [3, 7, 3, 9], config, frozenset({EOS}), generator,
                       costs=copy.deepcopy(COSTS))
        recorded, _ = record(pair, [3, 7, 3, 9], config)
        assert recorded.tokens == plain.tokens
        assert [(r.accepted, r.tree_size) for r in recorded.rounds] == [(r.accepted, r.tree_size) for r in plain.rounds]


# -- the definitions by hand, on rows written out ---------------------------------------------------------


def _logits(*probs) -> torch.Tensor:
    return torch.log(torch.tensor(probs, dtype=torch.float64)).float()


def test_the_cache_keeps_the_highest_ranked_prefix_of_a_token_and_then_the_root():
    keeper = Retained(1.0, DecodeConfig().filters)
    a, b, r = _logits(.7, .1, .1, .1), _logits(.1, .7, .1, .1), _logits(.1, .1, .1, .7)
    keeper.context([2, 2], torch.stack([_logits(.4, .3, .2, .1), _logits(.1, .2, .3, .4)]))
    assert torch.allclose(keeper.cache[2][0], _logits(.1, .2, .3, .4))  # the latest occurrence
    # a tree of three nodes, tokens 1, 1, 2; ranked 2nd, 1st, 3rd; the root's token is 2
    keeper.keep(root=2, c=1, own_root=r, tree_tokens=np.array([1, 1, 2]), tree_rows=torch.stack([a, b, a]),
                tree_rank=np.array([1, 0, 2]), last_accepted=-1, scored=[], matched=None)
    assert torch.allclose(keeper.cache[1][0], b) and keeper.cache[1][1] == 1  # node 1 outranks node 0
    assert torch.allclose(keeper.cache[2][0], r)  # the root is stored after the tree
    kinds = [ROW_KINDS[k] for k, *_ in keeper.pending]
    assert kinds == ["cache", "same-token", "preceding"]
    same = keeper.pending[1][1]
    assert torch.allclose(same, torch.softmax(b, -1), atol=1e-6)  # the highest-ranked prefix ending in c = 1
    preceding = keeper.pending[2][1]  # nothing accepted: the root's row, its probability of c zeroed
    assert float(preceding[1]) == 0.0 and torch.allclose(preceding, torch.tensor([.1, 0, .1, .7]) / .9, atol=1e-6)


def test_the_same_token_row_is_the_roots_when_the_root_is_the_continuation():
    keeper = Retained(0.0, DecodeConfig().filters)
    a, r = _logits(.7, .1, .1, .1), _logits(.1, .1, .1, .7)
    keeper.keep(root=3, c=3, own_root=r, tree_tokens=np.array([3]), tree_rows=a[None], tree_rank=np.array([0]),
                last_accepted=0, scored=[(a, True)], matched=None)
    kinds = [(ROW_KINDS[k], on_path) for k, _, on_path, _ in keeper.pending]
    # the scored row, then the root's row joining the token-only rows, then cache (the root's), same-token, preceding
    assert kinds == [("token-only", True), ("token-only", True), ("cache", False), ("same-token", False),
                     ("preceding", False)]
    assert torch.allclose(keeper.pending[3][1], torch.softmax(r, -1), atol=1e-6)
    assert torch.allclose(keeper.pending[4][1], torch.tensor([.7, .1, .1, 0]) / .9, atol=1e-6)  # node 0's row
    assert keeper.prefix_root == 1
