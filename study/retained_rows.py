"""How close the rows retained between rounds are to the next round's root row (the paper's Section 5.3, Tables
22, 23 and 26; DESIGN.md section 13): how often each kind is there, its total variation and argmax agreement,
with prompt-bootstrap intervals, from the reductions the recording stores (evaluation.rounds.RetainedRows).

Over the rounds that follow a recorded round of their decode (`prefix_root` >= 0): token matches in the tree
(`prefix_root` > 0) and in the scored set (a matched or token-only row), and address matches (a matched row).
Per kind of row (ROWS): its availability, and over the rows pooled the mean and median total variation and the
share whose argmax agrees. `own-root` is the root row of the decode's own pass against the measurement pass's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evaluation.rounds import ROW_KINDS, RecordedDecode, RecordedRound
from study.values import Averages, Estimate, PerRound

ROWS = ("matched", "token-only", "token-only-on-path", "token-only-off-path", "cache", "same-token", "preceding",
        "own-root")
MATCHES = ("token-tree", "token-scored", "address")


@dataclass(frozen=True, slots=True)
class RowAgreement:
    """One kind of row against the next root row, at one temperature."""

    row: str
    rounds: int  # rounds that could hold it
    rows: int  # rows pooled
    available: Estimate  # share of those rounds holding one
    mean_tv: Estimate
    median_tv: Estimate
    agreement: Estimate  # share of rows whose argmax is the root row's


def holds_rows(rnd: RecordedRound) -> bool:
    """The round follows a recorded round of its decode, so rows were kept for it."""
    return rnd.prefix_root >= 0 and rnd.rows is not None


def row_figures(rnd: RecordedRound, row: str) -> tuple[np.ndarray, np.ndarray]:
    """The total variations (n,) and argmax agreements (n,) of the round's rows of one kind (ROWS)."""
    if row == "own-root":
        return (np.array([rnd.own_tv]), np.array([rnd.own_agree == 1])) if rnd.own_agree >= 0 else \
            (np.zeros(0), np.zeros(0, bool))
    rows = rnd.rows
    if not holds_rows(rnd):
        return np.zeros(0), np.zeros(0, bool)
    kind = "token-only" if row.startswith("token-only") else row
    mask = rows.kind == ROW_KINDS.index(kind)
    if row == "token-only-on-path":
        mask &= rows.on_path
    elif row == "token-only-off-path":
        mask &= ~rows.on_path
    return rows.tv[mask].astype(np.float64), rows.agree[mask]


def match_figures(rnd: RecordedRound) -> np.ndarray:
    """(3,) the round's token match in the tree, token match in the scored set and address match (MATCHES)."""
    kinds = rnd.rows.kind
    scored = np.isin(kinds, [ROW_KINDS.index("matched"), ROW_KINDS.index("token-only")]).any()
    return np.array([rnd.prefix_root > 0, scored, (kinds == ROW_KINDS.index("matched")).any()], np.float64)


class RowStudy:
    """Every round's row figures at one temperature, and their averages with prompt-bootstrap intervals."""

    def __init__(self, temperature: float, decodes: Sequence[RecordedDecode], resampling: dict) -> None:
        table = PerRound.of(temperature, decodes, [0])
        rounds = [rnd for d in decodes for rnd in d.rounds]
        eligible = np.array([holds_rows(r) for r in rounds], np.float64)
        self.temperature, self.table, self.eligible = temperature, table, int(eligible.sum())
        self.tv: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # row -> (tvs, their rounds' prompts)
        values = {"eligible": eligible, "all": np.ones(len(rounds))}
        for row in ROWS:
            figures = [row_figures(r, row) for r in rounds]
            n = np.array([len(tv) for tv, _ in figures], np.float64)
            values[f"{row}:available"] = (n > 0).astype(np.float64)
            values[f"{row}:rows"] = n
            values[f"{row}:tv"] = np.array([tv.sum() for tv, _ in figures])
            values[f"{row}:agree"] = np.array([agree.sum() for _, agree in figures], np.float64)
            self.tv[row] = (np.concatenate([tv for tv, _ in figures]), np.repeat(table.prompt, n.astype(np.int64)))
        matches = np.array([match_figures(r) if holds_rows(r) else np.zeros(3) for r in rounds]).reshape(-1, 3)
        values.update({f"match:{name}": matches[:, i] for i, name in enumerate(MATCHES)})
        table.values = {name: v[:, None] for name, v in values.items()}
        self.averages = Averages(table, **resampling)
        self._agreements: dict[str, RowAgreement] = {}  # each computed once: the medians resample every row

    def matches(self) -> dict[str, Estimate]:
        """MATCHES -> the share of rounds that could hold rows."""
        return {name: self.averages.ratio(f"match:{name}", "eligible")[0] for name in MATCHES}

    def agreement(self, row: str) -> RowAgreement:
        if row not in self._agreements:
            self._agreements[row] = self._agreement(row)
        return self._agreements[row]

    def _agreement(self, row: str) -> RowAgreement:
        avg = self.averages
        base = "all" if row == "own-root" else "eligible"
        rows = int(avg.totals[f"{row}:rows"].sum())
        rounds = int(avg.totals[base].sum())
        none = Estimate(math.nan, math.nan, math.nan)
        return RowAgreement(row, rounds, rows, avg.ratio(f"{row}:available", base)[0] if rounds else none,
                            avg.ratio(f"{row}:tv", f"{row}:rows")[0] if rows else none,
                            self._median(row) if rows else none,
                            avg.ratio(f"{row}:agree", f"{row}:rows")[0] if rows else none)

    def _median(self, row: str) -> Estimate:
        """The median total variation of the pooled rows, and its interval over the prompt resamples (each
        resample weighs a row by how often its prompt is drawn)."""
        tv, prompt = self.tv[row]
        order = np.argsort(tv, kind="stable")
        tv, prompt = tv[order], prompt[order]
        point = weighted_medians(tv, np.ones((1, len(tv))))[0]
        counts = self.averages.counts
        chunk = max(1, 2_000_000 // len(tv))  # resamples at a time: (chunk, rows) weights in memory
        boot = np.concatenate([weighted_medians(tv, c[:, prompt]) for c in
                               np.array_split(counts, math.ceil(len(counts) / chunk))])
        tail = self.averages.tail
        boot = boot[np.isfinite(boot)]
        low, high = np.quantile(boot, [tail, 1 - tail]) if len(boot) else (math.nan, math.nan)
        return Estimate(float(point), float(low), float(high))


def weighted_medians(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(m,) the median of sorted `values` (n,) under each row of `weights` (m, n): the mean of the lower and
    upper medians (np.median under equal weights); NaN where a row weighs nothing."""
    cum = np.cumsum(weights, axis=1)
    half = cum[:, -1:] / 2
    lower = np.minimum((cum < half).sum(1), len(values) - 1)
    upper = np.minimum((cum <= half).sum(1), len(values) - 1)
    out = (values[lower] + values[upper]) / 2
    return np.where(cum[:, -1] > 0, out, np.nan)
