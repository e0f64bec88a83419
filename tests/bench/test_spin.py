"""python -m bench.spin's command line and figures (the benchmark itself starts the embedded pair and is run
by hand)."""

from __future__ import annotations

import pytest

from bench.common import command_line
from bench.spin import SpinOptions, _figures, build_parser


def parse(argv: list[str]) -> SpinOptions:
    return command_line(build_parser(), argv)[0]


def test_the_defaults_compare_libgomps_own_spin_with_the_launchers():
    options = parse([])
    assert (options.values, options.repeats, options.decoders, options.stratify) == ("300000,100000", 3, "ar,draft",
                                                                                      "group")


@pytest.mark.parametrize("argv, message", [
    (["--values", "300000"], "--values must be two or more distinct spin counts"),
    (["--values", "300000,lots"], "--values must be two or more distinct spin counts"),
    (["--values", "5,5"], "--values must be two or more distinct spin counts"),
    (["--repeats", "0"], "--repeats must be a positive integer, got 0"),
    (["--stratify", "prompt"], "--stratify must be category or group, got 'prompt'"),
    (["--decoders", "ar,nope"], "--decoders must list distinct names"),
])
def test_bad_values_are_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        parse(argv)
    assert done.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_time_outside_the_phases_is_what_a_decode_took_beyond_its_prefill_and_phases(make_record):
    def decode(prompt, tokens, seconds, prefill, phases):
        return make_record(prompt, "draft", tokens=tokens, seconds=seconds, prefill_seconds=prefill,
                           phases={"draft": [0.0, 0.0], "root": [0.0, 0.0], "select": [0.0, 0.0], **phases})

    a = decode("p/0", 6, 1.0, 0.2, {"wait": [0.01, 0.03], "tree": [0.3, 0.3], "commit": [0.01, 0.01]})
    b = decode("p/1", 4, 0.5, 0.1, {"wait": [0.02, 0.02], "tree": [0.15, 0.15], "commit": [0.0, 0.0]})
    f = _figures([a, b], 8)["draft"]
    assert f["tok_per_s"] == pytest.approx(10 / 1.5) and f["rounds"] == 4
    assert f["outside_ms_per_round"] == pytest.approx(1e3 * (0.14 + 0.06) / 4)
    assert f["median_wait_ms"] == pytest.approx(20.0) and f["median_tree_ms"] == pytest.approx(225.0)


def test_an_unknown_prompt_source_is_a_usage_error_before_any_pair_starts(capsys):
    from bench.spin import main

    with pytest.raises(SystemExit) as done:
        main(["--prompts", "nope"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "python -m bench.spin: error: prompt file 'nope' does not exist")
