"""The numbers the report's plots draw, from analysed settings: pure functions, no matplotlib.

A round is a tree round when it ran with a budget above 0 (it asked the drafter for a pool) and a plain
round otherwise (`ar`'s rounds, and budget auto's rounds with speculation off)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluation.summary import DecoderStats, Setting
from pipeline.rules import RULES, SPECULATIVE

ROUND_KINDS = ("tree", "plain")


def by_temperature(settings: Sequence[Setting]) -> list[tuple[float, list[Setting]]]:
    """Settings grouped by temperature, in the order given (the report's (T, B) order)."""
    groups: dict[float, list[Setting]] = {}
    for s in settings:
        groups.setdefault(s.temperature, []).append(s)
    return list(groups.items())


def decoder_values(settings: Sequence[Setting], metric: str) -> dict[str, np.ndarray]:
    """metric "speed" (tok/s) or "tau" (tokens per round) -> {decoder: (len(settings),)} with NaN where a
    setting lacks the decoder or has no complete prompt; decoders in the order they first appear."""
    assert metric in ("speed", "tau"), metric
    names = list(dict.fromkeys(d for s in settings for d in s.decoders))
    out = {d: np.full(len(settings), np.nan) for d in names}
    for i, s in enumerate(settings):
        for d, st in s.decoders.items():
            if st.seconds.sum() > 0:
                out[d][i] = st.speed if metric == "speed" else st.rounds.tau
    return out


def plain_only(settings: Sequence[Setting]) -> dict[str, np.ndarray]:
    """{decoder: (len(settings),) bool}: where it ran plain rounds only, so that its τ is 1 by construction."""
    names = list(dict.fromkeys(d for s in settings for d in s.decoders))
    return {d: np.array([d in s.decoders and plain_rounds_only(s.decoders[d]) for s in settings]) for d in names}


def plain_rounds_only(stats: DecoderStats) -> bool:
    return len(stats.chosen) > 0 and not stats.chosen.any()


def gain_marks(s: Setting) -> dict[tuple[str, str], str]:
    """(a, b) -> the kinds of the cautions that concern that gain, comma-separated ("" for none)."""
    return {pair: ", ".join(c.kind for c in s.cautions if c.concerns(pair)) for pair in s.gains}


def by_construction(decoder: str) -> bool:
    """Whether every tree round of `decoder` accepts a node at depth 1 by construction (its tree holds the
    target's own draw X1)."""
    return decoder in RULES and RULES[decoder].draw_in_tree


def informative(panels: list) -> list:
    """The panels of tree sizes that say something: those where some series verified a tree (a panel whose
    every series ran plain rounds only is one bar at 0 each, which the budget shares' table says already)."""
    return [(title, series) for title, series in panels if any(st.tree_sizes.any() for _, st in series)]


def tree_rounds(stats: DecoderStats) -> np.ndarray:
    """(n_rounds,) bool: the rounds that ran with a tree budget."""
    return stats.chosen > 0


def acceptance_at_least(stats: DecoderStats, depth: int | None = None) -> np.ndarray:
    """(depth,) share of tree rounds that accepted at least d tree tokens, d = 1..depth (default: the most
    any tree round accepted); empty when the decoder ran no tree round."""
    accepted = stats.accepted[tree_rounds(stats)]
    if accepted.size == 0:
        return np.zeros(0)
    depth = int(accepted.max()) if depth is None else depth
    d = np.arange(1, depth + 1)
    return (accepted[None, :] >= d[:, None]).mean(axis=1)  # (depth,)


def tree_size_shares(stats: DecoderStats) -> dict[int, float]:
    """Share of all rounds at each tree size (nodes verified; 0: no tree pass), smallest first."""
    values, counts = np.unique(stats.tree_sizes.astype(np.int64), return_counts=True)
    return {int(v): float(c / counts.sum()) for v, c in zip(values, counts)}


def phase_profile(stats: DecoderStats) -> dict[str, tuple[int, np.ndarray]]:
    """Per round kind present ("tree", "plain"): (rounds, (len(PHASES),) median seconds of each phase over
    those rounds). Draft is the drafter's time, concurrent with root; the others follow one another."""
    tree = tree_rounds(stats)
    out = {}
    for kind, mask in zip(ROUND_KINDS, (tree, ~tree)):
        if mask.any():
            out[kind] = (int(mask.sum()), np.median(stats.phases[mask], axis=0))
    return out


# Panels: (title, [(label, item)]), one plot's axes each; a plot with no panel is not drawn.

def speed_panels(settings: Sequence[Setting]) -> list[tuple[str, list[tuple[str, Setting]]]]:
    """Speed and τ by decoder and setting: a panel per temperature, a group per budget."""
    return [(f"T = {t:g}", [(f"B = {s.budget}", s) for s in group if s.prompt_ids])
            for t, group in by_temperature(settings) if any(s.prompt_ids for s in group)]


def category_speed_panels(settings: Sequence[Setting], by_category: dict[str, list[Setting]]):
    """The same by prompt category: a panel per setting, a group per category."""
    panels = [(s.label, [(c.category, c) for c in by_category.get(s.label, []) if c.prompt_ids]) for s in settings]
    return [(title, groups) for title, groups in panels if groups]


def decoder_panels(settings: Sequence[Setting], keep) -> list[tuple[str, list[tuple[str, DecoderStats]]]]:
    """A panel per setting, a series per decoder for which keep(stats) holds."""
    panels = [(s.label, [(d, st) for d, st in s.decoders.items() if s.prompt_ids and keep(st)]) for s in settings]
    return [(title, series) for title, series in panels if series]


def category_panels(settings: Sequence[Setting], by_category: dict[str, list[Setting]], keep):
    """A panel per setting and decoder, a series per category for which keep(stats) holds."""
    panels = []
    for s in settings:
        cats = [c for c in by_category.get(s.label, []) if c.prompt_ids]
        for d in dict.fromkeys(d for c in cats for d in c.decoders):
            series = [(c.category, c.decoders[d]) for c in cats if d in c.decoders and keep(c.decoders[d])]
            if series:
                panels.append((f"{s.label}, {d}", series))
    return panels


def has_acceptance(stats: DecoderStats) -> bool:
    """Tree rounds whose acceptance says something: not those of a rule whose trees all held the target's
    draw alone (budget 1 of a draw rule), which accept it and nothing more by construction."""
    tree = tree_rounds(stats)
    return bool(tree.any()) and not (by_construction(stats.decoder) and stats.tree_sizes[tree].max() <= 1)


def ran_auto(stats: DecoderStats) -> bool:
    """A decoder that may speculate, run with budget auto (`ar` under auto runs plain rounds only)."""
    return "auto" in stats.budgets and stats.decoder in SPECULATIVE


def has_rounds(stats: DecoderStats) -> bool:
    return len(stats.chosen) > 0
