"""The tree budget of a run that names none (--pick-budget; the embedded pair's default run takes it): the size
whose steady rounds promise the most tokens per second on this machine, from its pass timings (those budget auto
keeps, target_proc.costs: timed at the first start, then kept per machine) and a conservative acceptance by rank
(pipeline.budget.cautious), said in one start line with the costs it used."""

from __future__ import annotations

import dataclasses

from pipeline.budget import MeasuredPasses, candidate_sizes, cautious, costs_for, expected_tokens, steady_budget
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
    budget = steady_budget(costs, cautious(cap), sizes)
    return (dataclasses.replace(run, decode=dataclasses.replace(run.decode, budget=budget)),
            budget_line(budget, measured, sizes))


def budget_line(budget: int, measured: MeasuredPasses, sizes: tuple[int, ...]) -> str:
    """The chosen budget with the costs and the τ it was chosen from, e.g. "budget 4, the most tokens a second
    on this machine: a plain pass 43.8 ms; tree passes of 1, 2, 4, 8 tokens 45.0, 47.1, 52.0, 60.5 ms ...";
    a tree pass with the root's row, as `draft` runs it (the root-pass rules' lack that row)."""
    taus = expected_tokens(cautious(max(sizes)), sizes)
    return (f"budget {budget}, the most tokens a second on this machine: a plain pass {1000 * measured.plain:.1f} ms; "
            f"tree passes of {', '.join(map(str, sizes))} tokens "
            f"{', '.join(f'{1000 * measured.tree_with_root[b]:.1f}' for b in sizes)} ms; a conservative τ of "
            f"{', '.join(f'{t:.2f}' for t in taus)} (pipeline.budget.cautious); --budget N or auto sets it yourself")
