"""The values program's section on selection rules at shared contexts (DESIGN.md section 8; the paper's Table 2,
Figure 2 and Tables 9, 12, 13): each rule's expected accepted tokens per round and per prompt at every budget,
gains over `draft` and of `root-draw` over `pearl`, the share of the oracle's advantage that `root` recovers,
the budgets at which `draft` and `root` reach each other, the draw off the pool, the recording decoder's
agreement with its value, pools cut after each level, and the same by prompt group."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from evaluation.stats import MIN_INTERVAL_PROMPTS
from evaluation.summary import category_group, group_order
from pipeline.config import PoolConfig
from study.values import VALUED, Agreement, Averages, RoundValues, agreement, evaluate, reach
from study.options import ValuesOptions
from study import table_lines, tables
from study.section import ValuesInput, est, pct, share

EMITTED = ("draft", "root", "root-draw", "pearl")  # Table 8 counts the continuation too
FIGURES = ("values.png", "values_draw.png", "values_recovered.png")  # what plots() draws, in its order
SHOWN = ("root", "root-draw", "pearl", "pearl-top1", "oracle", "oracle-draw")  # gains over draft, in this order


@dataclass(frozen=True, slots=True)
class Selection:
    """Every rule's value at every recorded round and its averages, one entry per temperature."""

    data: ValuesInput
    tables: list[RoundValues]
    averages: list[Averages]
    short: dict[float, RoundValues]  # Table 20's run of the same prompts limited to 256 tokens, by temperature

    @property
    def options(self) -> ValuesOptions:
        return self.data.options

    def json_lines(self) -> list[dict]:
        return [line for rv, avg in zip(self.tables, self.averages)
                for line in _json_lines(rv, avg, agreement(rv, self.options.confidence))
                + table_lines.json_lines(rv, avg, self.short.get(rv.temperature))]

    def markdown(self) -> list[str]:
        lines = ["", "## Selection rules at shared contexts", ""]
        for rv, avg in zip(self.tables, self.averages):
            lines += [f"### T = {rv.temperature:g}: {rv.rounds} rounds, {avg.n_prompts} prompts, pools up to "
                      f"{rv.full['draft'].shape[1]} candidates", ""]
            lines += tables.tables(rv, avg, self.short.get(rv.temperature))
            lines += _temperature(rv, avg, agreement(rv, self.options.confidence), self.data.level)
            if self.options.by_category:
                lines += _by_category(rv, self.options, self.data.level)
        return lines

    def headline(self) -> list[str]:
        """The paper's headline figures beside this run's, one column per temperature: the opening screen."""
        cells = [_headline(rv, avg) for rv, avg in zip(self.tables, self.averages)]
        sizes = [pool_candidates(rv) for rv in self.tables]
        lines = [HEADLINE, "",
                 f"| figure | the paper, pools of {PAPER_POOL.size} | " + " | ".join(
                     f"this run, T = {rv.temperature:g}, pools up to {n}" for rv, n in zip(self.tables, sizes))
                 + " |", "|---|---|" + "---|" * len(self.tables)]
        for i, (name, paper) in enumerate(HEADLINE_ROWS):
            lines.append(f"| {name} | {paper} | " + " | ".join(c[i] for c in cells) + " |")
        lines += ["", "Gains and shares in expected accepted tokens per round, with paired prompt-bootstrap "
                      "intervals; the tables below give every figure and the paper's words beside each."]
        if max(sizes, default=PAPER_POOL.size) < PAPER_POOL.size:
            lines += ["", f"Not like with like: this run's pools hold up to {max(sizes)} candidates, the paper's "
                          f"{PAPER_POOL.size}, so a tree of B candidates takes a larger share of this run's pool "
                          f"(at B = 59, {min(59 / max(sizes), 1):.0%} of it against the paper's "
                          f"{59 / PAPER_POOL.size:.0%}) and the rules' trees differ less than the paper's; "
                          f"`--paper-pool` records at the paper's pool."]
        return lines

    def plots(self, out: Path) -> list[str]:
        from study import plots  # matplotlib: only when drawing

        shown = list(zip(self.tables, self.averages))
        for draw, name in zip((plots.plot_depths, plots.plot_draw_rules, plots.plot_recovered), FIGURES):
            draw(shown, out / name)
        return list(FIGURES)


HEADLINE = "## The headline figures beside the paper's"
PAPER_POOL = PoolConfig()  # the paper's pool: topk 10, depth 8, expand 10, 710 candidates


def pool_candidates(rv: RoundValues) -> int:
    """The most candidates a recorded round's pool held."""
    return int(rv.full["draft"].shape[1])
# (figure, the paper's: study.tables.PAPER's Tables 2, 9, 12 and D.13 in brief), in _headline's order.
HEADLINE_ROWS = (("root over draft, B = 8", "larger than at B = 59"),
                 ("root over draft, B = 59", "up to +8.0%"),
                 ("root's share of the oracle's advantage, B = 59", "35-57% (standalone drafters)"),
                 ("root-draw over PEARL, B = 8", "up to +14.2%"),
                 ("root-draw over PEARL, B = 59", "up to +7.0%"),
                 ("the draw X1 off the pool's first level", "9-16% greedy, 11-19% at T = 1"))


def _headline(rv: RoundValues, avg: Averages) -> list[str]:
    """This run's cells of HEADLINE_ROWS at one temperature ("—" at a budget it does not report)."""
    budgets = rv.budgets.tolist()
    root, draw = avg.gain("root", "draft"), avg.gain("root-draw", "pearl")
    recovered = avg.share("root", "draft", "oracle")
    at = lambda figures, b, show=est: show(figures[budgets.index(b)]) if b in budgets else "—"
    off = avg.off_pool_share()
    return [at(root, 8), at(root, 59), at(recovered, 59, share), at(draw, 8), at(draw, 59),
            f"{pct(off.value, 1, sign=False)} [{pct(off.low, 1, sign=False)}, {pct(off.high, 1, sign=False)}]"]


def selection_section(data: ValuesInput) -> Selection:
    """The recorded rounds of `data` -> every rule's value at each round and their averages, by temperature."""
    options = data.options
    values = [with_emitted(rv) for rv in evaluate(data.decodes, options.budget_list, cut_levels=options.cut_levels)]
    short = {rv.temperature: rv for rv in evaluate(data.short, options.budget_list)} if data.short else {}
    return Selection(data, values, [Averages(rv, **data.resampling) for rv in values], short)


def with_emitted(rv: RoundValues) -> RoundValues:
    """`rv` with the emitted tokens of the rules Table 8 shows (`emitted:RULE`: accepted tokens and the
    continuation, value + 1) among its values."""
    emitted = {f"emitted:{rule}": rv.values[rule] + 1 for rule in EMITTED}
    return replace(rv, values={**rv.values, **emitted})


def _json_lines(rv: RoundValues, avg: Averages, agreements: Sequence[Agreement]) -> list[dict]:
    lines = []
    gains = {rule: avg.gain(rule, "draft") for rule in VALUED}
    for rule in VALUED:
        per_round, per_prompt = avg.per_round(rule), avg.per_prompt(rule)
        for k, budget in enumerate(rv.budgets.tolist()):
            g = gains[rule][k]
            lines.append({"kind": "value", "temperature": rv.temperature, "rule": rule, "budget": budget,
                          "rounds": rv.rounds, "prompts": avg.n_prompts, "value_per_round": float(per_round[k]),
                          "value_per_prompt": float(per_prompt[k]), "gain_over_draft": g.value,
                          "gain_low": g.low, "gain_high": g.high})
    for rule, values in rv.by_depth.items():
        means = values.mean(0)  # (D, K)
        for level in range(means.shape[0]):
            for k, budget in enumerate(rv.budgets.tolist()):
                lines.append({"kind": "cut", "temperature": rv.temperature, "rule": rule, "budget": budget,
                              "levels": level + 1, "rounds": rv.rounds, "value_per_round": float(means[level, k])})
    if rv.record_seconds.any():
        lines.append({"kind": "recording", "temperature": rv.temperature, "rounds": rv.rounds,
                      "median_ms": 1000 * float(np.median(rv.record_seconds)),
                      "mean_ms": 1000 * float(rv.record_seconds.mean())})
    for a in agreements:
        lines.append({"kind": "agreement", "temperature": rv.temperature, "decoder": a.decoder, "budget": a.budget,
                      "rounds": a.rounds, "realized_per_round": a.realized, "value_per_round": a.expected,
                      "difference": a.difference.value, "low": a.difference.low, "high": a.difference.high,
                      "disagrees": a.disagrees, "ahead_hit_probability": None if math.isnan(a.ahead) else a.ahead,
                      "ahead_rounds": a.ahead_rounds})
    return lines


def _temperature(rv: RoundValues, avg: Averages, agreements: Sequence[Agreement], level: str) -> list[str]:
    budgets = rv.budgets.tolist()
    head = "| rule | " + " | ".join(f"B = {b}" for b in budgets) + " |"
    rule_line = "|" + "---|" * (len(budgets) + 1)
    out = ["#### Every rule at every budget: expected accepted tokens per round (per prompt below it)", "", head,
           rule_line]
    for rule in VALUED:
        out.append(f"| {rule} | " + " | ".join(f"{v:.3f}" for v in avg.per_round(rule)) + " |")
        out.append("| ↳ per prompt | " + " | ".join(f"{v:.3f}" for v in avg.per_prompt(rule)) + " |")
    out += ["", f"Gain over draft per round, {level} interval (per prompt in the second table).", "",
            "| budget | " + " | ".join(SHOWN) + " | root-draw over pearl |", "|" + "---|" * (len(SHOWN) + 2)]
    for prompt_first in (False, True):
        gains = {rule: avg.gain(rule, "draft", prompt_first=prompt_first) for rule in SHOWN}
        over_pearl = avg.gain("root-draw", "pearl", prompt_first=prompt_first)
        for k, b in enumerate(budgets):
            cells = [est(gains[rule][k]) for rule in SHOWN] + [est(over_pearl[k])]
            out.append(f"| {b}{' (per prompt)' if prompt_first else ''} | " + " | ".join(cells) + " |")
    shares = avg.share("root", "draft", "oracle")
    out += ["", "Share of the oracle's advantage over draft that root recovers: "
            + "; ".join(f"B = {b}: {share(s)}" for b, s in zip(budgets, shares)), ""]
    draft_reach, root_reach = reach(rv.mean_curves, "draft", "root"), reach(rv.mean_curves, "root", "draft")
    out += [f"Budgets (searching every budget up to the pool, {len(rv.mean_curves['draft'])}): draft reaches root's "
            f"value at B = 8 at B = {draft_reach or 'never'}; root reaches draft's value at B = 8 at "
            f"B = {root_reach or 'never'}.", ""]
    if rv.record_seconds.any():
        out += [f"Recording: the measurement pass over a round's pool of {len(rv.mean_curves['draft'])} took a median of "
                f"{1000 * float(np.median(rv.record_seconds)):.1f} ms (mean "
                f"{1000 * float(rv.record_seconds.mean()):.1f} ms), outside the decode's timed phases.", ""]
    out += _cut_table(rv)
    off = avg.off_pool_share()
    out += [f"The draw X1 is off the pool's first level in {pct(off.value, 1, sign=False)} of rounds "
            f"[{pct(off.low, 1, sign=False)}, {pct(off.high, 1, sign=False)}] (expected, from the root row).", ""]
    return out + _agreement(agreements, level)


def _agreement(agreements: Sequence[Agreement], level: str) -> list[str]:
    """The recording decoder's realized acceptance against its value, and drafting ahead's hit probability."""
    if not agreements:
        return []
    out = ["Agreement with the online decoder: its realized accepted tokens per round against its value at "
            "each round's own budget, on the same rounds (normal interval of the mean difference: given its "
            "context, a round's difference has mean zero, so its standard error is sqrt(sum d²) / rounds).", "",
            "| decoder | budget | rounds | realized | value | difference | " + level + " interval | |",
            "|---|---|---|---|---|---|---|---|"]
    for a in agreements:
        d = a.difference
        flag = "**disagrees: a bug in the recording or in the decoder**" if a.disagrees else "agrees"
        out.append(f"| {a.decoder} | {a.budget} | {a.rounds} | {a.realized:.3f} | {a.expected:.3f} | "
                   f"{d.value:+.3f} | [{d.low:+.3f}, {d.high:+.3f}] | {flag} |")
    out.append("")
    out += ["Drafting ahead (`--ahead`): how often its prediction of where a round ends (the draft's greedy "
            "path through the tree, then the drafter's next token) would have been right on these rounds, "
            "from the target's edges along it (rounds whose prediction ends beyond the pool's expanded "
            "candidates are left out).", "", "| decoder | budget | rounds | hit probability |",
            "|---|---|---|---|"]
    out += [f"| {a.decoder} | {a.budget} | {a.ahead_rounds} | "
            + ("—" if math.isnan(a.ahead) else f"{100 * a.ahead:.1f}%") + " |" for a in agreements]
    return out + [""]


def _cut_table(rv: RoundValues) -> list[str]:
    """Expected accepted tokens per round from pools cut after each level (`--cut-pools`), against the whole."""
    if not rv.by_depth:
        return []
    budgets = rv.budgets.tolist()
    picks = [b for b in (8, 59) if b in budgets] or budgets[:1]
    ks = [budgets.index(b) for b in picks]
    means = {rule: v.mean(0) for rule, v in rv.by_depth.items()}  # (D, K)
    head = ["levels"] + [f"{rule} B = {b}" for b in picks for rule in means]
    out = ["Pools cut after a number of levels (what `--cut-pools` sends when the target asks for the pool "
           "then): expected accepted tokens per round, and in brackets the share of the whole pool's tokens per "
           "round (accepted tokens and the continuation, value + 1), which the rounds a second must make up for "
           "(`python -m timing.round_model`).", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    depth = next(iter(means.values())).shape[0]
    for level in range(depth):
        cells = [f"{means[rule][level, k]:.3f} ({(means[rule][level, k] + 1) / (means[rule][-1, k] + 1):.0%})"
                 for k in ks for rule in means]
        out.append(f"| {level + 1} | " + " | ".join(cells) + " |")
    return out + [""]


def _by_category(rv: RoundValues, options: ValuesOptions, level: str) -> list[str]:
    groups = {}
    for i, c in enumerate(rv.categories):
        groups.setdefault(category_group(c), []).append(i)
    budgets = rv.budgets.tolist()
    picks = [b for b in (8, 59) if b in budgets] or budgets[:1]
    head = ["group", "prompts", "rounds"] + [f"root over draft B = {b}" for b in picks] + \
           [f"root-draw over pearl B = {b}" for b in picks] + ["X1 off the pool"]
    out = [f"### T = {rv.temperature:g} by category (per round, {level} intervals)", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in group_order(set(groups)):
        avg = Averages(rv, prompts=np.array(groups[g]), n_resamples=options.resamples,
                       confidence=options.confidence, seed=options.bootstrap_seed)
        root, rd = avg.gain("root", "draft"), avg.gain("root-draw", "pearl")
        ks = [budgets.index(b) for b in picks]
        off = avg.off_pool_share()
        cell = est if avg.n_prompts >= MIN_INTERVAL_PROMPTS else (lambda e: f"{pct(e.value)} (no interval)")
        out.append(f"| {g} | {avg.n_prompts} | {int(avg.rounds.sum())} | " + " | ".join(
            [cell(root[k]) for k in ks] + [cell(rd[k]) for k in ks] + [pct(off.value, 1, sign=False)]) + " |")
    return out + ["", f"No interval below {MIN_INTERVAL_PROMPTS} prompts: a bootstrap over fewer is about the range "
                      "of their values.", ""]


