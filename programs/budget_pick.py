"""The tree budget of a run that names none (--pick-budget; the embedded pair's default run takes it): the size
whose steady rounds promise the most tokens per second on this machine, from its pass timings (those budget auto
keeps, target_proc.costs: timed at the first start, then kept per machine) and a conservative acceptance by rank
(pipeline.budget.cautious), said in one start line with the costs it used."""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.budget import MARGIN, MeasuredPasses, candidate_sizes, cautious, costs_for, expected_tokens, steady_rates
from pipeline.rules import RULES, SPECULATIVE
from programs.options import RunOptions
from target_proc.session import TargetSession


def pick_budget(session: TargetSession, run: RunOptions) -> tuple[RunOptions, str]:
    """`run` at the budget that pays most here for its speculative decoders together, and the line that says
    which and why; `run` as it is and "" where it has no speculative decoder (or no drafter)."""
    rules = [RULES[d] for d in run.decoder_list if d in SPECULATIVE]
    if not rules or session.drafter is None:
        return run, ""
    cap = run.decode.budget_max  # budget auto's cap: its kept timings serve both
    measured = session.budgets.timings(cap)
    sizes = tuple(b for b in candidate_sizes(cap) if b)
    costs = [costs_for(rule.root_pass, measured, whole_pool=not run.decode.cut_pools) for rule in rules]
    rates = steady_rates(costs, cautious(cap), sizes)
    budget = sizes[int(np.argmax(rates))]  # the smaller size on a tie
    return (dataclasses.replace(run, decode=dataclasses.replace(run.decode, budget=budget)),
            budget_line(budget, measured, sizes, rates))


def budget_line(budget: int, measured: MeasuredPasses, sizes: tuple[int, ...], rates: np.ndarray) -> str:
    """The chosen budget with the costs and the τ it was chosen from and what each size promises, e.g. "budget 4,
    the most tokens a second on this machine: a plain pass 43.8 ms (22.8 tokens a second); tree passes of 1, 2, 4,
    8 tokens 45.0, 47.1, 52.0, 60.5 ms ..."; a tree pass with the root's row, as `draft` runs it (the root-pass
    rules' lack that row, and add the root pass before it)."""
    taus = expected_tokens(cautious(max(sizes)), sizes)
    listed = lambda values, form: ", ".join(form.format(v) for v in values)  # noqa: E731
    return (f"budget {budget}, the most tokens a second on this machine: a plain pass {1000 * measured.plain:.1f} ms "
            f"({1 / measured.plain:.1f} tokens a second); tree passes of {listed(sizes, '{}')} tokens "
            f"{listed((1000 * measured.tree_with_root[b] for b in sizes), '{:.1f}')} ms; at a cautious τ of "
            f"{listed(taus, '{:.2f}')} (pipeline.budget.cautious) rounds of each size promise "
            f"{listed(rates, '{:.1f}')} tokens a second{_no_gain(measured, rates)}; --budget N or auto sets it yourself")


def _no_gain(measured: MeasuredPasses, rates: np.ndarray) -> str:
    """Where no size promises more than plain rounds by budget auto's margin, a clause that says so."""
    if rates.max() > (1 + MARGIN) / measured.plain:
        return ""
    return (f"; at this cautious τ no size promises more than plain rounds here by {100 * MARGIN:.0f}%: the τ the "
            f"rounds reach decides (context lookup's copies are not in it; --budget auto learns it as it decodes)")
