"""The selection tables' JSON lines (study.tables gives them in Markdown): one line per figure and its setting,
every estimate with its interval as `NAME`, `NAME_low` and `NAME_high` (null where not finite).

Kinds: `depth`, `size`, `restricted`, `matched` (Figures 2 and 5, Tables 11 and 12), `draw` (the draw X1),
`emitted` (Table 8), `stronger` (Table 12), `tasks` and `task` (Table 10), `reach` (Table 13), `first-token` and
`entropy-quintile` (Table 15), `late` (Table 20), `held-row` (Table 27) and `cap` (Table 29)."""

from __future__ import annotations

from evaluation.summary import category_group
from pipeline.value import SIZES
from study.section import number
from study.selection import RESTRICTED
from study.splits import QUINTILES, TASK_PAIRS, TaskGains, each_task, first_token_split, task_weighted
from study.covered_rounds import RULES as COVERED_RULES, covered_rounds
from study.tables import (ENDS, LATE, LATE_RULES, late_rounds, lowered_cap, matched, own_budget, reaches,
                          stronger_pearl, table_15_budgets)
from study.values import Averages, Estimate, RoundValues

EMITTED_PAIRS = (("root", "draft"), ("root-draw", "pearl"))  # Table 8's gains in emitted tokens


def json_lines(rv: RoundValues, avg: Averages, short: RoundValues | None = None) -> list[dict]:
    """Every selection table's figures at one temperature, one JSON object each (`short`: Table 20's run of the
    same prompts limited to LATE tokens)."""
    base = {"temperature": rv.temperature, "rounds": rv.rounds}
    lines = _depth(rv, avg, base) + _sizes(rv, avg, base) + _restricted(rv, avg, base) + _matched(rv, avg, base)
    lines += _draw(avg, base) + _emitted(rv, avg, base) + _stronger(rv, avg, base) + _tasks(rv, avg, base)
    lines += _reach(rv, avg, base) + _first_token(rv, avg, base) + _late(rv, avg, base, short) + _held_row(rv, avg, base)
    return lines + _cap(rv, avg, base)


def estimate(name: str, e: Estimate) -> dict:
    """An estimate's three fields: NAME, NAME_low, NAME_high."""
    return {name: number(e.value), f"{name}_low": number(e.low), f"{name}_high": number(e.high)}


def _pair(a: str, b: str) -> str:
    return f"{a}_over_{b}".replace("-", "_")


def _depth(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    lines = []
    for d in range(1, rv.depth + 1):
        name = f"depth-{d}"
        per_round, gains, shares = avg.per_round(name), avg.gain(name, "draft"), avg.share(name, "draft", "oracle")
        for k, b in enumerate(rv.budgets.tolist()):
            lines.append({"kind": "depth", **base, "budget": b, "depth": d, "value_per_round": float(per_round[k]),
                          **estimate("gain_over_draft", gains[k]), **estimate("oracle_share", shares[k])})
    return lines


def _sizes(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    return [{"kind": "size", **base, "rule": rule, "budget": b, **estimate("expected_nodes", e)}
            for rule in SIZES for b, e in zip(rv.budgets.tolist(), avg.mean(f"size:{rule}"))]


def _restricted(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    lines = []
    pool = len(rv.full["draft"][0])
    for m in (*RESTRICTED, *([pool] if pool not in RESTRICTED else [])):  # the whole pool once
        name = (lambda r: r) if m not in RESTRICTED else (lambda r, m=m: f"restricted-{m}:{r}")
        shares = avg.share(name("root"), name("draft"), name("oracle"))
        advantage = avg.mean_difference(name("oracle"), name("draft"))
        for k, b in enumerate(rv.budgets.tolist()):
            lines.append({"kind": "restricted", **base, "candidates": m, "budget": b,
                          **estimate("oracle_advantage", advantage[k]), **estimate("root_share", shares[k])})
    return lines


def _matched(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    return [{"kind": "matched", **base, "budget": b, "baseline": m.baseline, "raised_budget": m.raised,
             "pearl_size": m.pearl_size, "root_draw_size": m.root_draw_size, "gain": m.gain, "gain_low": m.low,
             "gain_high": m.high, "exceeds_share": number(m.exceeds), "top1_draw_share": number(m.top1_share),
             "raised_after_top1": number(m.after_top1), "raised_after_other": number(m.after_other),
             "root_draw_after_top1": number(m.root_draw_after_top1),
             "root_draw_after_other": number(m.root_draw_after_other)}
            for b, m in matched(rv, avg).items()]


def _draw(avg: Averages, base: dict) -> list[dict]:
    return [{"kind": "draw", **base, **estimate("off_pool", avg.off_pool_share()),
             **estimate("top1", avg.mean("draw:top1")[0])}]


def _emitted(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    lines = []
    for a, b in EMITTED_PAIRS:
        mine, theirs = avg.mean(f"emitted:{a}"), avg.mean(f"emitted:{b}")
        gains = avg.gain(f"emitted:{a}", f"emitted:{b}")
        for k, budget in enumerate(rv.budgets.tolist()):
            lines.append({"kind": "emitted", **base, "rule": a, "baseline": b, "budget": budget,
                          **estimate("emitted_per_round", mine[k]),
                          **estimate("baseline_emitted_per_round", theirs[k]), **estimate("gain", gains[k])})
    return lines


def _stronger(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    stronger = stronger_pearl(avg)
    over = {name: avg.gain("root-draw", name) for name in ("pearl", "pearl-top1")}
    top1 = avg.gain("pearl-top1", "pearl")
    return [{"kind": "stronger", **base, "budget": b, "stronger": stronger[k],
             **estimate("root_draw_over_stronger", over[stronger[k]][k]),
             **estimate("root_draw_over_pearl", over["pearl"][k]), **estimate("pearl_top1_over_pearl", top1[k]),
             **{k2: v for rule in ("root-draw", "pearl", "pearl-top1")
                for k2, v in estimate(f"{rule.replace('-', '_')}_nodes", avg.mean(f"size:{rule}")[k]).items()}}
            for k, b in enumerate(rv.budgets.tolist())]


def _tasks(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    def lines(kind: str, t: TaskGains, extra: dict) -> list[dict]:
        out = []
        for k, b in enumerate(rv.budgets.tolist()):
            line = {"kind": kind, **base, "rounds": t.rounds, **extra, "budget": b, "prompts": t.prompts,
                    "resamples": t.resamples}
            for a, c in TASK_PAIRS:
                e = t.gains[a, c][k]
                line.update(estimate(_pair(a, c), e if t.has_interval else Estimate(e.value, float("nan"),
                                                                                   float("nan"))))
            out.append(line)
        return out

    if len({category_group(c) for c in rv.categories}) < 2:  # Table 10 is given over several tasks only
        return []
    out = lines("tasks", task_weighted(rv, avg), {})
    for t in each_task(rv, avg):
        out += lines("task", t, {"task": t.task})
    return out


def _reach(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    n = rv.full["draft"].shape[1]
    lines = []
    for b in (b for b in (8, 59) if b in rv.budgets.tolist()):
        line = {"kind": "reach", **base, "budget": b, "searched": n}
        for (rule, target), (got, low, high) in reaches(rv, avg, b).items():
            name = f"{rule}_reaches_{target}"
            line.update({name: got, f"{name}_low": low, f"{name}_high": high})
        lines.append(line)
    return lines


def _first_token(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    budgets = table_15_budgets(rv)
    lines = []
    for f in first_token_split(rv, avg, budgets) if budgets else []:
        lines.append({"kind": "first-token", **base, "budget": f.budget, **estimate("agreeing", f.agreeing),
                      **estimate("root_gain_share", f.root_gain_share), **estimate("depth_two_share", f.depth_two_share),
                      **estimate("upper_over_lower", f.upper_over_lower), "rises": f.rises})
        for q in range(QUINTILES):
            rise = estimate("rise", f.rise[q - 1]) if q else {"rise": None, "rise_low": None, "rise_high": None}
            lines.append({"kind": "entropy-quintile", **base, "budget": f.budget, "quintile": q + 1,
                          "quintile_rounds": f.quintile_rounds[q], **estimate("root_gain", f.quintile_gain[q]), **rise})
    return lines


def _late(rv: RoundValues, avg: Averages, base: dict, short: RoundValues | None) -> list[dict]:
    t = late_rounds(rv, avg, short)
    if t is None:
        return [{"kind": "late", **base, "from_token": LATE, "late_rounds": 0, "late_prompts": 0}]
    lines = []
    for i, b in enumerate(t.budgets):
        line = {"kind": "late", **base, "budget": b, "from_token": LATE, "late_rounds": t.rounds,
                "late_prompts": t.prompts, "outputs": t.outputs, **{f"{end}_outputs": t.ended[end] for end in ENDS},
                "limit_share": number(t.limit_share), **{f"late_prompts_{end}": t.late_ended[end] for end in ENDS}}
        for rule in LATE_RULES:
            name = _pair(rule, "draft")
            line.update(estimate(f"{name}_late", t.late[rule][i]))
            for end in ENDS:
                line.update(estimate(f"{name}_late_{end}", t.late_by_end[end][rule][i]))
            line.update(estimate(name, t.whole[rule][i]))
            line.update(estimate(f"{name}_before", t.default_length[rule][i]))
            line.update(estimate(f"{name}_whole_less_before", t.whole_less_default[rule][i]))
            if t.short:
                line.update(estimate(f"{name}_short", t.short[rule][i]))
                line.update(estimate(f"{name}_whole_less_short", t.whole_less_short[rule][i]))
        lines.append(line)
    return lines


def _held_row(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    lines = []
    for c in covered_rounds(rv, avg):
        own = own_budget(rv, c.budget)
        for k, b in enumerate(rv.budgets.tolist()):
            line = {"kind": "held-row", **base, "decoder": c.decoder, "recorded_budget": c.budget, "budget": b,
                    "own_budget": b == own, "setting_rounds": c.rounds, "held_rounds": c.held_rounds,
                    **estimate("held_share", c.held_share)}
            for rule in COVERED_RULES:
                line.update(estimate(f"{rule.replace('-', '_')}_value", c.values[rule][k]))
            for rule, gains in c.gains.items():
                line.update(estimate(_pair(rule, "draft"), gains[k]))
            lines.append(line)
    return lines


def _cap(rv: RoundValues, avg: Averages, base: dict) -> list[dict]:
    c = lowered_cap(rv, avg)
    if c is None:
        return []
    return [{"kind": "cap", **base, "budget": c.budget, "cap": c.cap, "root_draw_size": float(c.root_draw_size),
             "pearl_size": float(c.pearl_size), **estimate("gain", c.gain)}]
