"""Every rule's value at shared contexts (DESIGN.md section 8): the prefix-sum values of pipeline.value agree
with the real verifier run on each rule's tree, the rule properties of the paper hold, and the oracles are
the best trees a brute force finds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from models.mock import MockModel
from pipeline.config import PoolConfig
from pipeline.pool import ROOT, Pool, grow_pool
from pipeline.rules import RULES, RootDraw
from pipeline.select import select_draft
from pipeline.value import CEILINGS, Scored, path_mass, value_oracle, value_oracle_draw
from tests.pipeline.reference import tree_value
from pipeline.verify import draw, target_probs, traverse

VOCAB = 24
NOISE = 1.2
RULED = [name for name, rule in RULES.items() if rule.value is not None]


class Round:
    """A pool grown by a mock drafter at a random context, with the mock target's logits at the root and at
    every candidate, so that any tree of the pool can be verified for real."""

    def __init__(self, seed: int, config: PoolConfig) -> None:
        self.target, drafter = MockModel(VOCAB, seed), MockModel(VOCAB, seed, NOISE)
        rng = np.random.default_rng(seed)
        root = drafter.digest(rng.integers(1, VOCAB, size=int(rng.integers(1, 6))).tolist())
        self.root_digest = root
        digest: dict[int, bytes] = {}

        def expand(nodes, tokens, parents, depth):
            for node, token, parent in zip(nodes.tolist(), tokens.tolist(), parents.tolist()):
                digest[node] = drafter.extend(root if parent == ROOT else digest[parent], token)
            rows = np.stack([drafter.logits(digest[n]) for n in nodes.tolist()])
            return torch.log_softmax(torch.from_numpy(rows), -1)

        self.pool = grow_pool(torch.log_softmax(torch.from_numpy(drafter.logits(root)), -1), expand, config)
        self.digests = [self._digest_of(i) for i in range(len(self.pool))]
        self.root_logits = torch.from_numpy(self.target.logits(root))
        self.node_logits = torch.from_numpy(np.stack([self.target.logits(d) for d in self.digests]))

    def _digest_of(self, i: int) -> bytes:
        path = []
        while i != ROOT:
            path.append(int(self.pool.token[i]))
            i = int(self.pool.parent[i])
        d = self.root_digest
        for token in reversed(path):
            d = MockModel.extend(d, token)
        return d

    def scored(self, temperature: float) -> Scored:
        """The round as the recording stores it: each candidate's edge probability at `temperature`."""
        rows = target_probs(torch.cat([self.root_logits[None], self.node_logits]), temperature).double().numpy()
        parent_row = np.where(self.pool.parent >= 0, self.pool.parent + 1, 0)
        return Scored(self.pool, rows[parent_row, self.pool.token])

    def realized(self, rule: str, budget: int, temperature: float, runs: int, seed: int) -> np.ndarray:
        """(runs,) accepted tokens of the real verifier on the rule's tree, each run an independent draw of
        X1 from the root row and of every node's token (a drawn X1 counts when it is a tree node)."""
        generator = torch.Generator().manual_seed(seed)
        logits = torch.cat([self.root_logits[None], self.node_logits])  # row 0 the root's, 1 + i candidate i's
        trees = {}  # by X1: the rule's tree depends on the draw alone
        out = np.empty(runs)
        for r in range(runs):
            drawn = draw(logits, temperature, generator).numpy()  # every row's draw, independent
            x1 = int(drawn[0])
            if x1 not in trees:
                trees[x1] = RULES[rule].select(self.pool, budget, RootDraw(x1, self.root_logits, temperature))
            tree = trees[x1]
            accepted, _ = traverse(tree, x1, np.where(tree.node >= 0, drawn[1 + tree.node], -1))
            out[r] = len(accepted)
        return out


SMALL = PoolConfig(topk=4, depth=3, expand=2)


@pytest.fixture(scope="module")
def rounds():
    return [Round(seed, SMALL) for seed in (3, 11)] + [Round(5, PoolConfig(topk=6, depth=4, expand=3))]


@pytest.mark.parametrize("rule", RULED)
def test_value_equals_the_verifier_at_greedy(rounds, rule):
    """At T = 0 the verifier is deterministic: one run accepts exactly the rule's value."""
    for rnd in rounds:
        curve = RULES[rule].value(rnd.scored(0.0))
        for budget in (1, 2, 5, 9, len(rnd.pool)):
            assert rnd.realized(rule, budget, 0.0, 1, 0)[0] == pytest.approx(curve.at([budget])[0], abs=1e-9)


@pytest.mark.parametrize("rule", RULED)
def test_value_equals_mean_acceptance_of_the_verifier_at_t1(rounds, rule):
    """At T = 1 the value is the mean accepted length of the verifier over independent seeds, within five
    standard errors of the Monte Carlo mean (a false alarm about once in three million)."""
    runs = 2000
    for k, rnd in enumerate(rounds[:2]):
        curve = RULES[rule].value(rnd.scored(1.0))
        for budget in (1, 3, 8):
            got = rnd.realized(rule, budget, 1.0, runs, 100 * k + budget)
            se = max(got.std(ddof=1), 1e-3) / np.sqrt(runs)
            assert abs(got.mean() - curve.at([budget])[0]) < 5 * se, (rule, budget)


def test_draw_rule_values_count_the_drawn_token(rounds):
    """A budget of one under a draw rule is X1 alone: exactly one accepted token, whatever the pool."""
    for rnd in rounds:
        for name in ("root-draw", "pearl-top1"):
            assert RULES[name].value(rnd.scored(1.0)).at([1])[0] == pytest.approx(1.0)


def random_scored(rng: np.random.Generator, n: int, greedy: bool) -> Scored:
    """A random pool of n candidates with random (or greedy point-mass) target edge probabilities."""
    parent = np.full(n, ROOT)
    for i in range(1, n):
        parent[i] = rng.integers(-1, i)
    token = np.arange(n) % VOCAB  # siblings differ: token ids by index, n <= VOCAB
    logp = np.log(rng.uniform(0.05, 1.0, n)).astype(np.float32)
    pool = Pool.from_edges(token, parent, logp, np.ones(n, bool))
    if greedy:  # the argmax after each address: at most one child of each node (and of the root) has mass 1
        edge = np.zeros(n)
        for p in np.unique(parent):
            kids = np.flatnonzero(parent == p)
            if rng.random() < 0.8:
                edge[rng.choice(kids)] = 1.0
    else:
        edge = rng.dirichlet(np.ones(n + 1))[:n]
        for p in np.unique(parent):  # rows at each address: the children's probabilities sum below one
            kids = np.flatnonzero(parent == p)
            edge[kids] = rng.dirichlet(np.ones(len(kids) + 1))[: len(kids)]
    return Scored(pool, edge)


def test_root_never_below_draft_at_greedy():
    """Under greedy decoding `root` keeps only the target's argmax at the first level, never losing value
    against `draft` at the same budget (the paper, Section 5.1)."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        s = random_scored(rng, int(rng.integers(1, VOCAB + 1)), greedy=True)
        budgets = np.arange(1, len(s.pool) + 1)
        assert np.all(RULES["root"].value(s).at(budgets) >= RULES["draft"].value(s).at(budgets) - 1e-12)


@pytest.mark.parametrize("greedy", [True, False])
def test_oracles_bound_every_rule(greedy):
    """`oracle` is the ceiling of fixed trees (`draft`, `root`); `oracle-draw` that of trees chosen after the
    draw X1 (every draw rule): neither is ever below the rules it bounds."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        s = random_scored(rng, int(rng.integers(1, VOCAB + 1)), greedy)
        budgets = np.arange(1, len(s.pool) + 1)
        for name in RULED:
            ceiling = value_oracle_draw if RULES[name].value(s).base else value_oracle
            assert np.all(ceiling(s).at(budgets) >= RULES[name].value(s).at(budgets) - 1e-12), name


def ancestor_closed_subsets(parent: np.ndarray, size: int):
    for nodes in itertools.combinations(range(len(parent)), size):
        kept = set(nodes)
        if all(parent[v] == ROOT or parent[v] in kept for v in nodes):
            yield list(nodes)


def test_oracle_is_the_best_ancestor_closed_tree_by_brute_force():
    rng = np.random.default_rng(2)
    for _ in range(40):
        s = random_scored(rng, int(rng.integers(1, 10)), greedy=bool(rng.integers(2)))
        for budget in range(1, len(s.pool) + 1):
            best = max(s.mass[nodes].sum() for nodes in ancestor_closed_subsets(s.pool.parent, budget))
            assert value_oracle(s).at([budget])[0] == pytest.approx(best, abs=1e-12)


def test_oracle_draw_is_the_best_tree_beneath_each_draw_by_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(40):
        s = random_scored(rng, int(rng.integers(1, 10)), greedy=bool(rng.integers(2)))
        first = np.flatnonzero(s.pool.parent == ROOT)
        for budget in range(1, len(s.pool) + 1):
            best = 1.0
            for u in first:  # u with the best ancestor-closed set of budget - 1 of its descendants
                below = [v for v in range(len(s.pool)) if s.pool.top[v] == u and v != u]
                parent = np.array([s.pool.parent[v] for v in below])
                local = {v: i for i, v in enumerate(below)}
                rel = np.array([ROOT if p == u else local[p] for p in parent], np.int64)
                sizes = [nodes for nodes in ancestor_closed_subsets(rel, min(budget - 1, len(below)))]
                best += max((s.mass[np.array(below)[n]].sum() if n else 0.0) for n in sizes) if sizes else 0.0
            assert value_oracle_draw(s).at([budget])[0] == pytest.approx(best, abs=1e-12)


def test_values_at_every_budget_equal_the_values_of_each_selected_tree():
    """The prefix sums of a fixed-tree rule equal V of the tree the rule selects at that budget."""
    rng = np.random.default_rng(4)
    for _ in range(50):
        s = random_scored(rng, int(rng.integers(1, VOCAB + 1)), greedy=False)
        for budget in range(1, len(s.pool) + 1):
            tree = select_draft(s.pool, budget)
            assert RULES["draft"].value(s).at([budget])[0] == pytest.approx(tree_value(tree, s.edge[tree.node]))


def test_path_mass_multiplies_edges_down_each_path():
    rng = np.random.default_rng(5)
    s = random_scored(rng, 20, greedy=False)
    for v in range(20):
        expect, at = 1.0, v
        while at != ROOT:
            expect *= s.edge[at]
            at = int(s.pool.parent[at])
        assert path_mass(s.pool, s.edge)[v] == pytest.approx(expect)


def test_ceilings_are_named_apart_from_the_rules():
    assert not set(CEILINGS) & set(RULES)
