"""Rerankers of the first level (study.rerank): folds that never see the half they are applied to, a token
prior that never holds its own label, reproducible fits, missing row features, and the top-1 count."""

from __future__ import annotations

import numpy as np
import pytest

from study.controls import study_rounds
from study.rerank import BASE, PSEUDO_COUNT, ROW_FEATURES, candidate_features, first_level_figures, fit_predict, \
    token_prior
from evaluation.rounds import ROW_KINDS, RecordedDecode, RecordedRound, RetainedRows
from pipeline.pool import Pool

KEY = dict(category="qa", turn=0, decoder="draft", temperature=1.0, budget=4, seed=0)


def labelled(n: int = 600, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = 1 / (1 + np.exp(-x[:, 0])) * 0.5 + 0.25 * rng.random(n)
    return x, rng.integers(0, 30, n), y, np.repeat([0, 1], n // 2)


def squared_error(pred: np.ndarray, y: np.ndarray, at: np.ndarray) -> float:
    return float(((pred[at] - y[at]) ** 2).mean())


def test_a_feature_equal_to_the_label_on_one_half_does_not_help_on_the_other():
    """A column holds the label on the even half and noise on the odd one. The even half's predictions come
    from the model fitted on the odd half, which never saw the column tell anything: their error is that of
    the model without the column. Control: with the label in the column on both halves, the error drops
    (so a fold that leaked would show)."""
    x, tokens, y, half = labelled()
    noise = np.random.default_rng(5).random(len(y))
    even = half == 0
    without = fit_predict(x, tokens, y, half, classifier=False)
    leaky_column = np.where(even, y, noise)
    with_column = fit_predict(np.column_stack([x, leaky_column]), tokens, y, half, classifier=False)
    both = fit_predict(np.column_stack([x, y]), tokens, y, half, classifier=False)
    baseline = squared_error(without, y, even)
    assert squared_error(with_column, y, even) > 0.8 * baseline
    assert squared_error(both, y, even) < 0.2 * baseline


def test_the_classifier_predicts_probabilities_and_fits_are_reproducible():
    x, tokens, y, half = labelled(seed=1)
    labels = (y > np.median(y)).astype(float)
    a = fit_predict(x, tokens, labels, half, classifier=True)
    b = fit_predict(x, tokens, labels, half, classifier=True)
    np.testing.assert_array_equal(a, b)
    assert np.all((a > 0) & (a <= 1))
    assert np.corrcoef(a, labels)[0, 1] > 0.3


def test_the_token_prior_never_holds_its_own_label():
    """Training candidates alternate between two parts; each part's prior comes from the other's labels, the
    held-out candidates' from the whole training half."""
    tokens = np.array([7, 7, 7, 7, 8, 7, 8, 7])
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.25, 0.75])
    train = np.array([True] * 6 + [False] * 2)
    prior = token_prior(tokens, y, train)
    part_a, part_b = [0, 2, 4], [1, 3, 5]  # training candidates in alternation

    def shrunk(fit, token):
        same = [i for i in fit if tokens[i] == token]
        return (y[same].sum() + PSEUDO_COUNT * y[fit].mean()) / (len(same) + PSEUDO_COUNT)

    for i in part_a:
        assert prior[i] == pytest.approx(shrunk(part_b, tokens[i]))
    for i in part_b:
        assert prior[i] == pytest.approx(shrunk(part_a, tokens[i]))
    for i in (6, 7):
        assert prior[i] == pytest.approx(shrunk(part_a + part_b, tokens[i]))
    changed = y.copy()
    changed[0] = 0.0  # a candidate's own label never moves its own prior
    assert token_prior(tokens, changed, train)[0] == prior[0]


def test_a_column_missing_throughout_a_training_half_is_left_out():
    x, tokens, y, half = labelled(seed=2)
    column = np.where(half == 0, np.nan, x[:, 0])  # missing wherever the odd half's predictions are fitted
    pred = fit_predict(np.column_stack([x, column]), tokens, y, half, classifier=False)
    assert np.all(np.isfinite(pred))


def round_with(rows: RetainedRows | None, root: int, argmax: int, edge) -> RecordedRound:
    pool = Pool.from_edges(np.array([root, 4, 5]), np.array([-1, -1, 0]), np.log([0.5, 0.3, 0.4]),
                           np.array([1, 0, 0], bool))
    return RecordedRound(budget=2, accepted=0, emitted=np.array([4]), pool=pool, edge=np.array(edge, float),
                         root=root, position=3, root_argmax=argmax, prefix_root=2 if rows is not None else -1,
                         rows=rows)


def test_row_features_are_missing_without_their_row_and_at_the_zeroed_continuation():
    preceding = RetainedRows(kind=np.array([ROW_KINDS.index("preceding")]), tv=np.array([0.5], np.float32),
                             agree=np.array([False]), on_path=np.array([False]), age=np.array([-1]),
                             logp=np.array([[-np.inf, np.log(0.2)]], np.float32))
    rounds = [round_with(None, 3, 3, (1, 0, 0)), round_with(preceding, 3, 4, (0, 1, 0))]
    s = study_rounds(0.0, [RecordedDecode({**KEY, "prompt_id": "a", "temperature": 0.0}, rounds)], [1])
    x = candidate_features(s, rows=True)
    rows = x[:, len(BASE):]
    assert x.shape == (4, len(BASE) + len(ROW_FEATURES))
    assert np.all(np.isnan(rows[:2]))  # the first round: no row at all
    at = {name: i for i, name in enumerate(ROW_FEATURES)}
    assert np.isnan(rows[2, at["preceding_logp"]])  # the candidate repeating the root: the zeroed continuation
    assert rows[3, at["preceding_logp"]] == pytest.approx(np.log(0.2)) and rows[3, at["preceding_gap"]] == 0.0
    assert np.isnan(rows[3, at["cache_logp"]]) and rows[3, at["prefix_root"]] == 2
    assert x[2, BASE.index("repeats_root")] == 1 and x[3, BASE.index("repeats_root")] == 0
    assert np.isnan(x[0, BASE.index("previous_accepted")]) and x[2, BASE.index("previous_accepted")] == 0


def test_top1_counts_greedy_rounds_whose_first_level_holds_the_target_token():
    """Round one: the target's token 4 is on the first level, which the prediction ranks first and the draft
    second. Round two: the target's token 9 is not on the first level, so a greedy round is not counted."""
    rounds = [round_with(None, 3, 4, (0, 1, 0)), round_with(None, 3, 9, (0, 0, 0))]
    s = study_rounds(0.0, [RecordedDecode({**KEY, "prompt_id": "a", "temperature": 0.0}, rounds)], [1])
    predicted = [np.array([0.2, 0.8]), np.array([0.2, 0.8])]
    got = first_level_figures(s, predicted)
    np.testing.assert_array_equal(got["eligible"], [1, 0])
    np.testing.assert_array_equal(got["top1"], [1, 0])
    np.testing.assert_allclose(got["squared"], [0.2 ** 2 + 0.2 ** 2, 0.2 ** 2 + 0.8 ** 2])
    draft = first_level_figures(s, [np.array([0.5, 0.3])] * 2)
    np.testing.assert_array_equal(draft["top1"], [0, 0])
