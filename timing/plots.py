"""The report's PNG plots, drawn from the numbers timing.figures computes: gains with their intervals, a
timeline of median rounds, speed and τ, acceptance by depth, tree sizes under budget auto, and where a
round's time goes."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.stats import MIN_INTERVAL_PROMPTS  # noqa: E402
from evaluation.summary import Setting, median_rounds  # noqa: E402
from pipeline.result import PHASES  # noqa: E402
from pipeline.rules import DECODERS  # noqa: E402
from timing import figures  # noqa: E402

COLORS = {"draft": "#8c8c8c", "root": "#1f77b4", "wait": "#d9d9d9", "select": "#ff7f0e", "tree": "#2ca02c",
          "commit": "#9467bd", "plain": "#17becf"}
# What each colour stands for, said in the legends.
PHASE_NAMES = {"draft": "drafting (drafter)", "root": "root pass", "wait": "wait for the drafter",
               "select": "select the tree", "tree": "tree pass", "commit": "commit", "plain": "plain round's pass"}
DECODER_COLORS = {d: plt.get_cmap("tab10")(i) for i, d in enumerate(DECODERS)}


def plot_gains(settings: Sequence[Setting], path: Path, confidence: float = 0.95) -> bool:
    """A panel per comparison: its gain at each setting, with its interval where there is one (from
    MIN_INTERVAL_PROMPTS prompts on) and an open marker where there is none; a gain a caution concerns
    (evaluation.cautions: the same work, spread timings, load) is a cross, its caution named under it
    -> False when no setting has a gain."""
    shown = [s for s in settings if s.gains]
    if not shown:
        return False
    pairs = list(dict.fromkeys(p for s in shown for p in s.gains))
    fig, axes = _panel_grid(len(pairs), max(4.0, 1.2 * len(shown) + 1.2), 3.9)
    for ax, pair in zip(axes.flat, pairs):
        points = [(s, s.gains[pair], figures.gain_marks(s)[pair]) for s in shown if pair in s.gains]
        for x, (s, g, marks) in enumerate(points):
            color = "#8c8c8c" if marks else DECODER_COLORS.get(pair[0])
            if g.has_interval:
                ax.errorbar([x], [100 * g.gain], yerr=[[100 * (g.gain - g.low)], [100 * (g.high - g.gain)]],
                            fmt="none", capsize=4, color=color)
            ax.plot([x], [100 * g.gain], "x" if marks else "o", color=color, markersize=7,
                    markerfacecolor=color if g.has_interval else "white")
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(points)), [_gain_tick(s, g, marks) for s, g, marks in points], fontsize="x-small")
        ax.set_xlim(-0.6, len(points) - 0.4)
        ax.set_title(f"{pair[0]} over {pair[1]}", fontsize="medium")
        ax.set_ylabel("speed gain (%)", fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    _hide_unused(axes, len(pairs))
    bottom = _caption(fig, f"bars: {confidence:.0%} paired bootstrap interval over prompts; open circle: fewer than "
                           f"{MIN_INTERVAL_PROMPTS} prompts, no interval; ×: a caution of report.md says the gain "
                           f"measures the machine")
    return _save(fig, path, bottom=bottom)


def _gain_tick(s: Setting, g, marks: str) -> str:
    lines = [f"T={s.temperature:g} B={s.budget}", f"{g.n_prompts} prompts"] + ([] if g.has_interval else
                                                                               ["no interval"])
    return "\n".join(lines + [f"⚠ {m}" for m in marks.split(", ") if m])


def plot_timeline(settings: Sequence[Setting], decoder: str, path: Path, k: int = 3) -> bool:
    """Per setting, k rounds nearest the median round time of `decoder` (and draft's median round): the drafter's lane
    against the target's phases, both from the round's start -> False if nothing to draw.
    A round starts when the target sends the last round's tokens: the drafter begins growing the pool and the target its
    root pass, so overlapping bars show how much of the drafting the root pass hides."""
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
    drawn = set()  # the colours drawn, so that the legend names only those
    for ax, (s, lanes) in zip(axes[:, 0], panels):
        ax.tick_params(labelbottom=True)  # a shared scale, read on every panel
        labels = []
        for i, (name, row) in enumerate(lanes):
            y = 2 * (len(lanes) - 1 - i)
            ms = 1000 * row
            plain = not np.any(ms[[PHASES.index(p) for p in ("draft", "wait", "select", "tree")]])
            if ms[0] > 0:  # a plain round (budget auto's 0) asks the drafter for nothing: no drafter lane
                ax.barh(y + 1, ms[0], left=0, height=0.8, color=COLORS["draft"])
                labels.append((y + 1, f"{name} drafter"))
                drawn.add("draft")
            left = 0.0
            for j, phase in enumerate(PHASES[1:], 1):
                color = "plain" if plain and phase == "root" else phase
                ax.barh(y, ms[j], left=left, height=0.8, color=COLORS[color])
                left += ms[j]
                drawn |= {color} if ms[j] > 0 else set()
            labels.append((y, f"{name} target" + (" (plain)" if plain else "")))
        ax.set_yticks([y for y, _ in labels], [t for _, t in labels], fontsize="small")
        shown = lanes[0][0].split(" #")[0]
        ax.set_title(f"{s.label}: #1-#{k} are {shown}'s {k} rounds nearest its median round time, in the order "
                     "they ran", fontsize="small")
    axes[-1, 0].set_xlabel("ms from the round's start (drafter and target start together)")
    top = 1 - 0.5 / height
    _phase_legend(fig, [p for p in (*PHASES, "plain") if p in drawn])
    return _save(fig, path, top)


def _phase_legend(fig, names: Sequence[str]) -> None:
    """The phases' colours, named, in a row above the panels (leave the figure's top free for it)."""
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[p]) for p in names]
    fig.legend(handles, [PHASE_NAMES[p] for p in names], loc="upper center", bbox_to_anchor=(0.5, 1.0),
               ncol=4, fontsize="x-small", frameon=False)


CAPTION_CHARS_PER_INCH = 15  # x-small characters an inch of the figure holds, with room to spare


def _caption(fig, text: str) -> float:
    """Write `text` under the panels, each of its lines wrapped to the figure's width so that none runs past
    its edges -> the share of the figure's height the caption takes, for the panels' layout to leave free."""
    width = max(20, int(CAPTION_CHARS_PER_INCH * fig.get_figwidth()))
    lines = [wrapped for line in text.split("\n") for wrapped in textwrap.wrap(line, width)]
    fig.text(0.5, 0.005, "\n".join(lines), ha="center", va="bottom", fontsize="x-small")
    return (0.1 + 0.13 * len(lines) + 0.05) / fig.get_figheight()


def _save(fig, path: Path, top: float = 1.0, bottom: float = 0.0) -> bool:
    fig.tight_layout(rect=(0, bottom, 1, top))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_speed(panels, path: Path) -> bool:
    """Speed (tok/s) and τ (tokens per round) by decoder: a row per panel of timing.figures' speed panels,
    bars per decoder in each group, hatched where τ is 1 by construction (plain rounds only), a group marked
    ⚠ where a caution concerns its gains -> False with no panel. Speeds are summed tokens over summed
    seconds and carry no interval: the gains' intervals are in gains.png."""
    if not panels:
        return False
    groups = max(len(g) for _, g in panels)
    names = list(dict.fromkeys(d for _, g in panels for _, s in g for d in s.decoders))
    width = max(4.0, 0.35 * groups * len(names) + 1.5)
    height = 2.9 * len(panels) + 0.85
    fig, axes = plt.subplots(len(panels), 2, figsize=(2 * width, height), squeeze=False)
    for (title, g), row in zip(panels, axes):
        settings = [s for _, s in g]
        labels = [label + (" ⚠" if s.cautions else "") for label, s in g]
        for ax, metric, unit in zip(row, ("speed", "tau"), ("tokens per second", "τ, tokens per round")):
            values = figures.decoder_values(settings, metric)
            _grouped_bars(ax, labels, values, figures.plain_only(settings) if metric == "tau" else None)
            ax.set_ylabel(unit, fontsize="small")
            ax.set_title(f"{title}: {'speed' if metric == 'speed' else 'τ'}", fontsize="medium")
    _decoder_legend(fig, names)
    bottom = _caption(fig, "speed: summed tokens over summed seconds, no interval (the gains' are in gains.png)\n"
                           "hatched: τ = 1 by construction (plain rounds only); ⚠: a caution in report.md")
    return _save(fig, path, 1 - 0.4 / height, bottom)


def plot_acceptance(panels, path: Path) -> bool:
    """Per panel, each series' share of tree rounds that accepted at least d tree tokens against d; an open
    marker at d = 1 where that share is 100% by construction (a rule whose tree holds the target's draw)."""
    if not panels:
        return False
    fig, axes = _panel_grid(len(panels), 4.2, 3.4)
    for ax, (title, series) in zip(axes.flat, panels):
        depth = max(1, *(int(st.accepted[figures.tree_rounds(st)].max()) for _, st in series))  # 0% shown at d = 1
        d = np.arange(1, depth + 1)
        for label, st in series:
            share = 100 * figures.acceptance_at_least(st, depth)
            rounds = int(figures.tree_rounds(st).sum())
            (line,) = ax.plot(d, share, marker="o", markersize=3,
                              label=f"{label} ({rounds} tree round{'s' * (rounds != 1)})",
                              color=DECODER_COLORS.get(label))
            if figures.by_construction(st.decoder):
                ax.plot(d[:1], share[:1], "o", markersize=8, color=line.get_color(), markerfacecolor="white")
        ax.set_xticks(d)
        ax.set_ylim(0, 105)
        _mark_chains(ax, max(st.pool_depth for _, st in series), depth)
        ax.set_xlabel("d, tree tokens accepted (bonus token not counted)", fontsize="small")
        ax.set_ylabel("tree rounds accepting ≥ d (%)", fontsize="small")
        ax.set_title(title, fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    _hide_unused(axes, len(panels))
    notes = (["open circle: 100% by construction (the tree holds the target's own draw X1, which every tree round "
              "accepts)"] if any(figures.by_construction(st.decoder) for _, series in panels for _, st in series)
             else []) + (["shaded: depths beyond the deepest pool the drafter sent, which only context lookup's "
                          "chains reach"] if any(st.pool_depth for _, series in panels for _, st in series) else [])
    return _save(fig, path, bottom=_caption(fig, "\n".join(notes)) if notes else 0.0)


def _mark_chains(ax, pool_depth: int, depth: int) -> None:
    """Shade the depths beyond the deepest pool the drafter sent: only context lookup's chains reach them."""
    if 0 < pool_depth < depth:
        ax.axvspan(pool_depth + 0.5, depth + 0.5, color="0.9", zorder=0)
        ax.text(pool_depth + 0.6, 102, "context lookup's chains", fontsize="x-small", va="top")


TREE_SIZE_NOTE = ("tree size: the nodes a round verified; report.md's table gives the budgets budget auto chose, "
                  "which a tree can fall short of (a pool or a rule's tree with fewer nodes)")
FEW_ROUNDS = 2  # a phases row resting on this many rounds or fewer is flagged: its medians are one or two rounds'


def plot_tree_sizes(panels, path: Path) -> bool:
    """Per panel, each series' share of rounds at each tree size (0: a plain round or no tree pass)."""
    if not panels:
        return False
    fig, axes = _panel_grid(len(panels), 5.0, 3.2)
    for ax, (title, series) in zip(axes.flat, panels):
        shares = [figures.tree_size_shares(st) for _, st in series]
        sizes = sorted({k for sh in shares for k in sh})
        percent = {label: 100 * np.array([sh.get(k, 0.0) for k in sizes]) for (label, _), sh in zip(series, shares)}
        _grouped_bars(ax, [str(k) for k in sizes], percent)
        ax.set_xlabel("tree size (nodes verified; 0: a plain round or no tree pass)", fontsize="small")
        ax.set_ylabel("rounds (%)", fontsize="small")
        ax.set_title(title, fontsize="medium")
        ax.legend(fontsize="x-small")
    _hide_unused(axes, len(panels))
    return _save(fig, path, bottom=_caption(fig, TREE_SIZE_NOTE))


def plot_phases(panels, path: Path) -> bool:
    """Per panel, a row per series and round kind: the target's median phases stacked, and below them the
    drafter's median drafting, which runs beside the root pass; a row of FEW_ROUNDS rounds or fewer is
    flagged, with a note saying why."""
    rows = [[(f"{label}, {kind} rounds ({n})" + (" ⚠ few" if n <= FEW_ROUNDS else ""), kind, ms, n)
             for label, st in series for kind, (n, ms) in figures.phase_profile(st).items()] for _, series in panels]
    if not any(rows):
        return False
    cols = 2 if len(panels) > 1 else 1
    heights = [0.4 * max(len(r) for r in rows[i:i + cols]) + 0.8 for i in range(0, len(rows), cols)]
    fig, axes = plt.subplots(len(heights), cols, figsize=(7.0 * cols, sum(heights) + 0.6), squeeze=False,
                             sharex=True, gridspec_kw={"height_ratios": heights})  # one ms scale
    for ax, (title, _), lanes in zip(axes.flat, panels, rows):
        for i, (label, kind, seconds, _) in enumerate(lanes):
            y, ms = len(lanes) - 1 - i, 1000 * seconds
            ax.barh(y - 0.3, ms[0], height=0.25, color=COLORS["draft"])
            left = 0.0
            for j, phase in enumerate(PHASES[1:], 1):
                color = COLORS["plain" if kind == "plain" and phase == "root" else phase]
                ax.barh(y + 0.1, ms[j], left=left, height=0.5, color=color)
                left += ms[j]
        ax.set_yticks(range(len(lanes)), [label for label, *_ in reversed(lanes)], fontsize="x-small")
        ax.set_title(title, fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("median ms per round, each phase over the rounds of its row", fontsize="small")
    _hide_unused(axes, len(panels))
    _phase_legend(fig, [*PHASES, "plain"])
    few = any(n <= FEW_ROUNDS for lanes in rows for *_, n in lanes)
    bottom = _caption(fig, f"⚠ few: a row resting on {FEW_ROUNDS} rounds or fewer, whose medians are those rounds' "
                           f"own") if few else 0.0
    return _save(fig, path, 1 - 0.6 / (sum(heights) + 0.6), bottom)


def _grouped_bars(ax, groups: Sequence[str], values: dict[str, np.ndarray],
                  hatched: dict[str, np.ndarray] | None = None) -> None:
    """values: {series: (len(groups),)}, NaN where a group lacks the series; hatched: {series: (len(groups),)
    bool}, the bars that hold by construction."""
    width = 0.8 / max(1, len(values))
    for j, (name, ys) in enumerate(values.items()):
        xs = np.arange(len(groups)) - 0.4 + width * (j + 0.5)
        bars = ax.bar(xs, np.nan_to_num(ys), width=width, label=name, color=DECODER_COLORS.get(name))
        for bar, mark in zip(bars, (hatched or {}).get(name, np.zeros(len(groups), bool))):
            if mark:
                bar.set_hatch("//")
                bar.set_edgecolor("white")
    ax.set_xticks(range(len(groups)), groups, fontsize="x-small")
    ax.grid(axis="y", alpha=0.3)


def _decoder_legend(fig, names: Sequence[str]) -> None:
    handles = [plt.Rectangle((0, 0), 1, 1, color=DECODER_COLORS.get(d)) for d in names]
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=len(names), fontsize="small",
               frameon=False)


def _panel_grid(n: int, width: float, height: float):
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    return fig, axes


def _hide_unused(axes, used: int) -> None:
    for ax in axes.flat[used:]:
        ax.set_visible(False)
