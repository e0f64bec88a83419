"""The values program's figures: the paper's Figure 2 (every depth of exact probabilities, with the oracle as the
ceiling of fixed trees), the draw rules against their own ceiling, and Figure 5 (the share of the oracle's
advantage recovered), one panel per temperature on one shared scale."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from study.values import Averages, RoundValues  # noqa: E402

DRAW_RULES = ("root-draw", "pearl", "pearl-top1")  # their ceiling: oracle-draw (X1 counted, as they count it)
DRAW_YLABEL = "expected accepted tokens over draft (%),\nX1 counted as accepted (every round of theirs is)"


def _panels(tables: Sequence[tuple[RoundValues, Averages]], title: str):
    fig, axes = plt.subplots(1, len(tables), figsize=(5.2 * len(tables), 4.0), squeeze=False, sharey=True)
    fig.suptitle(textwrap.fill(title, int(14 * fig.get_figwidth())), fontsize="medium")  # one panel: narrow
    for ax, (rv, avg) in zip(axes[0], tables):
        budgets = avg.budgets
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(b) for b in budgets], fontsize="x-small")
        ax.minorticks_off()
        ax.set_xlabel("budget B (tree nodes)")
        ax.set_title(f"T = {rv.temperature:g}: {rv.rounds} rounds, {avg.n_prompts} prompts", fontsize="small")
        ax.grid(alpha=0.3)
    return fig, axes[0]


def _line(ax, budgets, estimates, label: str, band: bool, **style) -> None:
    ax.plot(budgets, [100 * e.value for e in estimates], marker="o", markersize=2.5, label=label, **style)
    if band:
        ax.fill_between(budgets, [100 * e.low for e in estimates], [100 * e.high for e in estimates], alpha=0.15,
                        color=ax.lines[-1].get_color())


def _save(fig, axes, path: Path, ylabel: str) -> None:
    axes[0].set_ylabel(ylabel)
    for ax in axes:
        ax.axhline(0.0, color="black", linewidth=0.8)
    axes[-1].legend(fontsize="x-small", loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_depths(tables: Sequence[tuple[RoundValues, Averages]], path: Path) -> None:
    """Figure 2: each depth d's gain over draft against the budget (d = 1 is root; the deepest, the oracle)."""
    fig, axes = _panels(tables, "Exact target probabilities for the first d factors of every path: gain over draft "
                                "(bands: 95% intervals of d = 1 and the oracle)")
    cmap = plt.get_cmap("viridis")
    for ax, (rv, avg) in zip(axes, tables):
        for d in range(1, rv.depth + 1):
            label = "d = 1 (root)" if d == 1 else f"d = {d} (oracle)" if d == rv.depth else f"d = {d}"
            oracle = d == rv.depth
            _line(ax, avg.budgets, avg.gain(f"depth-{d}", "draft"), label, band=d in (1, rv.depth),
                  color="black" if oracle else cmap((d - 1) / max(1, rv.depth - 1) * 0.85),
                  linestyle="--" if oracle else "-")
    _save(fig, axes, path, "expected accepted tokens over draft (%)")


def plot_draw_rules(tables: Sequence[tuple[RoundValues, Averages]], path: Path) -> None:
    """The rules that draw X1 first, over draft, against their ceiling oracle-draw, each with its band; their
    accepted tokens count X1 (which every one of their rounds accepts), and the axis says so."""
    fig, axes = _panels(tables, "Rules that draw the first token from the root row, over draft, and their ceiling "
                                "(bands: 95% intervals)")
    for ax, (rv, avg) in zip(axes, tables):
        for rule in DRAW_RULES:
            _line(ax, avg.budgets, avg.gain(rule, "draft"), rule, band=True)
        _line(ax, avg.budgets, avg.gain("oracle-draw", "draft"), "oracle-draw (their ceiling)", band=True,
              color="black", linestyle="--")
    _save(fig, axes, path, DRAW_YLABEL)


def plot_recovered(tables: Sequence[tuple[RoundValues, Averages]], path: Path) -> None:
    """Figure 5: the share of the oracle's advantage over draft that d = 1 (root) and d = 2 recover."""
    fig, axes = _panels(tables, "Share of the oracle's advantage over draft recovered (bands: 95% intervals)")
    for ax, (rv, avg) in zip(axes, tables):
        for d in (1, 2):
            if d <= rv.depth:
                _line(ax, avg.budgets, avg.share(f"depth-{d}", "draft", "oracle"),
                      "root (d = 1)" if d == 1 else "d = 2", band=True)
        ax.set_ylim(-5, 105)
    _save(fig, axes, path, "share of the oracle's advantage (%)")
