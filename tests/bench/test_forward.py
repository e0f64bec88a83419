"""The forward benchmark: its passes (a root pass and a tree pass per size, over the used slots, both ways with
the same rows), its bad values refused in one line, and one short run of each mode on the default target."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench.forward import bushy_tree, main, target_passes

from tests.processes.proc_tools import ROOT


def test_the_passes_run_both_ways_with_the_same_rows_over_the_used_slots():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # a tiny Llama over the token ids the passes draw (up to 40,000)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40960, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    ways = {lean: target_passes(model, 30, 128, [2, 8], lean=lean) for lean in (False, True)}
    assert list(ways[True]) == ["root pass", "tree pass B=2", "tree pass B=8"]
    for name, run in ways[True].items():
        rows = run().clone()
        assert rows.reshape(-1, 40960).shape[0] == (1 if name == "root pass" else int(name.split("=")[1]))
        assert torch.equal(rows, ways[False][name]())
    assert bushy_tree(8).parent.tolist() == [-1, -1, -1, -1, 0, 0, 0, 1]


@pytest.mark.parametrize("argv, flag", [(["--trees", "0"], "--trees"), (["--trees", "8,x"], "--trees"),
                                        (["--context", "1"], "--context"), (["--threads", "0"], "--threads")])
def test_bad_values_end_with_one_line_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].split()[4] == flag


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--parts"]], ids=["ways", "parts"])
def test_a_short_run_ends_with_its_figures(mode):
    done = subprocess.run([sys.executable, "-m", "bench.forward", "--reps", "1", "--trees", "2", "--context", "8",
                           *mode], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if mode:
        assert set(result["parts"]["whole_ms"]) == {"root pass", "tree pass B=2"}
    else:
        assert result["equal"] and set(result["passes"]) == {"root pass", "tree pass B=2"}
