"""The two-GPU round model: its arithmetic on phases where the answer is plain, and its command line."""

from __future__ import annotations

import json

import pytest

from timing.round_model import Phases, cut_round, main, round_ms


def test_a_round_without_drafting_ahead_is_its_phases_with_the_wait_for_the_drafter():
    assert round_ms(Phases(draft=50, root=20, tree=30, between=1), None) == pytest.approx(20 + 30 + 1 + 30)
    assert round_ms(Phases(draft=10, root=20, tree=30, between=1), None) == pytest.approx(51)  # no wait


def test_every_prediction_right_hides_the_drafting_that_fits_in_verification():
    p = Phases(draft=50, root=20, tree=30, between=1, levels=5)
    assert round_ms(p, 1.0) == pytest.approx(51)  # 50 <= 30 + 1 + 20: nothing left to wait for
    assert round_ms(Phases(draft=70, root=20, tree=30, between=1), 1.0) == pytest.approx(51 + 19)
    assert round_ms(p, 0.0) == pytest.approx(round_ms(p, None) + 0.5 * 50 / 5)  # a miss costs half a level


def test_the_program_prints_a_json_document_last(capsys):
    assert main(["--hit-rates", "0,1"]) == 0
    doc = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [r["hit_rate"] for r in doc["with_ahead"]] == [0.0, 1.0]
    assert doc["with_ahead"][0]["speedup"] < 1 < doc["with_ahead"][1]["speedup"]
    assert 0 < doc["break_even"] < 1


def test_a_cut_pool_has_the_levels_whose_passes_end_within_the_root_pass():
    p = Phases(draft=50, root=27, tree=30, between=1, levels=5)  # passes of 10 ms: two end by 27
    assert cut_round(p) == (pytest.approx(27 + 1 + 30), 2)
    assert cut_round(Phases(draft=50, root=30, tree=30, between=1, levels=5)) == (pytest.approx(61), 3)
    assert cut_round(Phases(draft=50, root=6, tree=30, between=1, levels=5)) == (pytest.approx(41), 1)  # waits
    assert cut_round(Phases(draft=20, root=27, tree=30, between=1, levels=5)) == (pytest.approx(58), 5)  # whole
    assert cut_round(p, 4) == (pytest.approx(40 + 1 + 30), 4)  # the target waits 13 ms for the third and fourth


def test_the_json_document_has_the_cut_pools_break_even(capsys):
    assert main([]) == 0
    cut = json.loads(capsys.readouterr().out.splitlines()[-1])["cut"]
    assert 1 <= cut["levels"] < 8 and 0 < cut["tokens_share_to_pay"] < 1
    deeper = cut["deeper"]
    assert [r["levels"] for r in deeper] == list(range(cut["levels"] + 1, 8))
    shares = [cut["tokens_share_to_pay"]] + [r["tokens_share_to_pay"] for r in deeper]
    assert shares == sorted(shares) and shares[-1] < 1  # a deeper pool must keep more, and 7 of 8 levels less than all


@pytest.mark.parametrize("argv, flag", [(["--hit-rates", "0.2,x"], "--hit-rates"),
                                        (["--hit-rates", "1.5"], "--hit-rates"),
                                        (["--hit-rates", "nan"], "--hit-rates"),
                                        (["--levels", "0"], "--levels"), (["--draft", "-5"], "--draft"),
                                        (["--tree", "inf"], "--tree")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert f"`{flag}`" in capsys.readouterr().err.strip().splitlines()[-1]
