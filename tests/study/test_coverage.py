"""Coverage on recorded rounds (DESIGN.md section 12): the exact figures agree with the real verifier's walk under
each stopping rule, the paper's binary example comes out in exact fractions through a rounds file, and the
theorems' properties hold on random pools."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from study.binary_example import binary_figures, binary_round
from study.binary_example import main as binary_example_main
from study.coverage import MEMBERS, coverage_tables, round_coverage, scored_names
from evaluation.rounds_file import RoundStore, load_rounds, rounds_path
from study.values import VALUED
from models.mock import MockModel
from pipeline.config import PoolConfig
from pipeline.pool import ROOT, Pool, grow_pool
from pipeline.rules import RULES, RootDraw
from pipeline.select import draft_order
from pipeline.tree import Tree
from pipeline.value import Scored
from pipeline.verify import STOPPINGS, draw, target_probs, traverse
from tests.study.random_pools import random_scored

VOCAB = 24
NOISE = 1.2
STOPS = list(STOPPINGS)
DRAWN = {"root-draw", "pearl", "pearl-top1"}  # the rules whose tree hangs beneath the draw X1


def test_the_binary_example_has_the_papers_figures(tmp_path):
    """The paper's example after Theorem 2, through a rounds file and the values program's reading:
    (coverage, expected acceptance, shortfall) exactly, scoring the tree or the pool (the same trie)."""
    key = dict(prompt_id="p", category="qa", turn=0, decoder="draft", temperature=1.0, budget=7, seed=0)
    with RoundStore(rounds_path(tmp_path, 1, 1), {"test": "binary"}) as store:
        store.append(key, [binary_round()])
    decodes = [d for found in load_rounds([tmp_path]) for d in found.decodes]
    (table,) = coverage_tables(decodes, budgets=(7,))
    want = {"exhaustive": (0, 2, 0), "cap-1": (Fraction(3, 4), 1, 1),
            "sampled-leaf": (Fraction(3, 4), Fraction(5, 4), Fraction(3, 4)),
            "cap-2": (Fraction(1, 4), Fraction(7, 4), Fraction(1, 4))}
    for stopping, figures in want.items():
        for scored in ("tree", "pool"):  # the pool is the tree: nothing more to score
            assert table.at("draft", scored, stopping, 7) == figures, (stopping, scored)
    assert binary_figures() == want


def test_the_committed_binary_example_is_the_programs_output(capsys):
    assert binary_example_main() == 0
    committed = Path(__file__).resolve().parents[2] / "results" / "theorem1-binary.txt"
    assert committed.read_text(encoding="utf-8") == capsys.readouterr().out


def test_every_valued_rule_has_its_trees():
    assert list(MEMBERS) == list(VALUED)


@pytest.fixture(scope="module")
def random_rounds():
    """(scored round, budgets, top count, frontier count, its figures at every budget), greedy or not."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(150):
        s = random_scored(rng, int(rng.integers(1, 30)), greedy=bool(rng.integers(2)))
        budgets, top, frontier = np.arange(1, len(s.pool) + 3), int(rng.integers(0, 12)), int(rng.integers(0, 8))
        out.append((s, budgets, top, frontier, round_coverage(s, budgets, top=top, frontier=frontier)))
    return out


def test_exhaustive_value_of_the_tree_is_each_rules_value(random_rounds):
    """Each rule's trees (MEMBERS) are the trees pipeline.value values: exhaustive traversal of them gives the
    rule's value at every budget, whatever is scored."""
    for s, budgets, _, _, figures in random_rounds:
        for i, name in enumerate(MEMBERS):
            want = VALUED[name](s).at(budgets)
            for j in range(len(scored_names())):
                np.testing.assert_allclose(figures.value[i, j, STOPS.index("exhaustive")], want, atol=1e-12)


def test_exhaustive_traversal_scoring_the_tree_never_covers(random_rounds):
    """Theorem 1 with Q = T: the continuation leaves the tree, so the pass never scored it."""
    for *_, figures in random_rounds:
        assert np.all(figures.coverage[:, 0, STOPS.index("exhaustive")] == 0.0)
        assert np.all(figures.shortfall[:, 0, STOPS.index("exhaustive")] == 0.0)


def test_every_stopping_rules_shortfall_is_at_least_its_coverage(random_rounds):
    """Theorem 1: a path-aligned verifier with one continuation falls short of exhaustive traversal of its
    scored trie by at least the probability of coverage, with equality for exhaustive traversal when the
    scored set adds only frontier candidates."""
    for *_, f in random_rounds:
        assert np.all(f.shortfall >= f.coverage - 1e-12)
        assert np.all((f.coverage >= -1e-12) & (f.coverage <= 1 + 1e-12))
        for j in (0, 2, 3):  # tree, frontier-N, frontier
            exhaustive = STOPS.index("exhaustive")
            np.testing.assert_allclose(f.shortfall[:, j, exhaustive], f.coverage[:, j, exhaustive], atol=1e-12)


def test_the_whole_frontier_covers_exactly_as_much_as_the_whole_pool(random_rounds):
    for *_, f in random_rounds:
        assert np.array_equal(f.coverage[:, 3], f.coverage[:, 4])


def test_sampled_leaf_accepts_one_token_fewer_on_covered_rounds(random_rounds):
    """Scoring only the tree, sampled-leaf stopping is covered exactly when it reaches a leaf (or draws X1
    off the pool), where exhaustive traversal accepts one token more."""
    leaf, exhaustive = STOPS.index("sampled-leaf"), STOPS.index("exhaustive")
    for *_, f in random_rounds:
        np.testing.assert_allclose(f.value[:, 0, leaf], f.value[:, 0, exhaustive] - f.coverage[:, 0, leaf], atol=1e-12)


def test_scored_sets_add_what_they_say(random_rounds):
    """Candidates added beyond the tree: none for the tree, at most M of the top set, at most N frontier
    candidates, the whole frontier at least as many, the pool all the others (for a fixed tree, N - B)."""
    for s, budgets, top, frontier, f in random_rounds:
        assert np.all(f.added[:, 0] == 0) and np.all(f.added[:, 1] <= top + 1e-9)
        assert np.all(f.added[:, 2] <= np.minimum(frontier, f.added[:, 3]) + 1e-9)
        assert np.all(f.added[:, 3] <= f.added[:, 4] + 1e-9)
        draft = list(MEMBERS).index("draft")
        np.testing.assert_allclose(f.added[draft, 4], len(s.pool) - np.minimum(budgets, len(s.pool)))


def test_bad_scored_counts_are_refused_in_one_line():
    s = random_scored(np.random.default_rng(0), 5, greedy=False)
    with pytest.raises(ValueError, match="`top`"):
        round_coverage(s, [2], top=-1)
    with pytest.raises(ValueError, match="`frontier`"):
        round_coverage(s, [2], frontier=-3)


# -- the real verifier's walk ------------------------------------------------------------------------------


class Verified:
    """A pool grown by a mock drafter at a random context, with the mock target's logits at the root and at
    every candidate, so that any tree and any scored trie of the pool can be walked by the real verifier."""

    def __init__(self, seed: int, config: PoolConfig) -> None:
        target, drafter = MockModel(VOCAB, seed), MockModel(VOCAB, seed, NOISE)
        root = drafter.digest(np.random.default_rng(seed).integers(1, VOCAB, 4).tolist())
        digest: dict[int, bytes] = {}

        def address(node: int, token: int) -> bytes:
            return MockModel.extend(root if node == ROOT else digest[node], token)

        def expand(nodes, tokens, parents, depth):
            for node, token, parent in zip(nodes.tolist(), tokens.tolist(), parents.tolist()):
                digest[node] = address(parent, token)
            return torch.log_softmax(torch.from_numpy(np.stack([drafter.logits(digest[n]) for n in nodes])), -1)

        self.pool = grow_pool(torch.log_softmax(torch.from_numpy(drafter.logits(root)), -1), expand, config)
        for i in range(len(self.pool)):  # every candidate's address, leaves too
            digest[i] = address(int(self.pool.parent[i]), int(self.pool.token[i]))
        self.root_logits = torch.from_numpy(target.logits(root))
        self.logits = torch.cat([self.root_logits[None],
                                 torch.from_numpy(np.stack([target.logits(digest[i]) for i in range(len(self.pool))]))])
        self.paths = [self._path(i) for i in range(len(self.pool))]

    def _path(self, i: int) -> tuple[int, ...]:
        out = []
        while i != ROOT:
            out.append(int(self.pool.token[i]))
            i = int(self.pool.parent[i])
        return tuple(reversed(out))

    def scored(self, temperature: float) -> Scored:
        """The round as a recording keeps it: every pool edge's target probability at `temperature`."""
        rows = target_probs(self.logits, temperature).double().numpy()
        return Scored(self.pool, rows[np.where(self.pool.parent >= 0, self.pool.parent + 1, 0), self.pool.token])

    def scored_sets(self, tree: Tree, drawn: bool, top: int, frontier: int) -> dict[str, set[tuple[int, ...]]]:
        """Each scored set as the addresses it holds, from its definition: the tree's, and the pool candidates
        it adds (frontier: outside the tree, the parent in it, or the root for a fixed tree: a draw rule's pass
        comes after the draw, so its frontier lies beneath X1)."""
        inside = {tuple(int(t) for t in tree.token[tree.path(i)]) for i in range(len(tree))}
        order = draft_order(self.pool).tolist()
        front = [self.paths[i] for i in order if self.paths[i] not in inside
                 and (self.paths[i][:-1] in inside or (len(self.paths[i]) == 1 and not drawn))]
        return dict(zip(scored_names(top, frontier), (inside, inside | {self.paths[i] for i in order[:top]},
                                                      inside | set(front[:frontier]), inside | set(front),
                                                      inside | set(self.paths))))

    def walk(self, combos, temperature: float, runs: int, seed: int, top: int, frontier: int) -> dict:
        """Per (rule, budget) of `combos`: covered (P, S, runs), accepted (P, runs) of the real verifier under each
        stopping rule, and (S, runs) the tokens exhaustive traversal of each scored trie accepts on the same
        draws. Each run draws once at every row (the verifier's law: draws at different rows are independent)."""
        generator = torch.Generator().manual_seed(seed)
        names, cache = scored_names(top, frontier), {}
        out = {c: (np.zeros((len(STOPS), len(names), runs), bool), np.zeros((len(STOPS), runs)),
                   np.zeros((len(names), runs))) for c in combos}
        for r in range(runs):
            drawn = draw(self.logits, temperature, generator).numpy()
            x1 = int(drawn[0])
            for rule, budget in combos:
                if (rule, budget, x1) not in cache:
                    tree = RULES[rule].select(self.pool, budget, RootDraw(x1, self.root_logits, temperature))
                    sets = self.scored_sets(tree, rule in DRAWN, top, frontier)
                    cache[rule, budget, x1] = tree, sets, [trie(sets[name], self.paths) for name in names]
                tree, sets, tries = cache[rule, budget, x1]
                covered, accepted, longest = out[rule, budget]
                for p, stop in enumerate(STOPS):
                    path, continuation = traverse(tree, x1, reads(tree, drawn), STOPPINGS[stop])
                    address = tuple(int(t) for t in tree.token[path]) + (continuation,)
                    accepted[p, r] = len(path)
                    covered[p, :, r] = [address in sets[name] for name in names]
                for j, q in enumerate(tries):
                    longest[j, r] = len(traverse(q, x1, reads(q, drawn))[0])
        return out


def reads(tree: Tree, drawn: np.ndarray) -> np.ndarray:
    """(n,) the draw at each tree node's row; -1 (no token) at a drawn X1 the pool lacks, whose children no
    trie holds."""
    return np.where(tree.node >= 0, drawn[1 + np.maximum(tree.node, 0)], -1)


def trie(addresses: set[tuple[int, ...]], paths: list[tuple[int, ...]]) -> Tree:
    """The Tree of an ancestor-closed set of addresses, each node's pool index where the pool holds it."""
    ordered = sorted(addresses, key=len)  # parents first
    index = {a: i for i, a in enumerate(ordered)}
    node = {p: i for i, p in enumerate(paths)}
    return Tree(np.array([a[-1] for a in ordered], np.int64), np.array([index.get(a[:-1], ROOT) for a in ordered]),
                np.array([node.get(a, ROOT) for a in ordered], np.int64))


SMALL = PoolConfig(topk=4, depth=3, expand=2)
COMBOS = [(rule, budget) for rule in ("draft", "root", "root-draw", "pearl-top1") for budget in (1, 3, 8)]
TOP, FRONTIER = 6, 3  # small enough that the top and frontier sets leave candidates out


@pytest.fixture(scope="module")
def verified():
    return [Verified(seed, SMALL) for seed in (3, 11)] + [Verified(5, PoolConfig(topk=5, depth=4, expand=2))]


def expected(rnd: Verified, rule: str, budget: int, temperature: float):
    f = round_coverage(rnd.scored(temperature), [budget], rules=[rule], top=TOP, frontier=FRONTIER)
    return f.coverage[0, :, :, 0].T, f.value[0, 0, :, 0], f.shortfall[0, :, :, 0].T  # (P, S), (P,), (P, S)


def test_stopping_rules_equal_the_verifiers_walk_at_greedy(verified):
    """At T = 0 every draw is the argmax: one walk is the law, and coverage, acceptance and shortfall are its
    own, exactly, for a fixed tree and for the draw rules."""
    for rnd in verified:
        for (rule, budget), (covered, accepted, longest) in rnd.walk(COMBOS, 0.0, 1, 0, TOP, FRONTIER).items():
            coverage, value, shortfall = expected(rnd, rule, budget, 0.0)
            assert np.array_equal(coverage, covered[:, :, 0].astype(float)), (rule, budget)
            np.testing.assert_allclose(value, accepted[:, 0], atol=1e-12)
            np.testing.assert_allclose(shortfall, longest[None, :, 0] - accepted[:, None, 0], atol=1e-12)


FEW = [("draft", 3), ("draft", 8), ("root", 3), ("root-draw", 1), ("root-draw", 8), ("pearl-top1", 3)]


@pytest.mark.parametrize("rounds, combos, runs", [
    pytest.param(1, FEW, 2000, id="one-round"),
    pytest.param(3, COMBOS, 4000, id="every-round", marks=pytest.mark.slow)])
def test_stopping_rules_equal_a_monte_carlo_of_the_verifiers_walk_at_t1(verified, rounds, combos, runs):
    """At T = 1, means over independent walks: each within five standard errors of the exact figure (a
    coverage's from p(1 - p) / n with the exact p, so an exact 0 or 1 must come out exactly; a false alarm
    about once in three million per figure, a few hundred figures). On the common draws, every walk falls short
    of exhaustive traversal of the scored trie by at least its coverage (Theorem 1, run by run)."""
    for k, rnd in enumerate(verified[:rounds]):
        for (rule, budget), (covered, accepted, longest) in rnd.walk(combos, 1.0, runs, k, TOP, FRONTIER).items():
            coverage, value, shortfall = expected(rnd, rule, budget, 1.0)
            tolerance = 5 * np.sqrt(coverage * (1 - coverage) / runs) + 1e-9
            assert np.all(np.abs(covered.mean(2) - coverage) <= tolerance), (rule, budget)
            for p in range(len(STOPS)):
                se = max(accepted[p].std(ddof=1), 1e-6) / np.sqrt(runs)
                assert abs(accepted[p].mean() - value[p]) < 5 * se, (rule, budget, STOPS[p])
                short = longest - accepted[p]
                assert np.all(short >= covered[p]), (rule, budget, STOPS[p])
                se = np.maximum(short.std(1, ddof=1), 1e-6) / np.sqrt(runs)
                assert np.all(np.abs(short.mean(1) - shortfall[p]) < 5 * se), (rule, budget, STOPS[p])
