"""The paper's selection tables from one temperature's recorded rounds, each beside the paper's figures: Table 2
and 9 (gains over draft, the share of the oracle's advantage that root and depth-two selection recover), Figure 2
and Figure 5 (every depth), Table 8 (emitted tokens), Table 10 (tasks weighted equally), Table 11 (restricted
pools), Tables 12 and 18 (root-draw against the stronger PEARL baseline and a PEARL matched in tree size), Table
13 (budgets that reach each other's value), Table 15 (the first-token and entropy splits), Table 20 (late rounds)
and Table 29 (the matched cap); and their JSON lines (`depth`, `restricted`, `matched`, `size`)."""

from __future__ import annotations

import numpy as np

from study.selection import (EXCEEDS, RESTRICTED, entropy_quintiles, match_pearl, matched_cap, reach_budgets,
                                  stratified_counts, task_weighted_gain)
from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import category_group
from study.values import Averages, Estimate, PerRound, RoundValues
from pipeline.value import SIZES
from study.section import est, pct, share

# The paper's figures, as its text gives them (ranges over its runs), printed beside this run's.
PAPER = {
    "Table 2": "root over draft up to +8.0% at B = 59, larger at B = 8",
    "Table 9": "every interval of root's and root-draw's gains above zero at both budgets; the draw off the pool's "
               "first level in 9-16% of greedy rounds and 11-19% at T = 1",
    "D.13": "with standalone drafters root recovers 35-57% of the oracle's advantage at B = 59",
    "Figure 2": "root recovers a substantial share of the oracle's gain; exact second-token probabilities improve "
                "allocation further; the gains are largest for small trees",
    "Table 8": "rounds emit 3.22-5.51 tokens (greedy), 3.08-4.53 (T = 1); in emitted tokens root over draft +2.3% to "
               "+5.5% at B = 59 and +6.1% to +14.2% at B = 8, root-draw over PEARL +2.9% to +4.9% and +7.7% to +9.0%",
    "Table 10": "every task's interval of the root and root-draw gains above zero at both budgets",
    "Table 11": "the oracle's advantage at B = 59: 0.12-0.19 tokens at M = 100, 0.33-0.39 at M = 710; root recovers "
                "44-67% of it at M = 100",
    "Table 12": "root-draw over PEARL up to +14.2% at B = 8 and +7.0% at B = 59; pearl-top1 below PEARL by 0.5-1.5% "
                "at B = 8 and 6.7-9.1% at B = 59; trees 6.6-7.4 against 4.1-5.8 nodes at B = 8, 42-52 against 26-38 "
                "at B = 59; matched in size (PEARL raised to 10.4-14.0 and 81-96 candidates, whose trees pass B in "
                "40-56% and 38-53% of rounds) root-draw still gains up to +4.8% at B = 8 and +2.4% at B = 59",
    "Table 13": "draft needs 11-22 nodes to reach root's value at B = 8; root reaches draft's with 4-7",
    "Table 15": "where the first tokens agree, rows through depth two recover 45-62% of the oracle's advantage at "
                "B = 59; the rounds where they differ carry a larger share of the root gain than of the rounds; the "
                "upper two entropy quintiles carry 1.6-12.8 times the gain of the lower two",
    "Table 18": "at an online run's own contexts root-draw gains 1.0-2.4% over the size-matched PEARL at B = 59, "
                "against 0.9-2.4% at the recorded contexts",
    "Table 20": "whole-output gains within 0.3 points of the default-length runs at B = 59 and 1.1 at B = 8",
    "Table 29": "root-draw's cap lowered to 40-43 nodes matches PEARL's mean tree at B = 59; its expected acceptance "
                "there is 1.1-2.5% above PEARL's",
}
LATE = 256  # a late round starts with at least this many output tokens (the paper's default limit)


def paper(name: str) -> str:
    return f"The paper: {PAPER[name]}."


def picks(rv: RoundValues) -> list[tuple[int, int]]:
    """(budget, column) of B = 8 and 59 where reported (else the first budget)."""
    budgets = rv.budgets.tolist()
    chosen = [b for b in (8, 59) if b in budgets] or budgets[:1]
    return [(b, budgets.index(b)) for b in chosen]


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _head(*names: str) -> list[str]:
    return [_row(names), "|" + "---|" * len(names)]


def tables(rv: RoundValues, avg: Averages) -> list[str]:
    """Every paper table this temperature's rounds give, in the paper's order."""
    out = table_2_9(rv, avg) + figure_2_5(rv, avg) + table_8(rv, avg)
    if len({category_group(c) for c in rv.categories}) > 1:
        out += table_10(rv, avg)
    out += table_11(rv, avg) + table_12(rv, avg) + table_13(rv, avg) + table_15(rv, avg) + table_20(rv, avg)
    return out + table_29(rv, avg)


def table_2_9(rv: RoundValues, avg: Averages) -> list[str]:
    gains = {rule: avg.gain(rule, "draft") for rule in ("root", "root-draw", "oracle", "oracle-draw")}
    root_share, depth2_share = avg.share("root", "draft", "oracle"), avg.share("depth-2", "draft", "oracle")
    out = ["#### Tables 2 and 9: gains over draft in expected accepted tokens per round", "",
           *_head("budget", "draft", "root", "root-draw", "oracle", "oracle-draw", "root's share of the oracle's "
                  "advantage", "depth two's share")]
    for b, k in picks(rv):
        out.append(_row([b, f"{avg.per_round('draft')[k]:.3f}", *(est(gains[r][k]) for r in gains),
                         share(root_share[k]), share(depth2_share[k])]))
    off = avg.off_pool_share()
    return out + ["", f"The draw X1 is off the pool's first level in {pct(off.value, 1, sign=False)} of rounds "
                      f"[{pct(off.low, 1, sign=False)}, {pct(off.high, 1, sign=False)}].",
                  paper("Table 2"), paper("Table 9"), paper("D.13"), ""]


def figure_2_5(rv: RoundValues, avg: Averages) -> list[str]:
    depths = [f"depth-{d}" for d in range(1, rv.depth + 1)]
    gains = {name: avg.gain(name, "draft") for name in depths}
    shares = {name: avg.share(name, "draft", "oracle") for name in depths[:2]}
    out = [f"#### Figures 2 and 5: exact target probabilities for the first d factors of every path (d = 1 is root, "
           f"d = {rv.depth} the oracle): gain over draft, and the share of the oracle's advantage recovered", "",
           *_head("budget", *(f"d = {d}" for d in range(1, rv.depth + 1)), "share, d = 1", "share, d = 2")]
    for k, b in enumerate(rv.budgets.tolist()):
        out.append(_row([b, *(pct(gains[n][k].value) for n in depths), *(share(shares[n][k]) for n in shares)]))
    return out + ["", paper("Figure 2"), ""]


def table_8(rv: RoundValues, avg: Averages) -> list[str]:
    out = ["#### Table 8: tokens a round emits (accepted draft tokens and the continuation), and gains counted in "
           "emitted tokens beside those in accepted tokens", "",
           *_head("budget", "draft", "root", "root-draw", "pearl", "root over draft (emitted)", "(accepted)",
                  "root-draw over pearl (emitted)", "(accepted)")]
    for b, k in picks(rv):
        emitted = [f"{avg.per_round(f'emitted:{r}')[k]:.2f}" for r in ("draft", "root", "root-draw", "pearl")]
        out.append(_row([b, *emitted, est(avg.gain("emitted:root", "emitted:draft")[k]),
                         est(avg.gain("root", "draft")[k]), est(avg.gain("emitted:root-draw", "emitted:pearl")[k]),
                         est(avg.gain("root-draw", "pearl")[k])]))
    return out + ["", paper("Table 8"), ""]


def table_10(rv: RoundValues, avg: Averages) -> list[str]:
    """Each task weighted the same, prompts resampled within each task; and each task's own gains."""
    groups = np.array([category_group(c) for c in rv.categories])
    counts = stratified_counts(groups, min(1000, avg.counts.shape[0]), 1)
    out = ["#### Table 10: every task weighted the same (prompts resampled within each task)", "",
           *_head("budget", "root over draft", "root-draw over draft", "root-draw over pearl")]
    pairs = (("root", "draft"), ("root-draw", "draft"), ("root-draw", "pearl"))
    gains = [task_weighted_gain(avg.totals[a], avg.totals[b], avg.rounds, groups, counts, avg.tail) for a, b in pairs]
    for b, k in picks(rv):
        out.append(_row([b, *(est(Estimate(g[0][k], g[1][k], g[2][k])) for g in gains)]))
    return out + ["", paper("Table 10"), ""]


def table_11(rv: RoundValues, avg: Averages) -> list[str]:
    if 59 not in rv.budgets.tolist():
        return ["#### Table 11: not given (B = 59 is beyond these pools)", ""]
    k = rv.budgets.tolist().index(59)
    out = ["#### Table 11: every rule restricted to the M highest-ranked candidates, at B = 59", "",
           *_head("M", "oracle's advantage over draft (tokens)", "root's share of it")]
    for m in (*RESTRICTED, "pool"):
        name = (lambda r: r) if m == "pool" else (lambda r, m=m: f"restricted-{m}:{r}")
        advantage = avg.per_round(name("oracle"))[k] - avg.per_round(name("draft"))[k]
        out.append(_row([m, f"{advantage:.3f}", share(avg.share(name("root"), name("draft"), name("oracle"))[k])]))
    return out + ["", paper("Table 11"), ""]


def stronger_pearl(avg: Averages) -> list[str]:
    """Per reported budget, the stronger of `pearl` and `pearl-top1` by value per round."""
    return ["pearl" if p >= t else "pearl-top1" for p, t in zip(avg.per_round("pearl"), avg.per_round("pearl-top1"))]


def table_12(rv: RoundValues, avg: Averages) -> list[str]:
    stronger = stronger_pearl(avg)
    out = ["#### Tables 12 and 18: root-draw against the stronger PEARL baseline, expected tree sizes, and a PEARL "
           "whose pre-draw budget is raised until its mean tree is root-draw's (matched in every resample)", "",
           *_head("budget", "stronger", "root-draw over it", "pearl-top1 over pearl", "nodes: root-draw", "pearl",
                  "PEARL raised to", "root-draw over it", "its trees past B")]
    for b, k in picks(rv):
        m = match_pearl(rv.full, avg.rounds, avg.counts, b, avg.tail) if b in EXCEEDS else None
        gain = avg.gain("root-draw", stronger[k])[k]
        cells = [b, stronger[k], est(gain), est(avg.gain("pearl-top1", "pearl")[k]),
                 f"{avg.per_round('size:root-draw')[k]:.1f}", f"{avg.per_round('size:pearl')[k]:.1f}"]
        cells += [f"{m.raised:.1f}", est(Estimate(m.gain, m.low, m.high)), pct(m.exceeds, 0, sign=False)] if m else \
            ["—"] * 3
        out.append(_row(cells))
    return out + ["", paper("Table 12"), paper("Table 18") + " These tables are at the recorded contexts; an online "
                  "run scoring each tree's 160 best descendants was not made.", ""]


def table_13(rv: RoundValues, avg: Averages) -> list[str]:
    n = rv.full["draft"].shape[1]
    out = [f"#### Table 13: the budget at which one rule reaches the other's value (every budget up to {n} searched, "
           f"and again in every resample)", "", *_head("at", "draft reaches root's value at", "root reaches draft's at")]
    for b, _ in picks(rv):
        cells = [f"B = {b}"]
        for rule, target in (("draft", "root"), ("root", "draft")):
            got, low, high = reach_budgets(rv.full, avg.rounds, avg.counts, rule, target, b, avg.tail)
            text = lambda x: str(int(x)) if x <= n else f"beyond {n}"  # noqa: E731
            cells.append(f"{got or 'never'} [{text(low)}, {text(high)}]")
        out.append(_row(cells))
    return out + ["", paper("Table 13"), ""]


def table_15(rv: RoundValues, avg: Averages) -> list[str]:
    if not np.isfinite(rv.entropy).all() or 59 not in rv.budgets.tolist():
        return ["#### Table 15: not recorded (the root row's argmax and entropy came with schema 2)", ""]
    out = ["#### Table 15: rounds where the drafter's most probable first token is the target's, and the root gain "
           "by quintile of the root row's entropy", "",
           *_head("budget", "rounds agreeing", "their share of the root gain", "depth two's share of the oracle's "
                  "advantage there", "mean root gain by entropy quintile, lowest first", "upper two over lower two")]
    agree, quintile = rv.first_agree, _quintile(rv.entropy)
    for b, k in picks(rv):
        gain, advantage, depth2 = (rv.values[n][:, k] - rv.values["draft"][:, k] for n in ("root", "oracle", "depth-2"))
        means, _ = entropy_quintiles(rv.entropy, gain)
        lower, upper = gain[quintile <= 1].sum(), gain[quintile >= 3].sum()
        out.append(_row([b, pct(agree.mean(), 1, False), _ratio(gain[agree].sum(), gain.sum()),
                         _ratio(depth2[agree].sum(), advantage[agree].sum()), ", ".join(f"{m:+.4f}" for m in means),
                         f"{upper / lower:.2f}" if lower > 0 else "—"]))
    return out + ["", paper("Table 15"), ""]


def _ratio(num: float, den: float) -> str:
    return pct(num / den, 1, False) if den > 0 else "—"


def _quintile(entropy: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.quantile(entropy, [0.2, 0.4, 0.6, 0.8]), entropy, side="left")


def table_20(rv: RoundValues, avg: Averages) -> list[str]:
    late = rv.position >= LATE
    if not late.any():
        return [f"#### Table 20: no late round (none starts with {LATE} or more output tokens: the runs' limit)", ""]
    kept = np.unique(rv.prompt[late])
    sub = PerRound(rv.temperature, rv.budgets, np.searchsorted(kept, rv.prompt[late]), [rv.prompts[i] for i in kept],
                   [rv.categories[i] for i in kept], {n: rv.values[n][late] for n in ("root", "draft", "root-draw")})
    late_avg = Averages(sub, n_resamples=avg.counts.shape[0], confidence=1 - 2 * avg.tail)
    out = [f"#### Table 20: late rounds (starting with {LATE} or more output tokens: {int(late.sum())} rounds of "
           f"{len(kept)} prompts) against whole outputs", "",
           *_head("budget", "root over draft, late", "whole outputs", "root-draw over draft, late")]
    for b, k in picks(rv):
        late_est = (lambda e: est(e)) if len(kept) >= MIN_INTERVAL_PROMPTS else (lambda e: pct(e.value))
        out.append(_row([b, late_est(late_avg.gain("root", "draft")[k]), est(avg.gain("root", "draft")[k]),
                         late_est(late_avg.gain("root-draw", "draft")[k])]))
    return out + ["", paper("Table 20"), ""]


def table_29(rv: RoundValues, avg: Averages) -> list[str]:
    n = rv.full["draft"].shape[1]
    cap = matched_cap(rv.full, avg.rounds, 59) if n >= 59 else None
    if cap is None:
        return ["#### Table 29: not given (no root-draw cap reaches PEARL's tree at B = 59 in these pools)", ""]
    r = avg.rounds.sum()
    mean = lambda name, b: rv.full[name][:, b - 1].sum() / r  # noqa: E731
    boot = (avg.counts @ rv.full["root-draw"][:, cap - 1]) / (avg.counts @ rv.full["pearl"][:, 58]) - 1
    low, high = np.quantile(boot, [avg.tail, 1 - avg.tail])
    gain = mean("root-draw", cap) / mean("pearl", 59) - 1
    return ["#### Table 29: root-draw's cap lowered to the smallest whose mean expected tree reaches PEARL's at "
            "B = 59", "", f"Cap {cap}: root-draw's trees hold {mean('size:root-draw', cap):.1f} nodes on average "
            f"against PEARL's {mean('size:pearl', 59):.1f}; its expected acceptance is {est(Estimate(gain, low, high))} "
            f"over PEARL's at B = 59 (the cap held fixed in the resamples).", paper("Table 29"), ""]


def json_lines(rv: RoundValues, avg: Averages) -> list[dict]:
    base = {"temperature": rv.temperature, "rounds": rv.rounds}
    budgets = rv.budgets.tolist()
    lines = [{"kind": "depth", **base, "budget": b, "depth": d, "value_per_round": float(avg.per_round(f"depth-{d}")[k])}
             for d in range(1, rv.depth + 1) for k, b in enumerate(budgets)]
    lines += [{"kind": "size", **base, "rule": rule, "budget": b, "expected_nodes": float(avg.per_round(f"size:{rule}")[k])}
              for rule in SIZES for k, b in enumerate(budgets)]
    for m in (*RESTRICTED, len(rv.full["draft"][0])):
        name = (lambda r: r) if m not in RESTRICTED else (lambda r, m=m: f"restricted-{m}:{r}")
        for k, b in enumerate(budgets):
            s = avg.share(name("root"), name("draft"), name("oracle"))[k]
            lines.append({"kind": "restricted", **base, "candidates": m, "budget": b,
                          "oracle_advantage": float(avg.per_round(name("oracle"))[k] - avg.per_round(name("draft"))[k]),
                          "root_share": None if not np.isfinite(s.value) else s.value})
    for b in (b for b in EXCEEDS if b in budgets):
        m = match_pearl(rv.full, avg.rounds, avg.counts, b, avg.tail)
        lines.append({"kind": "matched", **base, "budget": b, "raised_budget": m.raised, "pearl_size": m.pearl_size,
                      "root_draw_size": m.root_draw_size, "gain": m.gain, "gain_low": m.low, "gain_high": m.high,
                      "exceeds_share": m.exceeds})
    return lines
