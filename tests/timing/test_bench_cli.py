"""The protocol and values benchmarks refuse bad values with one line naming the flag (status 2), before any
timing; their runs are tested end to end elsewhere (tests/processes/test_bench_protocol.py) or run by hand."""

from __future__ import annotations

import pytest
import torch

from timing import bench_protocol, bench_values


@pytest.mark.parametrize("argv, words", [
    (["--vocab", "0"], "--vocab sizes must be at least 10 (the pool's top-k), got 0"),
    (["--vocab", "1000", "9"], "--vocab sizes must be at least 10 (the pool's top-k), got 1000 9"),
    (["--temperature", "-1"], "--temperature takes finite numbers >= 0, got -1.0"),
    (["--temperature", "0", "nan"], "--temperature takes finite numbers >= 0, got 0.0 nan"),
    (["--device", "nope"], "--device 'nope' is not a torch device"),
    (["--budget", "0"], "--budget must be a positive integer, got 0"),
] + ([] if torch.cuda.is_available() else [(["--device", "cuda"], "--device cuda: this torch has no usable CUDA")]))
def test_the_protocol_benchmark_refuses_bad_values(argv, words, capsys):
    with pytest.raises(SystemExit) as done:
        bench_protocol.main(argv)
    assert done.value.code == 2 and words in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("flag", ["--rounds", "--prompts", "--resamples"])
def test_the_values_benchmark_refuses_bad_values(flag, capsys):
    with pytest.raises(SystemExit) as done:
        bench_values.main([flag, "0"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"{flag} must be a positive integer, got 0")
