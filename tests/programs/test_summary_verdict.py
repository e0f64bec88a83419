"""A decode run's summary never contradicts itself: over a grid of made-up settings (gain intervals above,
below and across zero or none; τ above and below what pays; trees of 0, 1 and 8 nodes), no line of the
verdict says what another line, the cautions or the table deny, and plain decoding's work is never called
speculation."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest

from evaluation.cautions import cautions
from evaluation.stats import GainResult
from evaluation.summary import DecoderStats, Setting
from evaluation.verdict import SPEC_BENCH
from pipeline.config import PoolConfig
from pipeline.metrics import RoundStats
from pipeline.rules import RULES
from programs.target_program import print_summary

ROUNDS = 40  # each decoder's rounds over the setting's prompts
AR_SECONDS = 4.0  # ar's seconds over its rounds: 0.1 s a round
INTERVALS = {"none": None, "across": (-0.21, 0.51), "above": (0.05, 0.40), "below": (-0.40, -0.05)}


def stats(decoder: str, *, n: int, tree: float, tau: float, round_cost: float) -> DecoderStats:
    """`decoder` at made-up figures: every round at a tree of `tree` nodes (0: plain rounds), over `n` prompts."""
    size = int(tree)
    plain_tree = size <= (1 if RULES[decoder].root_pass else 0)
    seconds = np.full(n, AR_SECONDS * round_cost / n)
    tokens = np.full(n, tau * ROUNDS / n)
    passes = ROUNDS * (2 if RULES[decoder].root_pass else 1)
    return DecoderStats(decoder, [8], n, tokens, seconds, passes, RoundStats(ROUNDS, tau, float(size), (0.5,) * 3),
                        {size and 8: ROUNDS}, None, prefill=np.zeros(n), bare=ROUNDS if plain_tree else 0,
                        pool_depth=3)


def setting(decoder: str, tree: float, interval: str, gain: float, tau: float, round_cost: float) -> Setting:
    n = 3 if interval == "none" else 8
    low, high = INTERVALS[interval] or (gain - 0.3, gain + 0.3)
    decoders = {"ar": dataclasses.replace(stats("ar", n=n, tree=0, tau=1.0, round_cost=1.0), pool_depth=0),
                decoder: stats(decoder, n=n, tree=tree, tau=tau, round_cost=round_cost)}
    prompts = [f"p/{i}" for i in range(n)]
    s = Setting(0.0, "auto", None, prompts, n, [0], decoders,
                {(decoder, "ar"): GainResult(gain, low, high, 0.1, 1.0, 1.0, n)})
    s.cautions = cautions(decoders, prompts, [(decoder, "ar")])
    return s


def printed(s: Setting, make_record, capsys) -> str:
    print_summary(make_record("p/0", "ar"), s, PoolConfig(topk=10, depth=3, expand=3))
    return capsys.readouterr().out


def contradictions(text: str, decoder: str, plain: bool) -> list[str]:
    """The pairs of claims in a summary's `text` that cannot both hold; `plain`: `decoder` did plain decoding's
    work (no round verified anything beyond the root)."""
    found = []
    verdict = next(line for line in text.splitlines() if line.startswith("verdict:"))
    interval = re.search(r"interval ([-+][\d.]+), ([-+][\d.]+)\]", verdict)
    low = float(interval.group(1)) if interval else None
    called_speculative = "the best speculative decoder" in verdict
    if plain and called_speculative:
        found.append("plain decoding's work called the best speculative decoder")
    if not plain and not called_speculative:
        found.append("a decoder that speculated called plain decoding")
    same_work = [line for line in text.splitlines() if line.startswith("⚠ same work")]
    if plain and not any("every decoder" in line or decoder in line for line in same_work):
        found.append("plain decoding's work without the same-work caution")
    if not plain and same_work:
        found.append("the same-work caution over a decoder that speculated")
    if " paid against ar" in verdict:
        if low is None or low <= 0:
            found.append("paid, without an interval above zero")
        if "(below what pays)" in text:
            found.append("paid, and τ below what pays")
        if "speculation did not pay" in text:
            found.append("paid, and speculation did not pay")
    if "did not pay against ar" in verdict and low is not None and low > 0:
        found.append("did not pay, with an interval above zero")
    if "speculation did not pay" in text and "did not pay against ar" not in verdict:
        found.append("speculation did not pay, below a verdict that does not say so")
    if plain and re.search(r"\bpaid\b", verdict):
        found.append("plain decoding's work said to have paid")
    if "spec-bench:PATH" in text and SPEC_BENCH not in text:
        found.append("spec-bench:PATH with no word of where its file comes from")
    return found


GRID = [(d, tree, i, gain, cost) for d, tree, i, gain, cost in
        itertools.product(("pearl", "root", "draft"), (0, 1, 8), INTERVALS, (-0.2, 0.12, 0.29), (1.5, 2.5))
        if INTERVALS[i] is None or INTERVALS[i][0] <= gain <= INTERVALS[i][1]]  # a gain lies in its own interval


@pytest.mark.parametrize("decoder, tree, interval, gain, round_cost", GRID)
def test_no_two_lines_of_a_summary_contradict(decoder, tree, interval, gain, round_cost, make_record, capsys):
    text = printed(setting(decoder, tree, interval, gain, 2.0, round_cost), make_record, capsys)  # τ 2.00
    plain = tree == 0 or (tree == 1 and RULES[decoder].root_pass)
    assert contradictions(text, decoder, plain) == [], text


def test_a_tree_of_the_draw_alone_is_plain_decoding_not_speculation(make_record, capsys):
    """pearl at budget auto with trees of one node (the target's own draw): one token a target pass, as `ar`."""
    text = printed(setting("pearl", 1, "above", 0.29, 2.0, 1.5), make_record, capsys)
    assert "verdict: plain decoding here" in text and "the best speculative decoder" not in text
    assert "⚠ same work: every decoder ran plain rounds" in text
    assert "is the machine's drift, not speculation" in text


def test_paid_needs_an_interval_above_zero_and_the_tau_that_pays(make_record, capsys):
    across = printed(setting("draft", 8, "across", 0.12, 2.0, 1.5), make_record, capsys)
    assert "draft, the best speculative decoder here, was not shown to pay against ar: +12.0%" in across
    below_cost = printed(setting("draft", 8, "above", 0.29, 2.0, 2.5), make_record, capsys)
    assert "was not shown to pay" in below_cost and "(below what pays)" in below_cost
    paid = printed(setting("draft", 8, "above", 0.29, 2.0, 1.5), make_record, capsys)
    assert "draft, the best speculative decoder here, paid against ar" in paid and "(above what pays)" in paid


def test_the_checker_finds_the_contradictions_it_looks_for():
    said = ("verdict: pearl, the best speculative decoder here, paid against ar: +12.1% [95% interval -21.0, +51.3]\n"
            "  why: a pearl round cost 2.50 plain rounds, so it pays from τ 2.50; it reached τ 2.00 (below what pays)\n"
            "  next: launch/pair.sh more prompts, e.g. --prompts spec-bench:PATH\n")
    assert set(contradictions(said, "pearl", True)) == {
        "plain decoding's work called the best speculative decoder", "plain decoding's work without the same-work "
        "caution", "paid, without an interval above zero", "paid, and τ below what pays",
        "plain decoding's work said to have paid", "spec-bench:PATH with no word of where its file comes from"}


def test_acceptance_beyond_the_pools_depth_is_marked_as_context_lookups_chains(make_record, capsys):
    s = setting("draft", 8, "above", 0.29, 2.0, 1.5)
    s.decoders["draft"] = dataclasses.replace(
        s.decoders["draft"], rounds=RoundStats(ROUNDS, 2.0, 8.0, (0.55, 0.54, 0.67, 1.0, 1.0)))
    text = printed(s, make_record, capsys)
    assert "0.55 0.54 0.67; chains 1.00 1.00" in text
    assert "acceptance by depth beyond the pool's depth (3): only context lookup's chains reach there" in text
