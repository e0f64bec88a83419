"""The paper's selection tables from one temperature's recorded rounds, each beside the paper's figures: Tables 2, 8,
9, 10, 11, 12, 13, 15, 20, 27 and 29 and Figures 2 and 5 (docs/values.md lists what each holds). Their JSON lines
are study.table_lines'."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from study.covered_rounds import RULES as COVERED_RULES, covered_rounds
from study.selection import EXCEEDS, RESTRICTED, Matched, match_pearl, matched_cap, reach_budgets
from study.splits import QUINTILES, TASK_PAIRS, FirstTokenSplit, each_task, first_token_split, task_weighted
from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import category_group
from pipeline.config import InputError
from study.values import Averages, Estimate, PerRound, RoundValues, by_prompt
from study.section import est, interval, pct, plain, share, share1

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
                "40-56% and 38-53% of rounds) root-draw still gains up to +4.8% at B = 8 and +2.4% at B = 59; the draw "
                "is the drafter's most probable first token in 52-76% of rounds; at B = 8 the raised trees hold "
                "9.2-11.2 nodes after it and 2.1-2.4 after another first-level token, root-draw's 8 after either; at "
                "B = 59 66-74 and 12-15, root-draw's 59 and 39-49",
    "Table 13": "draft needs 11-22 nodes to reach root's value at B = 8; root reaches draft's with 4-7",
    "Table 15": "where the first tokens agree, rows through depth two recover 45-62% of the oracle's advantage at "
                "B = 59; the rounds where they differ carry a larger share of the root gain than of the rounds; the "
                "upper two entropy quintiles carry 1.6-12.8 times the gain of the lower two; under greedy decoding the "
                "mean root gain rises from each quintile to the next in every run",
    "Table 18": "at an online run's own contexts root-draw gains 1.0-2.4% over the size-matched PEARL at B = 59, "
                "against 0.9-2.4% at the recorded contexts",
    "Table 20": "late rounds in 41-48% of the outputs; whole-output gains within 0.3 points of the default-length "
                "runs at B = 59 and 1.1 at B = 8; root-draw over draft in late rounds at both budgets, no interval "
                "below +3.4%",
    "Table 27": "the covering decoder emits fewer tokens for each target pass than EAGLE-3's decoder at both "
                "budgets, although selection improves in the rounds that hold the root row",
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


def tables(rv: RoundValues, avg: Averages, short: RoundValues | None = None) -> list[str]:
    """Every paper table this temperature's rounds give, in the paper's order (`short`: Table 20's run of the same
    prompts limited to LATE tokens)."""
    out = table_2_9(rv, avg) + figure_2_5(rv, avg) + table_8(rv, avg)
    if len({category_group(c) for c in rv.categories}) > 1:
        out += table_10(rv, avg)
    out += table_11(rv, avg) + table_12(rv, avg) + table_13(rv, avg) + table_15(rv, avg) + table_20(rv, avg, short)
    return out + table_27(rv, avg) + table_29(rv, avg)


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
        emitted = [plain(avg.mean(f"emitted:{r}")[k], 2) for r in ("draft", "root", "root-draw", "pearl")]
        out.append(_row([b, *emitted, est(avg.gain("emitted:root", "emitted:draft")[k]),
                         est(avg.gain("root", "draft")[k]), est(avg.gain("emitted:root-draw", "emitted:pearl")[k]),
                         est(avg.gain("root-draw", "pearl")[k])]))
    return out + ["", paper("Table 8"), ""]


def table_10(rv: RoundValues, avg: Averages) -> list[str]:
    """Every task weighted the same, prompts resampled within each task; and each task's own gains."""
    weighted = task_weighted(rv, avg)
    said = "" if weighted.resamples == avg.counts.shape[0] else \
        f", {weighted.resamples} resamples rather than the {avg.counts.shape[0]} above"
    names = [f"{a} over {b}" for a, b in TASK_PAIRS]
    out = [f"#### Table 10: every task weighted the same (prompts resampled within each task{said})", "",
           *_head("budget", *names)]
    for b, k in picks(rv):
        out.append(_row([b, *(est(weighted.gains[pair][k]) for pair in TASK_PAIRS)]))
    tasks = each_task(rv, avg)
    out += ["", f"Each task's own gains ({tasks[0].resamples} resamples of its prompts; no interval below "
                f"{MIN_INTERVAL_PROMPTS} prompts):", "",
            *_head("task", "prompts", "rounds", *(f"{name} B = {b}" for name in names for b, _ in picks(rv)))]
    for t in tasks:
        cell = est if t.has_interval else (lambda e: f"{pct(e.value)} (no interval)")
        out.append(_row([t.task, t.prompts, t.rounds, *(cell(t.gains[pair][k]) for pair in TASK_PAIRS
                                                         for _, k in picks(rv))]))
    return out + ["", paper("Table 10"), ""]


def table_11(rv: RoundValues, avg: Averages) -> list[str]:
    if 59 not in rv.budgets.tolist():
        return ["#### Table 11: not given (B = 59 is beyond these pools)", ""]
    k = rv.budgets.tolist().index(59)
    out = ["#### Table 11: every rule restricted to the M highest-ranked candidates, at B = 59", "",
           *_head("M", "oracle's advantage over draft (tokens)", "root's share of it")]
    for m in (*RESTRICTED, "pool"):
        name = (lambda r: r) if m == "pool" else (lambda r, m=m: f"restricted-{m}:{r}")
        advantage = avg.mean_difference(name("oracle"), name("draft"))[k]
        out.append(_row([m, plain(advantage, 3), share(avg.share(name("root"), name("draft"), name("oracle"))[k])]))
    return out + ["", paper("Table 11"), ""]


def stronger_pearl(avg: Averages) -> list[str]:
    """Per reported budget, the stronger of `pearl` and `pearl-top1` by value per round."""
    return ["pearl" if p >= t else "pearl-top1" for p, t in zip(avg.per_round("pearl"), avg.per_round("pearl-top1"))]


def matched(rv: RoundValues, avg: Averages) -> dict[int, Matched]:
    """At each budget of EXCEEDS reported, the stronger PEARL variant raised until its mean tree is root-draw's."""
    stronger, budgets = stronger_pearl(avg), rv.budgets.tolist()
    return {b: match_pearl(rv.full, avg.rounds, avg.counts, b, avg.tail, stronger[budgets.index(b)])
            for b in EXCEEDS if b in budgets}


def table_12(rv: RoundValues, avg: Averages) -> list[str]:
    stronger, raised = stronger_pearl(avg), matched(rv, avg)
    out = ["#### Table 12: root-draw against the stronger PEARL variant at each budget, expected tree sizes, and "
           "that variant with its pre-draw budget raised until its mean tree is root-draw's (matched in every "
           "resample)", "",
           *_head("budget", "stronger", "root-draw over it", "pearl-top1 over pearl", "nodes: root-draw", "pearl",
                  "pearl-top1", "stronger raised to", "root-draw over it", "its trees past B")]
    for b, k in picks(rv):
        m = raised.get(b)
        cells = [b, stronger[k], est(avg.gain("root-draw", stronger[k])[k]), est(avg.gain("pearl-top1", "pearl")[k]),
                 *(plain(avg.mean(f"size:{rule}")[k], 1) for rule in ("root-draw", "pearl", "pearl-top1"))]
        cells += [f"{m.raised:.1f}", est(Estimate(m.gain, m.low, m.high)), pct(m.exceeds, 0, sign=False)] if m else \
            ["—"] * 3
        out.append(_row(cells))
    if raised:
        out += ["", "The trees by the kind of draw: X1 the drafter's most probable first token, or another "
                    "first-level token (mean nodes after each; the raised variant as matched above):", "",
                *_head("budget", "X1 the drafter's top first token", "raised variant after it", "after another",
                       "root-draw after it", "after another")]
        for b, m in raised.items():
            out.append(_row([b, pct(m.top1_share, 1, sign=False), *(_nodes(x) for x in (
                m.after_top1, m.after_other, m.root_draw_after_top1, m.root_draw_after_other))]))
    return out + ["", paper("Table 12"), paper("Table 18") + " These tables are at the recorded contexts; an online "
                  "run scoring each tree's 160 best descendants (Table 18) was not made.", ""]


def _nodes(x: float) -> str:
    return f"{x:.1f}" if np.isfinite(x) else "—"


def reaches(rv: RoundValues, avg: Averages, budget: int) -> dict[tuple[str, str], tuple[int | None, float, float]]:
    """Table 13 at `budget`: (rule, target) -> the smallest budget at which rule's value reaches target's, and
    its interval (searched again in every resample; beyond the pool is its size + 1)."""
    return {(rule, target): reach_budgets(rv.full, avg.rounds, avg.counts, rule, target, budget, avg.tail)
            for rule, target in (("draft", "root"), ("root", "draft"))}


def table_13(rv: RoundValues, avg: Averages) -> list[str]:
    n = rv.full["draft"].shape[1]
    out = [f"#### Table 13: the budget at which one rule reaches the other's value (every budget up to {n} searched, "
           f"and again in every resample)", "", *_head("at", "draft reaches root's value at", "root reaches draft's at")]
    text = lambda x: str(int(x)) if x <= n else f"beyond {n}"  # noqa: E731
    for b, _ in picks(rv):
        cells = [f"B = {b}"]
        for got, low, high in reaches(rv, avg, b).values():
            cells.append(f"{got or 'never'} [{text(low)}, {text(high)}]")
        out.append(_row(cells))
    return out + ["", paper("Table 13"), ""]


def table_15_budgets(rv: RoundValues) -> list[tuple[int, int]]:
    """The (budget, column) pairs Table 15 is given at: B = 8 and 59, when the root row's entropy was recorded."""
    if not np.isfinite(rv.entropy).all() or 59 not in rv.budgets.tolist():
        return []
    return picks(rv)


def table_15(rv: RoundValues, avg: Averages) -> list[str]:
    budgets = table_15_budgets(rv)
    if not budgets:
        return ["#### Table 15: not recorded (the root row's argmax and entropy came with schema 2)", ""]
    splits = first_token_split(rv, avg, budgets)
    out = ["#### Table 15: rounds where the drafter's most probable first token is the target's, and the root gain "
           "(root's value less draft's) by quintile of the root row's entropy (the quintiles taken over all rounds "
           "and held fixed in the resamples)", "",
           *_head("budget", "rounds agreeing", "their share of the root gain", "depth two's share of the oracle's "
                  "advantage there", "upper two quintiles' root gain over the lower two's")]
    for f in splits:
        out.append(_row([f.budget, share1(f.agreeing), share1(f.root_gain_share), share1(f.depth_two_share),
                         interval(f.upper_over_lower, ".2f")]))
    out += ["", *_head("budget", *(f"quintile {q + 1}" for q in range(QUINTILES)),
                       "rises from each quintile to the next")]
    for f in splits:
        out.append(_row([f.budget, *(f"{e.value:+.4f} [{e.low:+.4f}, {e.high:+.4f}]" for e in f.quintile_gain),
                         _rises(f)]))
    return out + ["", paper("Table 15"), ""]


def _rises(f: FirstTokenSplit) -> str:
    """Whether the mean root gain rises at every step; where not, each step that falls, with its interval."""
    if f.rises:
        return "yes"
    falls = [f"{q + 1} to {q + 2}: {e.value:+.4f} [{e.low:+.4f}, {e.high:+.4f}]" for q, e in enumerate(f.rise)
             if e.value <= 0]
    return "no, quintile " + "; ".join(falls)


@dataclass(frozen=True)
class LateRounds:
    """Table 20: the rounds that start with LATE or more output tokens against whole outputs, per picked budget.
    Late intervals are NaN from fewer than MIN_INTERVAL_PROMPTS prompts."""
    rounds: int
    prompts: int  # the outputs (one a prompt at a temperature) that hold a late round
    outputs: int
    budgets: list[int]
    late: dict[str, list[Estimate]]  # "root", "root-draw": the gain over draft in late rounds
    whole: dict[str, list[Estimate]]  # the same over every round
    default_length: dict[str, list[Estimate]]  # over the rounds that start before LATE (greedy: a LATE-token run's)
    whole_less_default: dict[str, list[Estimate]]  # whole less default_length, paired by prompt
    ended: dict[str, int]  # ENDS -> the outputs (decodes) that end so, as their records say
    late_ended: dict[str, int]  # ENDS -> the prompts whose late rounds are of outputs that end so
    # ENDS -> rule -> the gain over draft in those late rounds (NaN from fewer than FEWEST_APART prompts)
    late_by_end: dict[str, dict[str, list[Estimate]]]
    short: dict[str, list[Estimate]]  # the --short run's whole-output gains (empty: no such run)
    whole_less_short: dict[str, list[Estimate]]  # whole less short, paired by prompt

    @property
    def limit_share(self) -> float:
        """The share of the outputs whose records say how they end that reach the limit."""
        known = sum(self.ended.values())
        return self.ended["length"] / known if known else float("nan")


LATE_RULES = ("root", "root-draw")
ENDS = ("stop", "length")  # the records' finish_reason: at a stop, or cut at the limit
FEWEST_APART = 2  # the fewest prompts whose late rounds are given apart by how their outputs end


def late_rounds(rv: RoundValues, avg: Averages, short: RoundValues | None = None) -> LateRounds | None:
    """Table 20's figures, or None where no round is late (every run limited to LATE tokens); `short`: the same
    prompts' rounds in a run limited to LATE tokens, whose whole outputs the whole outputs here are set against."""
    late = rv.position >= LATE
    if not late.any():
        return None
    cols = picks(rv)
    n = len(rv.prompts)
    # every prompt's sums over its early rounds, over all of them and over the short run's, resampled as `avg` is
    totals = {f"{name}:{part}": by_prompt(rv.values[name][keep][:, [k for _, k in cols]], rv.prompt[keep], n)
              for name in ("draft", *LATE_RULES) for part, keep in (("early", ~late), ("all", slice(None)))}
    totals |= _short_totals(rv, short, [b for b, _ in cols]) if short is not None else {}
    parts = Averages.of_totals(totals, np.bincount(rv.prompt, minlength=n), **avg.resampling)
    gain = lambda part: {r: [_less_one(e) for e in parts.ratio(f"{r}:{part}", f"draft:{part}")]  # noqa: E731
                         for r in LATE_RULES}
    less = lambda part: {r: parts.difference((f"{r}:all", "draft:all"), (f"{r}:{part}", f"draft:{part}"))  # noqa
                         for r in LATE_RULES}
    _, first = np.unique(np.c_[rv.prompt, rv.recorded_in], axis=0, return_index=True)  # each output's first round
    apart = {end: _late_gains(rv, avg, late & (rv.finish == end), cols, FEWEST_APART) for end in ENDS}
    prompts, gains = _late_gains(rv, avg, late, cols, 1)
    return LateRounds(
        int(late.sum()), prompts, n, [b for b, _ in cols], gains,
        {r: [avg.gain(r, "draft")[k] for _, k in cols] for r in LATE_RULES}, gain("early"), less("early"),
        {end: int(np.sum(rv.finish[first] == end)) for end in ENDS}, {end: apart[end][0] for end in ENDS},
        {end: apart[end][1] for end in ENDS}, gain("short") if short else {}, less("short") if short else {})


def _late_gains(rv: RoundValues, avg: Averages, keep: np.ndarray, cols: list[tuple[int, int]],
                fewest: int) -> tuple[int, dict[str, list[Estimate]]]:
    """The prompts whose rounds `keep` holds, and root's and root-draw's gains over draft in those rounds (rounds
    pooled) at `cols`: NaN from fewer than `fewest` prompts, no interval from fewer than MIN_INTERVAL_PROMPTS."""
    kept = np.unique(rv.prompt[keep])
    if len(kept) < fewest:
        return len(kept), {r: [Estimate(np.nan, np.nan, np.nan)] * len(cols) for r in LATE_RULES}
    sub = PerRound(rv.temperature, rv.budgets, np.searchsorted(kept, rv.prompt[keep]), [rv.prompts[i] for i in kept],
                   [rv.categories[i] for i in kept], {n: rv.values[n][keep] for n in ("draft", *LATE_RULES)})
    kept_avg = Averages(sub, **avg.resampling)
    bare = (lambda e: e) if len(kept) >= MIN_INTERVAL_PROMPTS else (lambda e: Estimate(e.value, np.nan, np.nan))
    return len(kept), {r: [bare(kept_avg.gain(r, "draft")[k]) for _, k in cols] for r in LATE_RULES}


def _short_totals(rv: RoundValues, short: RoundValues, budgets: list[int]) -> dict[str, np.ndarray]:
    """The short run's sums of draft's, root's and root-draw's values by prompt at `budgets` (`NAME:short`), in
    the prompt order of `rv`; InputError where it has no output of one of rv's prompts or its pools are smaller."""
    at, have = {p: i for i, p in enumerate(short.prompts)}, short.budgets.tolist()
    if lost := next((p for p in rv.prompts if p not in at), None):
        raise InputError(f"--short: the run limited to {LATE} tokens has no output of prompt {lost} at "
                         f"T = {rv.temperature:g}")
    if lost := next((b for b in budgets if b not in have), None):
        raise InputError(f"--short: the run limited to {LATE} tokens has no pool of {lost} candidates at "
                         f"T = {rv.temperature:g}")
    order, ks = [at[p] for p in rv.prompts], [have.index(b) for b in budgets]
    return {f"{name}:short": by_prompt(short.values[name][:, ks], short.prompt, len(short.prompts))[order]
            for name in ("draft", *LATE_RULES)}


def _less_one(e: Estimate) -> Estimate:
    return Estimate(e.value - 1, e.low - 1, e.high - 1)


def table_20(rv: RoundValues, avg: Averages, short: RoundValues | None = None) -> list[str]:
    t = late_rounds(rv, avg, short)
    if t is None:
        return [f"#### Table 20: no late round (none starts with {LATE} or more output tokens: the runs' limit)", ""]
    cell = est if t.prompts >= MIN_INTERVAL_PROMPTS else (lambda e: pct(e.value))
    against = [f"the {LATE}-token run's whole outputs", f"whole less the {LATE}-token run's (points)"] if t.short \
        else []
    out = [f"#### Table 20: late rounds (starting with {LATE} or more output tokens: {t.rounds} rounds, in "
           f"{t.prompts} of {t.outputs} outputs) against whole outputs, against the rounds before the {LATE}th "
           f"token (under greedy decoding, what a run limited to {LATE} tokens records)"
           + (f" and against a separate run of the same prompts limited to {LATE} tokens (`--short`)" if t.short
              else ""), "", _ends(t), "",
           *_head("budget", "rule over draft", "late rounds", "late, outputs ending at a stop",
                  "late, outputs cut at the limit", "whole outputs", f"before token {LATE}",
                  "whole less before (points)", *against)]
    for i, b in enumerate(t.budgets):
        for r in LATE_RULES:
            apart = [_apart(t.late_by_end[end][r][i], t.late_ended[end]) for end in ENDS]
            shorter = [est(t.short[r][i]), _points(t.whole_less_short[r][i])] if t.short else []
            out.append(_row([b, r, cell(t.late[r][i]), *apart, est(t.whole[r][i]), est(t.default_length[r][i]),
                             _points(t.whole_less_default[r][i]), *shorter]))
    return out + ["", paper("Table 20"), ""]


def _ends(t: LateRounds) -> str:
    """How the outputs end, in words: those that reach the limit, and those that hold a late round."""
    if not sum(t.ended.values()):
        return "No record says how the outputs end (`finish_reason`): the late rounds are not split by it."
    return (f"Outputs cut at the limit (`finish_reason` `length`): {t.ended['length']} of "
            f"{sum(t.ended.values())} ({pct(t.limit_share, 1, sign=False)}). Of the {t.prompts} outputs holding a "
            f"late round, ending at a stop: {t.late_ended['stop']}, cut at the limit: {t.late_ended['length']}; each "
            f"kind's late rounds are given apart from {FEWEST_APART} prompts on, with an interval from "
            f"{MIN_INTERVAL_PROMPTS}.")


def _apart(e: Estimate, prompts: int) -> str:
    """A late-round gain of one kind of output: with its interval, its value alone, or its prompts' count."""
    if prompts >= MIN_INTERVAL_PROMPTS:
        return est(e)
    return f"{pct(e.value)} ({prompts} prompts, no interval)" if prompts >= FEWEST_APART else \
        f"{prompts} prompt{'' if prompts == 1 else 's'}, no figure"


def _points(e: Estimate) -> str:
    """A difference of two gains in percentage points, with its interval."""
    point = lambda x: f"{100 * x:+.2f}" if np.isfinite(x) else "—"  # noqa: E731
    return f"{point(e.value)} [{point(e.low)}, {point(e.high)}]"


def own_budget(rv: RoundValues, budget: str) -> int | None:
    """A recording setting's budget as a reported one is (capped by the pools); None for budget auto."""
    return min(int(budget), rv.full["draft"].shape[1]) if budget.isdigit() else None


def own_columns(rv: RoundValues, budget: str) -> list[tuple[int, int]]:
    """(budget, column) of a recording setting's own budget where it is reported, else picks(rv): B = 8 and 59
    (a setting at budget auto, or at a budget not reported)."""
    budgets, own = rv.budgets.tolist(), own_budget(rv, budget)
    return [(own, budgets.index(own))] if own in budgets else picks(rv)


def table_27(rv: RoundValues, avg: Averages) -> list[str]:
    found = covered_rounds(rv, avg)
    if not found:
        return ["#### Table 27: not given (no round held a covered row: these are not the covering decoder's "
                "rounds, or their records predate `held_rows`)", ""]
    out = ["#### Table 27: selection in the rounds of the covering decoder (`cover`) that hold a covered row, its "
           "root's exact row scored by the pass before (at the leaf it stopped at); each rule's expected accepted "
           "tokens per round there, from the round's measurement pass (`root-draw` is what `cover` keeps there)", "",
           *_head("setting", "budget", "rounds holding the row", "their share", *(f"{r} there" for r in COVERED_RULES),
                  "root over draft there", "root-draw over draft there")]
    for c in found:
        for b, k in own_columns(rv, c.budget):
            out.append(_row([f"{c.decoder} at B = {c.budget}", b, f"{c.held_rounds} of {c.rounds}",
                             share1(c.held_share), *(interval(c.values[r][k], ".3f") for r in COVERED_RULES),
                             est(c.gains["root"][k]), est(c.gains["root-draw"][k])]))
    return out + ["", "Values under exhaustive traversal, as in every table here; `cover` walks its tree with "
                      "sampled-leaf stopping, which accepts one token fewer in a round that stops at a leaf (Table 1). "
                      "Table 27's own figure, tokens per target pass against `draft`'s, is the report's "
                      "(`launch/pair.sh report`) of the same sweep.", paper("Table 27"), ""]


@dataclass(frozen=True, slots=True)
class Cap:
    """Table 29 from recorded rounds: root-draw's cap lowered to the smallest whose mean expected tree reaches
    PEARL's at `budget`, and its value over PEARL's there (the cap held fixed in the resamples)."""

    budget: int
    cap: int
    root_draw_size: float
    pearl_size: float
    gain: Estimate


def lowered_cap(rv: RoundValues, avg: Averages, budget: int = 59) -> Cap | None:
    """Table 29's cap and gain, or None where the pools are smaller than `budget` or no cap reaches PEARL's tree."""
    cap = matched_cap(rv.full, avg.rounds, budget) if rv.full["draft"].shape[1] >= budget else None
    if cap is None:
        return None
    r = avg.rounds.sum()
    mean = lambda name, b: rv.full[name][:, b - 1].sum() / r  # noqa: E731
    boot = (avg.counts @ rv.full["root-draw"][:, cap - 1]) / (avg.counts @ rv.full["pearl"][:, budget - 1]) - 1
    low, high = np.quantile(boot, [avg.tail, 1 - avg.tail])
    gain = mean("root-draw", cap) / mean("pearl", budget) - 1
    return Cap(budget, cap, mean("size:root-draw", cap), mean("size:pearl", budget),
               Estimate(float(gain), float(low), float(high)))


def table_29(rv: RoundValues, avg: Averages) -> list[str]:
    c = lowered_cap(rv, avg)
    if c is None:
        return ["#### Table 29: not given (no root-draw cap reaches PEARL's tree at B = 59 in these pools)", ""]
    return ["#### Table 29: root-draw's cap lowered to the smallest whose mean expected tree reaches PEARL's at "
            "B = 59", "", f"Cap {c.cap}: root-draw's trees hold {c.root_draw_size:.1f} nodes on average against "
            f"PEARL's {c.pearl_size:.1f}; its expected acceptance is {est(c.gain)} over PEARL's at B = 59 (the cap "
            f"held fixed in the resamples).", paper("Table 29"), ""]
