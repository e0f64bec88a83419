"""bench.reach: each round's pool walked along the greedy output, the bound it gives, and the run end to end on
the mock pair."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import reach
from bench.reach import ReachOptions, round_reaches, summarize
from pipeline.config import ConfigError
from pipeline.pool import ROOT, Pool


def chain_pool(*tokens: int) -> Pool:
    """One path below the root, and a sibling (token 99) of its first candidate."""
    n = len(tokens)
    return Pool.from_edges([*tokens, 99], [ROOT, *range(n - 1), ROOT], np.log(np.full(n + 1, 0.5)),
                           [True] * (n - 1) + [False, False])


def test_each_round_stands_where_the_rounds_before_it_left_the_output():
    output = [1, 2, 3, 4, 5, 6, 7]
    kept = [(chain_pool(1, 2, 9), 3, False),  # reaches 2, emitted 1, 2 and the continuation 3
            (chain_pool(7, 7), 1, False),  # at 4: reaches nothing, emitted 4 alone
            (chain_pool(5, 6, 7, 8), 3, False)]  # at 5: reaches 5, 6, 7, the output's end
    rows = round_reaches(kept, output, first_free=False)
    assert [(r.tokens, r.bound, r.first_rank) for r in rows] == [(3, 3, 1), (1, 1, 0), (3, 3, 1)]
    s = summarize(rows)
    assert s["rounds"] == 3 and s["tau"] == pytest.approx(7 / 3) and s["whole_pool_tau"] == pytest.approx(7 / 3)
    assert s["first_top1"] == pytest.approx(2 / 3) and s["first_in_pool"] == pytest.approx(2 / 3)


def test_a_round_without_a_pool_moves_the_position_alone():
    rows = round_reaches([(None, 1, False), (chain_pool(2, 3), 3, False)], [1, 2, 3, 4], first_free=False)
    assert [(r.tokens, r.bound, r.first_rank) for r in rows] == [(3, 3, 1)]


def test_a_pool_that_held_more_than_the_tree_took_raises_the_bound_alone():
    rows = round_reaches([(chain_pool(1, 2, 3), 1, False)], [1, 2, 3, 4, 5], first_free=False)
    assert (rows[0].tokens, rows[0].bound) == (1, 4)  # the tree took none of the three; the pool held them


def test_a_first_token_from_a_root_pass_counts_whatever_the_pool_holds():
    output = [4, 5, 6]
    assert round_reaches([(chain_pool(7), 2, False)], output, first_free=True)[0].bound == 2
    assert round_reaches([(chain_pool(7), 2, True)], output, first_free=False)[0].bound == 2  # a held row
    with pytest.raises(AssertionError, match="out of step"):
        round_reaches([(chain_pool(7), 2, False)], output, first_free=False)


def test_the_round_that_ends_the_output_counts_up_to_its_end():
    rows = round_reaches([(chain_pool(1, 2, 3), 4, False), (chain_pool(9), 1, False)], [1, 2], first_free=False)
    assert [(r.tokens, r.bound) for r in rows] == [(2, 2)]  # the second round stood past the output


@pytest.mark.parametrize("argv, field", [(["--decoders", "ar,draft"], "decoders"), (["--budget", "0"], "budget"),
                                         (["--decoders", "nope"], "decoders"), (["--lookup", "-1"], "lookup")])
def test_bad_options_are_refused_naming_the_flag(argv, field, capsys):
    with pytest.raises(SystemExit) as e:
        reach.main(argv)
    assert e.value.code == 2 and f"--{field.replace('_', '-')}" in capsys.readouterr().err


def test_options_check_every_decode_before_the_pair_starts():
    with pytest.raises(ConfigError, match="ar"):
        ReachOptions(decoders="ar")
    with pytest.raises(ConfigError, match="distinct"):
        ReachOptions(decoders="draft,draft")
    assert ReachOptions(decoders="root,draft").decoder_list == ["root", "draft"]


def test_the_mock_pair_end_to_end_bounds_every_decoder(capsys):
    assert reach.main(["--target", "mock", "--decoders", "draft,root-draw,cover", "--max-new-tokens", "24",
                       "--limit", "2", "--lookup", "4"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    doc = json.loads(out[-1])
    assert list(doc["decoders"]) == ["draft", "root-draw", "cover"] and doc["lookup"] == 4
    for s in doc["decoders"].values():
        assert s["rounds"] > 0 and len(s["prompts"]) == 2
        assert 1 <= s["tau"] <= s["whole_pool_tau"] and 0 <= s["first_top1"] <= s["first_top3"] <= s["first_in_pool"]
    assert any(line.split()[0] == "draft" for line in out[:-1])


def test_a_drafter_that_will_not_load_ends_the_run_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        reach.main(["--target", "mock", "--drafter", "/nonexistent/head", "--limit", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("python -m bench.reach: error: ") and len(err.splitlines()) == 1
    assert "/nonexistent/head" in err and "Traceback" not in err
