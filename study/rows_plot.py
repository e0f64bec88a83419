"""The retained-row section's figure (the paper's Figure 6): the first draft factor replaced by a retained row or
by the exact root row, gain over draft against the budget, one panel per temperature on one shared scale."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from study.values import Averages  # noqa: E402


def plot_substitution(tables: Sequence[tuple[float, Averages]], names: Sequence[str], path: Path,
                      level: str) -> None:
    """Per temperature (its Averages of the study's values), each of `names`' gain over draft with its
    interval as a band, and root's for reference."""
    fig, axes = plt.subplots(1, len(tables), figsize=(5.2 * len(tables), 4.0), squeeze=False, sharey=True)
    fig.suptitle(f"First draft factor replaced by a retained row: gain over draft (bands: {level} intervals)",
                 fontsize="medium")
    for ax, (temperature, avg) in zip(axes[0], tables):
        budgets = avg.budgets
        for name in (*names, "root"):
            gains = avg.gain(name, "draft")
            ax.plot(budgets, [100 * e.value for e in gains], marker="o", markersize=2.5, label=name,
                    **({"color": "black", "linestyle": "--"} if name == "root" else {}))
            ax.fill_between(budgets, [100 * e.low for e in gains], [100 * e.high for e in gains], alpha=0.15,
                            color=ax.lines[-1].get_color())
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(b) for b in budgets], fontsize="x-small")
        ax.minorticks_off()
        ax.set_xlabel("budget B (tree nodes)")
        ax.set_title(f"T = {temperature:g}: {int(avg.rounds.sum())} rounds, {avg.n_prompts} prompts",
                     fontsize="small")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("expected accepted tokens over draft (%)")
    axes[0, -1].legend(fontsize="x-small", loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
