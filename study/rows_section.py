"""The values program's section on rows retained between rounds (DESIGN.md section 13; the paper's Section 5.3,
Tables 4, 19, 22, 23, 25, 26 and Figure 6): how close each kind of retained row is to the next root row, and
what the draft factors replaced by calibrated estimates, rerankers, retained rows and their mixtures give."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from study.coverage import reported_budgets
from study.first_factor import CALIBRATED, RERANK_PROMPTS, FirstFactors, first_factors
from study.rerank import RERANKERS
from study.retained_rows import MATCHES, ROWS, RowAgreement, RowStudy
from study.values import Averages, Estimate, by_temperature
from models.options import INT8_SUFFIX
from study.section import ValuesInput, est, interval, number, pct, share, share1

FIGURE = "rows_substitution.png"
SUBSTITUTED = ("substitute-cache", "substitute-same-token", "substitute-preceding", "substitute-exact")
MATCH_NAMES = {"token-tree": "root token at a node of the previous tree",
               "token-scored": "root token at a prefix the previous passes scored",
               "address": "the emitted address scored (a matched row)"}
# The paper's figures as its text gives them (its tables are not in the text).
PAPER_ROWS = {"matched": "mean TV below 0.01 in every run, median below 0.0004",
              "token-only": "mean TV 0.38 to 0.47",
              "token-only-on-path": "mean TV 0.72 to 0.79, above the off-path rows' in every run",
              "token-only-off-path": "below the on-path rows' mean TV in every run",
              "cache": "Table 26 (not in the text)", "same-token": "Table 26 (not in the text)",
              "preceding": "Table 26 (not in the text)",
              "own-root": "none: D.3 compares other passes (a one-token root pass against the tree pass)"}
PAPER_MATCHES = ("token matches in the previous tree are frequent but do not guarantee an exact row for the next "
                 "root (Section 5.3; the rates are in Table 22, not in the text)")
PAPER_CONTROLS = ("root stays above both rerankers; rows recovers at most 29% of root's gain over draft at B = 8 "
                  "and 33% at B = 59 (Table 19; the calibrated controls' figures are not in the text)")
PAPER_RERANKERS = ("rows improves on draft and on base at both temperatures and budgets, every paired 95% "
                   "interval above zero (lower ends at least +0.81% and +0.88% at B = 8, +0.27% and +0.30% at "
                   "B = 59); its held-out squared error is below the draft probabilities' and base's; its top-1 "
                   "accuracy 60.1% to 82.8% against the draft ranking's 58.7% to 82.7%")
PAPER_SUBSTITUTES = ("every direct substitute (cache, same-token, preceding) lowers expected acceptance relative "
                     "to draft (Table 25, Figure 6); the preceding-row mixture still lowers it, and the cache "
                     "mixture gives no consistently positive gain (D.12)")


@dataclass(frozen=True, slots=True)
class RowsAt:
    """The retained-row study at one temperature."""

    rows: RowStudy | None  # None where no round can hold retained rows
    study: FirstFactors
    values: Averages  # of study.values
    figures: Averages  # of study.figures


@dataclass(frozen=True, slots=True)
class Rows:
    """The retained-row study of every temperature."""

    data: ValuesInput
    temperatures: list[RowsAt]

    def json_lines(self) -> list[dict]:
        lines = []
        for at in self.temperatures:
            t = at.study.values.temperature
            if at.rows is not None:
                lines += [_match_line(t, at.rows, name, e) for name, e in at.rows.matches().items()]
                lines += [_row_line(t, at.rows.agreement(row)) for row in ROWS]
            lines += _control_lines(t, at.study, at.values)
            for name in RERANKERS:
                if f"{name}:top1" in at.figures.totals:
                    lines.append(_reranker_line(t, name, at.figures))
        return lines

    def markdown(self) -> list[str]:
        out = ["", "## Retained rows (Section 5.3; Tables 4, 19, 22, 23, 25, 26; Figure 6)", "",
               "Rows kept between rounds (DESIGN.md section 13) against the next round's root row, and selections "
               "with the first draft factor replaced. Fits are made on one half of the prompts (even- or "
               "odd-numbered) and applied to the other, then swapped.", ""]
        for at in self.temperatures:
            out += _temperature(at.rows, at.study, at.values, at.figures, self.data)
        return out

    def plots(self, out: Path) -> list[str]:
        from study.rows_plot import plot_substitution  # matplotlib: only when drawing

        shown = [(at.study.values.temperature, at.values) for at in self.temperatures]
        names = [n for n in SUBSTITUTED if all(n in avg.totals for _, avg in shown)]
        plot_substitution(shown, names, out / FIGURE, self.data.level)
        return [FIGURE]


def rows_section(data: ValuesInput) -> Rows:
    """The recorded rounds of `data` -> the retained-row study of each temperature."""
    temperatures = []
    for t, decodes in by_temperature(data.decodes).items():
        budgets = reported_budgets(decodes, data.options.budget_list)
        rows = RowStudy(t, decodes, data.resampling)
        study = first_factors(t, decodes, budgets)
        temperatures.append(RowsAt(rows if rows.eligible else None, study, Averages(study.values, **data.resampling),
                                   Averages(study.figures, **data.resampling)))
    return Rows(data, temperatures)


def _match_line(t: float, rows: RowStudy, match: str, e: Estimate) -> dict:
    return {"kind": "matches", "temperature": t, "rounds": rows.eligible, "match": match, "share": number(e.value),
            "share_low": number(e.low), "share_high": number(e.high)}


def _row_line(t: float, a: RowAgreement) -> dict:
    line = {"kind": "rows", "temperature": t, "rounds": a.rounds, "row": a.row, "rows": a.rows}
    for name, e in (("available_share", a.available), ("mean_tv", a.mean_tv), ("median_tv", a.median_tv),
                    ("argmax_agreement", a.agreement)):
        line.update({name: number(e.value), f"{name}_low": number(e.low), f"{name}_high": number(e.high)})
    return line


def _control_lines(t: float, study: FirstFactors, avg: Averages) -> list[dict]:
    lines = []
    budgets = study.values.budgets.tolist()
    for name in study.controls:
        per_round, gains = avg.per_round(name), avg.gain(name, "draft")
        extra = _reranker_extras(name, avg)
        for k, b in enumerate(budgets):
            g = gains[k]
            line = {"kind": "control", "temperature": t, "rounds": study.values.rounds, "control": name,
                    "budget": b, "value_per_round": float(per_round[k]), "gain_over_draft": number(g.value),
                    "gain_low": number(g.low), "gain_high": number(g.high)}
            line.update({key: values[k] for key, values in extra.items()})
            if name.startswith("mix-"):
                line["weights"] = study.weights[name[4:]][:, k].tolist()  # chosen for the even, odd prompts
            lines.append(line)
    return lines


def _reranker_extras(name: str, avg: Averages) -> dict[str, list]:
    """A reranker's share of root's gain over draft (and `rows`' gain over `base`), per budget."""
    if name not in RERANKERS:
        return {}
    out = {}
    pairs = [("share_of_root_gain", avg.share(name, "draft", "root"))]
    if name == "rows" and "base" in avg.totals:
        pairs.append(("gain_over_base", avg.gain("rows", "base")))
    for key, estimates in pairs:
        out[key] = [number(e.value) for e in estimates]
        out[f"{key}_low"] = [number(e.low) for e in estimates]
        out[f"{key}_high"] = [number(e.high) for e in estimates]
    return out


def _reranker_line(t: float, name: str, avg: Averages) -> dict:
    top1, draft_top1 = avg.ratio(f"{name}:top1", f"{name}:eligible")[0], avg.ratio("draft:top1", "draft:eligible")[0]
    sq, draft_sq = avg.ratio(f"{name}:squared", f"{name}:candidates")[0], \
        avg.ratio("draft:squared", "draft:candidates")[0]
    return {"kind": "reranker", "temperature": t, "rounds": int(avg.rounds.sum()), "reranker": name,
            "top1_rounds": int(avg.totals[f"{name}:eligible"].sum()), "top1_accuracy": number(top1.value),
            "top1_low": number(top1.low), "top1_high": number(top1.high), "draft_top1_accuracy": number(draft_top1.value),
            "squared_error": number(sq.value), "squared_error_low": number(sq.low), "squared_error_high": number(sq.high),
            "draft_squared_error": number(draft_sq.value)}


# -- Markdown -------------------------------------------------------------------------------------------------


def _temperature(rows: RowStudy | None, study: FirstFactors, values: Averages, figures: Averages,
                 data: ValuesInput) -> list[str]:
    table = study.values
    out = [f"### T = {table.temperature:g}: {table.rounds} rounds, {len(table.prompts)} prompts", ""]
    if rows is None:
        out += ["No round holds retained rows (a recording before schema 2, or without the decode's prompt): no "
                "agreement figures, substitutes, mixtures or `rows` reranker.", ""]
    else:
        out += _matches(rows, data.level) + _agreements(rows, data.level)
    picks = [b for b in (8, 59) if b in table.budgets.tolist()] or table.budgets.tolist()[:1]
    ks = [table.budgets.tolist().index(b) for b in picks]
    if not study.study.splits:
        out += ["The calibrated controls, rerankers and mixtures need prompts in both halves: this temperature "
                "has one prompt.", ""]
    else:
        out += _calibrated(study, values, picks, ks, data) + _rerankers(study, values, figures, picks, ks, data)
    return out + _substitutes(study, values, picks, ks, data)


def _matches(rows: RowStudy, level: str) -> list[str]:
    found = rows.matches()
    out = [f"Table 22: token and address matches, over the {rows.eligible} rounds that follow a recorded round of "
           f"their decode ({level} intervals).", "", "| match | share of rounds |", "|---|---|"]
    out += [f"| {MATCH_NAMES[m]} | {share1(found[m])} |" for m in MATCHES]
    return out + ["", f"The paper: {PAPER_MATCHES}.", ""]


def _agreements(rows: RowStudy, level: str) -> list[str]:
    head = ["| row | rounds holding one | rows | mean TV | median TV | argmax agreement | the paper |",
            "|---|---|---|---|---|---|---|"]
    out = []
    for title, names in (("Table 23: matched and token-only rows", ROWS[:4]),
                         ("Table 26: cache, same-token and preceding rows, and the decoder's own root row",
                          ROWS[4:])):
        out += [f"{title} against the next root row: total variation (TV) over the whole vocabulary and argmax "
                f"agreement, rows pooled ({level} intervals).", ""] + head
        for name in names:
            a = rows.agreement(name)
            out.append(f"| {name} | {share1(a.available)} | {a.rows} | {interval(a.mean_tv, '.3g')} | "
                       f"{interval(a.median_tv, '.3g')} | {share1(a.agreement)} | {PAPER_ROWS[name]} |")
        out.append("")
    return out + ["The preceding row's probability of the continuation is zeroed before it is compared. own-root is "
                  "the root row of the decode's own pass (a decoder without a root pass computes it in its tree "
                  "pass, with its tree) against the measurement pass's (with the pool's expanded candidates), in every "
                  "round whose decode computed it: the same row from batches of other sizes.", ""]


def _calibrated(study: FirstFactors, avg: Averages, picks: list[int], ks: list[int], data: ValuesInput) -> list[str]:
    out = [f"Table 19: calibrated controls and rerankers beside draft and root: expected accepted tokens per round, "
           f"gain over draft ({data.level} interval). isotonic-q1 replaces the first draft factor by an isotonic "
           f"estimate of the target probability, per-depth calibrates every draft factor with a map per depth "
           f"(200 equal-count bins of draft probability each).", "",
           "| selection | " + " | ".join(f"B = {b} | gain over draft" for b in picks) + " |",
           "|" + "---|" * (1 + 2 * len(picks))]
    for name in ("draft", "root", *CALIBRATED, *RERANKERS):
        if name in avg.totals:
            gains = avg.gain(name, "draft")
            cells = [f"{avg.per_round(name)[k]:.3f} | {est(gains[k]) if name != 'draft' else '—'}" for k in ks]
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out + ["", f"The paper: {PAPER_CONTROLS}.", ""]


def _rerankers(study: FirstFactors, avg: Averages, figures: Averages, picks: list[int], ks: list[int],
               data: ValuesInput) -> list[str]:
    head = ["reranker"] + [f"gain over draft B = {b}" for b in picks] + [f"rows over base B = {b}" for b in picks] + \
           [f"share of root's gain B = {b}" for b in picks] + ["top-1 accuracy", "squared error"]
    out = [f"Table 4: the rerankers ({data.level} intervals). Top-1: its best first-level candidate is the "
           f"target's most probable token (greedy: over rounds whose first level holds it); squared error: "
           f"held-out, over first-level candidates against their target probabilities. The draft ranking's "
           f"in brackets after them.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if not study.seconds:
        return [f"Table 4: the rerankers are fitted when each half of the prompts holds at least {RERANK_PROMPTS}; "
                f"this temperature has {len(study.values.prompts)} prompts.", ""]
    draft_top1 = figures.ratio("draft:top1", "draft:eligible")[0].value
    draft_sq = figures.ratio("draft:squared", "draft:candidates")[0].value
    for name in RERANKERS:
        if name not in avg.totals:
            continue
        gains, shares = avg.gain(name, "draft"), avg.share(name, "draft", "root")
        over = avg.gain("rows", "base") if name == "rows" else None
        top1 = figures.ratio(f"{name}:top1", f"{name}:eligible")[0]
        sq = figures.ratio(f"{name}:squared", f"{name}:candidates")[0]
        cells = [est(gains[k]) for k in ks] + [est(over[k]) if over else "—" for k in ks] + \
                [share(shares[k]) for k in ks] + [f"{share1(top1)} ({pct(draft_top1, sign=False)})",
                                                  f"{interval(sq, '.3g')} ({draft_sq:.4g})"]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    seconds = ", ".join(f"{name} {s:.1f} s" for name, s in study.seconds.items())
    out += ["", f"The paper: {PAPER_RERANKERS}. Fitting and applying each reranker on both halves took {seconds} "
                f"(one thread).", ""]
    return out + _int8_note(data, "the draft probabilities are already close to the target's, so the calibrated "
                                  "controls and rerankers have less to correct and root's gain, which they are "
                                  "measured against, is smaller than the paper's drafters leave")


def _substitutes(study: FirstFactors, avg: Averages, picks: list[int], ks: list[int], data: ValuesInput) -> list[str]:
    names = [n for n in study.controls if n.startswith(("substitute-", "mix-"))]
    out = [f"Table 25: the first draft factor replaced by a retained row (the cache, same-token or preceding row), "
           f"by the exact root row (softmax at T = 1 under greedy decoding, as the paper's Exact column), and by "
           f"geometric mixtures q1^(1-w) p^w of a row with it (w in 0.25, 0.5, 0.75, chosen at each budget on the "
           f"other half; in brackets the weight the even- and odd-numbered prompts got). A round without the row "
           f"keeps the draft factor. Gain over draft ({data.level} interval); every budget in Figure 6 "
           f"({FIGURE}).", "", "| first factor | " + " | ".join(f"B = {b}" for b in picks) + " |",
           "|" + "---|" * (1 + len(picks))]
    for name in names:
        gains = avg.gain(name, "draft")
        cells = [est(gains[k]) + (" (w " + "/".join(f"{w:g}" for w in study.weights[name[4:]][:, k]) + ")"
                                  if name.startswith("mix-") else "") for k in ks]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    out += ["", f"The paper: {PAPER_SUBSTITUTES}.", ""]
    return out + _int8_note(data, "its first draft factor is already close to the target's root row, so a row "
                                  "from another address has less to improve on than with the paper's drafters")


def _int8_note(data: ValuesInput, what: str) -> list[str]:
    """One sentence where this run's drafter is an int8 copy of its target (the default pair)."""
    models = data.provenance.get("models", {})
    target, drafter = (models.get(k) or {} for k in ("target", "drafter"))
    if drafter.get("model") != f"{target.get('model')}{INT8_SUFFIX}":
        return []
    return [f"This run's drafter is an int8 copy of its target: {what}.", ""]
