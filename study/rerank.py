"""Rerankers of the first level (the paper's Table 4, Appendix D.8; DESIGN.md section 13): gradient-boosted trees
that predict each first-level candidate's target probability from what is known before verification, fitted on
one half of the prompts and applied to the other, then swapped; the prediction replaces the first draft factor
as the root row does (study.controls.first_values).

`base` reads BASE's features; its token prior is the mean target probability of the training candidates with
the same token, shrunk toward their overall mean with a pseudo-count of 20, each part of an alternating split of
the training half taking the other part's, so that no candidate's prior holds its own label. `rows` adds
ROW_FEATURES, missing (NaN) in a round without the row. Fits run on one thread with seed 0: the same data give
the same figures."""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from study.controls import StudyRounds, cross_fit, row_logp
from study.retained_rows import holds_rows
from evaluation.rounds import RecordedRound

SIBLINGS = 10  # sorted sibling draft probabilities read (NaN past the first level's size)
BASE = ("q", "log_q", "sibling_rank", *(f"sibling_{i}" for i in range(SIBLINGS)), "first_level_mass",
        "expanded", "children", "child_q_max", "child_q_sum", "child_entropy", "subtree_size", "subtree_depth",
        "subtree_mass", "task", "prompt_tokens", "position", "previous_accepted", "repeats_root")
ROW_KINDS_READ = ("cache", "same-token", "preceding")
ROW_FEATURES = (*(f"{k}_{f}" for k in ROW_KINDS_READ for f in ("logp", "gap")), "cache_age", "prefix_root")
PSEUDO_COUNT = 20.0
MODEL = dict(max_iter=400, learning_rate=0.05, max_leaf_nodes=63, early_stopping=False, random_state=0)
FLOOR = 1e-9  # a predicted probability below this ranks as this (a regressor may predict below zero)


def candidate_features(s: StudyRounds, rows: bool) -> np.ndarray:
    """(n, f) the features of every first-level candidate (rounds in order, pool order within a round): BASE,
    then ROW_FEATURES with `rows` (fit_predict adds the token prior of each fold)."""
    tasks = {c: i for i, c in enumerate(sorted(set(s.table.categories)))}
    out = []
    for i, rnd in enumerate(s.rounds):
        context = [tasks[s.table.categories[s.table.prompt[i]]], s.prompt_tokens[i], rnd.position, s.previous[i]]
        parts = [_draft_features(rnd), np.tile(np.array(context, np.float64), (len(rnd.first), 1)),
                 (rnd.pool.token[rnd.first] == rnd.root)[:, None].astype(np.float64)]
        if rows:
            parts.append(_row_features(rnd))
        out.append(np.hstack(parts))
    return np.vstack(out)


def _draft_features(rnd: RecordedRound) -> np.ndarray:
    """(k, 3 + SIBLINGS + 9) what the drafter's pool says about each first-level candidate."""
    pool, first = rnd.pool, rnd.first
    n, k = len(pool), len(first)
    logp = pool.logp.astype(np.float64)
    q_all = np.exp(logp)
    q = q_all[first]
    rank = np.empty(k)
    rank[np.argsort(-q, kind="stable")] = np.arange(k)
    siblings = np.full(SIBLINGS, np.nan)
    siblings[: min(k, SIBLINGS)] = np.sort(q)[::-1][:SIBLINGS]
    inner = pool.parent >= 0
    parent = pool.parent[inner]
    children = np.bincount(parent, minlength=n)[first]
    child_max = np.zeros(n)
    np.maximum.at(child_max, parent, q_all[inner])
    child_sum = np.bincount(parent, weights=q_all[inner], minlength=n)[first]
    child_entropy = np.bincount(parent, weights=-q_all[inner] * logp[inner], minlength=n)[first]
    size = np.bincount(pool.top, minlength=n)[first] - 1
    depth = np.zeros(n)
    np.maximum.at(depth, pool.top, pool.depth.astype(np.float64))
    mass = np.bincount(pool.top, weights=np.exp(pool.cum.astype(np.float64)), minlength=n)[first] / q - 1
    columns = [q, logp[first], rank, *np.repeat(siblings[:, None], k, 1), np.full(k, q.sum()),
               pool.expanded[first], children, child_max[first], child_sum, child_entropy, size, depth[first] - 1,
               mass]
    return np.column_stack(columns).astype(np.float64)


def _row_features(rnd: RecordedRound) -> np.ndarray:
    """(k, len(ROW_FEATURES)) the retained rows' features of each first-level candidate (NaN: missing)."""
    k = len(rnd.first)
    out = np.full((k, len(ROW_FEATURES)), np.nan)
    for j, kind in enumerate(ROW_KINDS_READ):
        p = row_logp(rnd, kind)
        if p is not None:
            p = np.where(np.isfinite(p), p, np.nan)  # the preceding row's zeroed continuation: missing
            out[:, 2 * j] = p
            out[:, 2 * j + 1] = p - np.nanmax(p) if np.isfinite(p).any() else np.nan
    if holds_rows(rnd):
        age = rnd.rows.age[rnd.rows.of("cache")]
        out[:, -2] = age[0] if len(age) else np.nan
        out[:, -1] = rnd.prefix_root
    return out


def token_prior(tokens: np.ndarray, y: np.ndarray, train: np.ndarray) -> np.ndarray:
    """(n,) every candidate's token prior (see the module's docstring) from the candidates of `train` (n,) bool:
    the others' from all of them, theirs by alternation."""
    out = np.empty(len(y))
    idx = np.flatnonzero(train)
    a, b = idx[0::2], idx[1::2]
    out[a] = _prior(tokens[b], y[b], tokens[a])
    out[b] = _prior(tokens[a], y[a], tokens[b])
    out[~train] = _prior(tokens[idx], y[idx], tokens[~train])
    return out


def _prior(fit_tokens: np.ndarray, fit_y: np.ndarray, at: np.ndarray) -> np.ndarray:
    if not len(fit_y):
        return np.full(len(at), np.nan)  # nothing to fit it on: missing
    known, inverse = np.unique(fit_tokens, return_inverse=True)
    sums, counts = np.bincount(inverse, weights=fit_y), np.bincount(inverse)
    pos = np.minimum(np.searchsorted(known, at), len(known) - 1)
    hit = known[pos] == at
    return (np.where(hit, sums[pos], 0.0) + PSEUDO_COUNT * float(fit_y.mean())) / (np.where(hit, counts[pos], 0)
                                                                                + PSEUDO_COUNT)


def fit_predict(x: np.ndarray, tokens: np.ndarray, y: np.ndarray, half: np.ndarray, *, classifier: bool,
                categorical: int | None = None) -> np.ndarray:
    """(n,) each candidate's predicted target probability from the model fitted on the other half: features
    x (n, f) plus the fold's token prior of tokens (n,), labels y (n,) (0/1 for the classifier); column
    `categorical` of x is a category code."""
    mask = np.zeros(x.shape[1] + 1, bool)
    if categorical is not None:
        mask[categorical] = True

    def fit(train: np.ndarray):
        features = np.column_stack([x, token_prior(tokens, y, train)])
        used = ~np.all(np.isnan(features[train]), axis=0)  # a column missing throughout tells nothing (and
        features = features[:, used]  # scikit-learn 1.9 fails to bin it)
        labels = y[train]
        if len(np.unique(labels)) < 2:  # nothing to tell apart: every prediction is that label
            return lambda test: np.full(int(test.sum()), float(labels[0]))
        kind = HistGradientBoostingClassifier if classifier else HistGradientBoostingRegressor
        model = kind(**MODEL, categorical_features=mask[used] if mask[used].any() else None)
        with threadpool_limits(1):  # one thread: on a shared machine, threads waiting for each other spin
            model.fit(features[train], labels)

        def predict(test: np.ndarray) -> np.ndarray:
            with threadpool_limits(1):
                return model.predict_proba(features[test])[:, 1] if classifier else model.predict(features[test])

        return predict

    return np.clip(cross_fit(half, fit), FLOOR, 1.0)


RERANKERS = ("base", "rows")


def rerank(s: StudyRounds, name: str) -> list[np.ndarray]:
    """Per round (k,): reranker `name`'s predicted first-level target probabilities, each half's from the fit
    on the other (a classifier at T = 0, a regressor otherwise)."""
    x = candidate_features(s, rows=name == "rows")
    tokens = np.concatenate([r.pool.token[r.first] for r in s.rounds])
    y = np.concatenate([sc.edge[r.first] for r, sc in zip(s.rounds, s.scored)])
    greedy = s.table.temperature == 0
    pred = fit_predict(x, tokens, np.round(y) if greedy else y, s.first_half(), classifier=greedy,
                       categorical=BASE.index("task"))
    return np.split(pred, np.cumsum([len(r.first) for r in s.rounds])[:-1])


def first_level_figures(s: StudyRounds, firsts: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per round (R,): `top1` (the highest of `firsts`, ties to the draft's order, is the target's most probable
    token), `eligible` (rounds counted: greedy ones whose first level holds that token, every round with a
    recorded root argmax under sampling), `squared` (squared errors summed over the first level against the
    target probabilities) and `candidates`."""
    out = {name: np.zeros(len(s.rounds)) for name in ("top1", "eligible", "squared", "candidates")}
    for i, (rnd, sc, first) in enumerate(zip(s.rounds, s.scored, firsts)):
        tokens = rnd.pool.token[rnd.first]
        draft = rnd.pool.logp[rnd.first]
        best = tokens[np.lexsort((np.arange(len(first)), -draft, -first))[0]]
        known = rnd.root_argmax >= 0 and (s.table.temperature > 0 or rnd.root_argmax in tokens)
        out["eligible"][i] = known
        out["top1"][i] = known and best == rnd.root_argmax
        out["squared"][i] = float(((first - sc.edge[rnd.first]) ** 2).sum())
        out["candidates"][i] = len(first)
    return out
