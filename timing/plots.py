"""The report's PNG plots: gains with their intervals, and a timeline of median rounds per setting."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.summary import Setting, median_rounds  # noqa: E402
from pipeline.result import PHASES  # noqa: E402

COLORS = {"draft": "#8c8c8c", "root": "#1f77b4", "wait": "#d9d9d9", "select": "#ff7f0e", "tree": "#2ca02c",
          "commit": "#9467bd", "plain": "#17becf"}


def plot_gains(settings: Sequence[Setting], path: Path) -> bool:
    """Each gain with its interval, grouped by setting -> False when no setting has a gain."""
    shown = [s for s in settings if s.gains]
    if not shown:
        return False
    pairs = list(dict.fromkeys(p for s in shown for p in s.gains))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(shown) * max(1, len(pairs)) ** 0.5), 4.0))
    width = 0.8 / len(pairs)
    for j, pair in enumerate(pairs):
        xs, ys, lo, hi = [], [], [], []
        for i, s in enumerate(shown):
            if pair in s.gains:
                g = s.gains[pair]
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(100 * g.gain)
                lo.append(100 * (g.gain - g.low) if g.has_interval else 0.0)  # too few prompts: no bar
                hi.append(100 * (g.high - g.gain) if g.has_interval else 0.0)
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=4, label=f"{pair[0]} over {pair[1]}")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shown)), [f"{s.label}\n({len(s.prompt_ids)} prompts)" for s in shown])
    ax.set_ylabel("speed gain (%), 95% interval")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_timeline(settings: Sequence[Setting], decoder: str, path: Path, k: int = 3) -> bool:
    """Per setting, k rounds nearest the median round time of `decoder` (and draft's median round):
    the drafter's lane against the target's phases, both from the round's start -> False if nothing to draw.

    A round starts when the target sends the last round's tokens: the drafter begins growing the pool and
    the target its root pass, so overlapping bars show how much of the drafting the root pass hides.
    """
    panels = []
    for s in settings:
        shown = decoder if decoder in s.decoders else next(iter(s.decoders), None)
        if shown is None:
            continue
        lanes = [(f"{shown} #{i + 1}", row) for i, row in enumerate(median_rounds(s.decoders[shown], k))]
        if shown != "draft" and "draft" in s.decoders:
            lanes += [("draft", row) for row in median_rounds(s.decoders["draft"], 1)]
        if lanes:
            panels.append((s, lanes))
    if not panels:
        return False
    height = 0.2 + 0.75 * sum(len(lanes) for _, lanes in panels) + 0.6 * len(panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.0, height), squeeze=False, sharex=True)  # one ms scale
    for ax, (s, lanes) in zip(axes[:, 0], panels):
        labels = []
        for i, (name, row) in enumerate(lanes):
            y = 2 * (len(lanes) - 1 - i)
            ms = 1000 * row
            plain = not np.any(ms[[PHASES.index(p) for p in ("draft", "wait", "select", "tree")]])
            if ms[0] > 0:  # a plain round (budget auto's 0) asks the drafter for nothing: no drafter lane
                ax.barh(y + 1, ms[0], left=0, height=0.8, color=COLORS["draft"])
                labels.append((y + 1, f"{name} drafter"))
            left = 0.0
            for j, phase in enumerate(PHASES[1:], 1):
                ax.barh(y, ms[j], left=left, height=0.8, color=COLORS["plain" if plain and phase == "root" else phase])
                left += ms[j]
            labels.append((y, f"{name} target" + (" (plain)" if plain else "")))
        ax.set_yticks([y for y, _ in labels], [t for _, t in labels], fontsize="small")
        ax.set_title(f"{s.label}: #1-#{k}, the rounds nearest the median round time", fontsize="medium")
        ax.set_xlabel("ms from the round's start")
    names = [*PHASES, "plain"]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[p]) for p in names]
    fig.legend(handles, names, loc="upper right", ncol=len(names), fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_value_gains(tables, path: Path, rules=("root", "root-draw", "oracle")) -> None:
    """Per temperature, each rule's value gain over draft (per round) against the budget, with its interval
    as a band (the paper's Figure 2). tables: (temperature, evaluation.values.Averages) pairs."""
    fig, axes = plt.subplots(1, len(tables), figsize=(5.0 * len(tables), 3.8), squeeze=False)
    for ax, (temperature, avg) in zip(axes[0], tables):
        budgets = avg.budgets
        for rule in rules:
            est = avg.gain(rule, "draft")
            ax.plot(budgets, [100 * e.value for e in est], marker="o", markersize=3, label=rule)
            ax.fill_between(budgets, [100 * e.low for e in est], [100 * e.high for e in est], alpha=0.2)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(b) for b in budgets], fontsize="x-small")
        ax.minorticks_off()
        ax.set_xlabel("budget B (tree nodes)")
        ax.set_ylabel("expected accepted tokens over draft (%)")
        ax.set_title(f"T = {temperature:g}: {int(avg.rounds.sum())} rounds, {avg.n_prompts} prompts", fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
