"""Properties of SweepOptions and ReportOptions: every bad value is refused naming its option, the command
line is built from the fields, and the launcher forwards a sweep's options to `python -m timing sweep`."""

from __future__ import annotations

import json

import pytest

from launch.pair import plan
from programs.cli import build, from_options, to_argv
from timing.options import ReportOptions, SweepOptions
from timing.sweep import build_parser


def test_defaults_are_the_papers_grid():
    o = SweepOptions(out="x")
    assert o.sources.prompts == ()  # the built-in prompts
    assert o.decoder_list == ["draft", "pearl", "root-draw", "root"]
    assert o.temperature_list == [0.0, 1.0] and o.budget_list == [8, 59]
    assert o.max_new_tokens == 256 and o.warmup == 2 and o.shard_index == (1, 1)
    assert o.overrides == {} and o.cap("root-draw", 59) == 59


@pytest.mark.parametrize("field, value, message", [
    ("out", "", "`out` must name the output directory"),
    ("prompts", ("",), "`prompts` must name non-empty sources"),
    ("limit_prompts", -1, "`limit_prompts` must be a non-negative integer"),
    ("warmup", -2, "`warmup` must be a non-negative integer"),
    ("max_new_tokens", 0, "`max_new_tokens` must be a positive integer"),
    ("num_seeds", 0, "`num_seeds` must be a positive integer"),
    ("greedy_repeats", 0, "`greedy_repeats` must be a positive integer"),
    ("seed", -1, "`seed` must be a non-negative integer"),
    ("decoders", "draft,nope", "`decoders` must list distinct names"),
    ("decoders", "draft,draft", "`decoders` must list distinct names"),
    ("temperatures", "0,x", "`temperatures` must list distinct finite numbers"),
    ("temperatures", "-1", "`temperatures` must list distinct finite numbers"),
    ("temperatures", "0,0.0", "`temperatures` must list distinct finite numbers"),
    ("budgets", "8,0", "`budgets` must list distinct positive integers or auto"),
    ("budgets", "", "`budgets` must list distinct positive integers or auto"),
    ("budgets", "auto,auto", "`budgets` must list distinct positive integers or auto"),
    ("budget_overrides", "root-draw@60=41", "`budget_overrides` entries must be"),
    ("budget_overrides", "ar=41", "`budget_overrides` entries must be"),
    ("budget_overrides", "root-draw=0", "`budget_overrides` entries must be"),
    ("budget_overrides", "root-draw@59=41,root-draw=40", "`budget_overrides` sets root-draw at B = 59 twice"),
    ("shard", "0/2", "`shard` must be I/N"),
    ("shard", "3/2", "`shard` must be I/N"),
    ("shard", "2", "`shard` must be I/N"),
])
def test_bad_values_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        build(SweepOptions, **{"out": "x", field: value})


def test_budget_overrides_replace_the_cap_where_named():
    o = SweepOptions(out="x", budget_overrides="root-draw@59=41")
    assert o.cap("root-draw", 59) == 41 and o.cap("root-draw", 8) == 8 and o.cap("pearl", 59) == 59
    o = SweepOptions(out="x", budgets="59", budget_overrides="root-draw=41, pearl=60")
    assert o.overrides == {("root-draw", 59): 41, ("pearl", 59): 60}


def test_greedy_settings_run_one_seed_unless_repeated():
    o = build(SweepOptions, out="x", seed=3, num_seeds=2)
    assert o.seeds(0.0) == [3] and o.seeds(1.0) == [3, 4]
    o = build(SweepOptions, out="x", seed=3, num_seeds=2, greedy_repeats=3)
    assert o.seeds(0.0) == [3, 4, 5] and o.seeds(1.0) == [3, 4]


def test_usage_error_names_the_option(capsys):
    parser = build_parser()
    ns = parser.parse_args(["--endpoint", "ipc:///tmp/x", "--out", "d", "--budget-overrides", "root=0"])
    with pytest.raises(SystemExit):
        from_options(parser, ns, SweepOptions)
    assert "--budget-overrides entries must be" in capsys.readouterr().err


def test_options_round_trip_through_the_command_line():
    o = build(SweepOptions, out="d", prompts=("builtin", "humaneval"), budgets="59",
              budget_overrides="root-draw@59=41", shard="2/3", num_seeds=2, max_new_tokens=7, seed=4)
    parser = build_parser()
    ns = parser.parse_args(["--endpoint", "ipc:///tmp/x", *to_argv(o)])
    assert from_options(parser, ns, SweepOptions) == o


def test_report_options_check_their_values():
    for field, value, message in [("resamples", 0, "`resamples`"), ("confidence", 1.0, "`confidence`"),
                                  ("timeline_decoder", "x", "`timeline_decoder`")]:
        with pytest.raises(ValueError, match=message):
            ReportOptions(**{field: value})


def test_launcher_starts_the_sweep_process_with_forwarded_options(tmp_path):
    p = plan(["sweep", "--target", "mock", "--out", str(tmp_path), "--budgets", "8", "--mock-vocab", "32"])
    target, private_dir = p.target, p.private_dir
    try:
        assert target[1:5] == ["-P", "-m", "timing", "sweep"]
        assert target[target.index("--out") + 1] == str(tmp_path)
        assert target[target.index("--budgets") + 1] == "8"
        assert target[target.index("--max-new-tokens") + 1] == "256"  # the field's default, not the decode run's
        launch = json.loads(target[target.index("--drafter-launch") + 1])
        assert launch["options"]["model"] == "mock" and launch["options"]["mock_vocab"] == 32
        ns = build_parser().parse_args(target[5:])  # the sweep process accepts what the launcher passes
        assert ns.out == str(tmp_path)
    finally:
        if private_dir:
            import shutil

            shutil.rmtree(private_dir, ignore_errors=True)


def test_launcher_refuses_a_sweep_without_out(capsys):
    with pytest.raises(SystemExit):
        plan(["sweep", "--target", "mock"])
    assert "the following arguments are required: --out" in capsys.readouterr().err


def test_a_sweeps_speeds_count_the_tokens_delivered_by_default(tmp_path, make_record):
    from timing.sweep import summary

    records = [make_record("p/1", "draft", tokens=250, seconds=10.0, overshoot=8, grid_budget=8),
               make_record("p/2", "draft", tokens=100, seconds=4.0, overshoot=0, grid_budget=8)]
    options = build(SweepOptions, out=str(tmp_path))
    assert options.speed_tokens == "output"
    assert summary(options, [], records)["speeds"] == {"T=0 B=8": {"draft": round(350 / 14, 3)}}
    paper = build(SweepOptions, out=str(tmp_path), speed_tokens="round")  # the paper's count, named
    assert summary(paper, [], records)["speeds"] == {"T=0 B=8": {"draft": round(358 / 14, 3)}}
