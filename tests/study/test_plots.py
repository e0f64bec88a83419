"""The values program's figures, read on their matplotlib objects."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from study import plots
from study.values import Estimate


def test_the_draw_rules_figure_says_x1_is_counted_and_bands_every_line(monkeypatch, tmp_path):
    kept = {}
    monkeypatch.setattr(plots, "_save", lambda fig, axes, path, ylabel: kept.update(fig=fig, axes=axes, ylabel=ylabel))
    avg = SimpleNamespace(budgets=np.array([1, 8]), n_prompts=5,
                          gain=lambda a, b: [Estimate(0.1, 0.05, 0.15), Estimate(0.2, 0.1, 0.3)])
    plots.plot_draw_rules([(SimpleNamespace(temperature=0.0, rounds=10), avg)], tmp_path / "values_draw.png")
    ax = kept["axes"][0]
    assert "X1 counted as accepted" in kept["ylabel"]
    assert [line.get_label() for line in ax.lines] == [*plots.DRAW_RULES, "oracle-draw (their ceiling)"]
    assert len(ax.collections) == len(ax.lines)  # a band for every line, the ceiling's included
    plots.plt.close(kept["fig"])
