"""What the launcher starts, decided before it starts anything: GPUs within the scheduler's allocation."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from launch.pair import plan
from models import cuda_env
from models.options import CPU_SPINCOUNT, ModelOptions


@pytest.fixture
def cuda_usable(monkeypatch):
    monkeypatch.setattr(cuda_env, "require_cuda_in_child", lambda what: None)


def planned(argv):
    p = plan(argv)
    if p.private_dir:
        shutil.rmtree(p.private_dir, ignore_errors=True)
    return p


def test_gpu_indices_count_the_gpus_the_scheduler_gave(cuda_usable, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    p = planned(["--target", "mock", "--gpus", "0,1"])
    assert p.env["target"]["CUDA_VISIBLE_DEVICES"] == "4" and p.env["drafter"]["CUDA_VISIBLE_DEVICES"] == "6"
    assert "--device" in p.target and p.target[p.target.index("--device") + 1] == "cuda:0"


def test_without_an_allocation_gpu_indices_are_the_machines(cuda_usable, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    p = planned(["--target", "mock", "--gpus", "1"])
    assert p.env["target"]["CUDA_VISIBLE_DEVICES"] == p.env["drafter"]["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_gpu_outside_the_allocation_is_a_usage_error(cuda_usable, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(SystemExit):
        planned(["--target", "mock", "--gpus", "0,1"])
    assert "--gpus 0,1: CUDA_VISIBLE_DEVICES=3 makes 1 GPU(s) visible" in capsys.readouterr().err


def test_gpus_without_usable_cuda_stop_before_any_process(capsys, monkeypatch):
    def in_this_process():
        raise AssertionError("the launcher initialised CUDA itself, before forking its children")

    monkeypatch.setattr(cuda_env, "cuda_report", in_this_process)  # the check runs in a child process
    with pytest.raises(SystemExit):
        planned(["--target", "mock", "--gpus", "0"])
    assert "--gpus 0 needs CUDA, but" in capsys.readouterr().err


def test_budget_auto_and_its_cap_reach_the_target(cuda_usable):
    p = planned(["--target", "mock", "--budget", "auto", "--budget-max", "16"])
    assert p.target[p.target.index("--budget") + 1] == "auto"
    assert p.target[p.target.index("--budget-max") + 1] == "16"


def test_stop_strings_and_stop_token_ids_reach_the_targets_decodes():
    from programs.options import RunOptions
    from programs.target_program import build_parser, parse

    p = plan(["--target", "mock", "--stop", "###", "--stop", "\n\n", "--stop-token-ids", "2, 7"])
    try:
        argv = p.target[p.target.index("programs.target_program") + 1:]
        run = parse(build_parser("t", "t", RunOptions), argv, RunOptions).run
    finally:
        shutil.rmtree(p.private_dir, ignore_errors=True)
    assert all(c.stop == ("###", "\n\n") and c.stop_token_ids == (2, 7) for c in run.configs())


@pytest.mark.parametrize("argv, message", [
    (["--stop", ""], r"--stop must be a non-empty string or a list of them, got \(''"),
    (["--stop-token-ids", "2,x"], r"--stop-token-ids must be a non-negative token id or a list of them, got '2,x'"),
    (["--stop-token-ids", "-3"], r"--stop-token-ids must be a non-negative token id or a list of them, got \(-3,\)")])
def test_bad_stops_are_usage_errors_naming_the_flag(capsys, argv, message):
    with pytest.raises(SystemExit):
        planned(["--target", "mock", *argv])
    assert re.search(message, capsys.readouterr().err)


def test_the_embedded_pair_grows_a_heads_pool_a_level_shallower_and_says_so():
    """No model options: the default head drafts at depth 3 (models.options.EMBEDDED_HEAD_POOL, one level
    shallower than a standalone drafter's EMBEDDED_POOL), and the note names the pool used."""
    p = planned([])
    assert p.target[p.target.index("--pool-depth") + 1] == "3"
    assert any("pool reduced to topk=10 depth=3 expand=3" in n for n in p.notes)


def test_the_embedded_pair_copies_from_the_context_and_says_so_where_a_named_pair_does_not():
    """No model options: a decode run has context lookup at models.options.EMBEDDED_LOOKUP, said in a note;
    --lookup sets it for any pair (0 turns it off); a pair the user names, and any sweep, runs without it
    unless asked (its pools are the drafter's alone)."""
    from models.options import EMBEDDED_LOOKUP

    def lookup(p):
        return p.target[p.target.index("--lookup") + 1]

    p = planned([])
    assert lookup(p) == str(EMBEDDED_LOOKUP)
    assert any(f"context lookup grafts up to {EMBEDDED_LOOKUP} tokens" in n for n in p.notes)
    assert lookup(planned(["--lookup", "0"])) == "0"
    named = planned(["--target", "mock"])
    assert lookup(named) == "0" and not any("context lookup" in n for n in named.notes)
    assert lookup(planned(["--target", "mock", "--lookup", "4"])) == "4"
    assert lookup(planned(["sweep", "--target", "mock", "--out", "x"])) == "0"
    assert lookup(planned(["sweep", "--out", "x"])) == "0"  # a sweep of the embedded pair measures its pools alone


def test_recorded_rounds_keep_the_drafters_pools_alone(capsys, tmp_path):
    """The values program studies the drafter's pools: the embedded pair records without context lookup, and a
    lookup asked for beside --record-rounds is a usage error naming it, in a run and in a sweep."""
    p = planned(["--record-rounds", str(tmp_path / "rounds")])
    assert p.target[p.target.index("--lookup") + 1] == "0"
    for argv in (["--record-rounds", str(tmp_path / "r2"), "--lookup", "8"],
                 ["sweep", "--target", "mock", "--out", str(tmp_path / "s"), "--record-rounds", "--lookup", "4"]):
        with pytest.raises(SystemExit):
            planned(argv)
        assert "--lookup would graft chains" in capsys.readouterr().err


def test_a_negative_lookup_is_a_usage_error_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        planned(["--target", "mock", "--lookup", "-1"])
    assert "--lookup" in capsys.readouterr().err


def test_processes_on_the_cpu_spin_briefly_unless_the_user_says_how_threads_wait(cuda_usable, monkeypatch):
    """libgomp's default spin keeps an idle target thread on a core for milliseconds after a pass, while the
    drafter it just woke waits for one; the launcher shortens it for CPU processes, as the user's own
    setting allows."""
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    p = planned(["--target", "mock"])
    assert p.env["target"]["GOMP_SPINCOUNT"] == p.env["drafter"]["GOMP_SPINCOUNT"] == str(CPU_SPINCOUNT)
    assert p.env["target"]["OMP_NUM_THREADS"] == str(max(ModelOptions().cpu_threads))
    gpus = planned(["--target", "mock", "--gpus", "0,1"])
    assert "GOMP_SPINCOUNT" not in gpus.env["target"] and "GOMP_SPINCOUNT" not in gpus.env["drafter"]
    for name, value in (("GOMP_SPINCOUNT", "5000"), ("OMP_WAIT_POLICY", "PASSIVE")):
        monkeypatch.setenv(name, value)
        p = planned(["--target", "mock"])
        assert "GOMP_SPINCOUNT" not in p.env["target"] and "GOMP_SPINCOUNT" not in p.env["drafter"]
        monkeypatch.delenv(name)


def trained_head(tmp_path, target: str | None) -> str:
    """A head folder as train-head leaves it: the committed head's weights, with a training.json naming
    `target` (none without one)."""
    from models.options import EMBEDDED_HEAD_DIR

    head = tmp_path / "head"
    head.mkdir()
    for name in ("config.json", "model.safetensors"):
        (head / name).symlink_to(EMBEDDED_HEAD_DIR / name)
    if target is not None:
        (head / "training.json").write_text(f'{{"command": "launch/pair.sh train-head", "target": "{target}"}}\n')
    return f"eagle3:{head}"


def pool_of(p) -> tuple[str, ...]:
    return tuple(p.target[p.target.index(flag) + 1] for flag in ("--pool-topk", "--pool-depth", "--pool-expand"))


def test_a_head_trained_for_the_embedded_target_alone_takes_the_embedded_pairs_defaults(tmp_path):
    """docs/training.md's decode command, `--drafter eagle3:OUT` alone: the target is the one the head's
    training.json names, and the embedded pair's pool, context lookup and output limit come with it, each said."""
    from models.options import EMBEDDED_HEAD_POOL, EMBEDDED_LOOKUP

    head = trained_head(tmp_path, "smollm2")
    p = planned(["--drafter", head, "--decoders", "ar,draft,root-draw"])
    assert p.target[p.target.index("--model") + 1] == "smollm2"
    assert pool_of(p) == tuple(map(str, (EMBEDDED_HEAD_POOL.topk, EMBEDDED_HEAD_POOL.depth, EMBEDDED_HEAD_POOL.expand)))
    assert p.target[p.target.index("--lookup") + 1] == str(EMBEDDED_LOOKUP)
    assert any(f"target smollm2: the one {head} drafts for" in n for n in p.notes)
    assert any("pool reduced to topk=10 depth=3 expand=3" in n for n in p.notes)


def test_the_embedded_target_named_runs_the_cpu_pool_and_a_start_line_says_which(tmp_path):
    """--target smollm2 beside its head: the CPU pool as without --target (lookup and the output limit stay
    the command line's); any other named target the paper's pool, said too."""
    p = planned(["--target", "smollm2", "--drafter", trained_head(tmp_path, "smollm2")])
    assert pool_of(p) == ("10", "3", "3") and p.target[p.target.index("--lookup") + 1] == "0"
    said = [n for n in p.notes if "pool" in n]
    assert len(said) == 1 and "embedded target smollm2 on the CPU: pool reduced to topk=10 depth=3 expand=3" in said[0]
    p = planned(["--target", "mock", "--drafter", "mock"])
    assert pool_of(p) == ("10", "8", "10")
    assert [n for n in p.notes if "pool" in n] == ["pool: the paper's, topk=10 depth=8 expand=10 (710 candidates); "
                                                   "--pool-* options change it"]


def test_docs_training_decode_command_plans_as_written_with_the_head_it_trains(tmp_path):
    lines = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8").splitlines()
    argv = shlex.split(next(line for line in lines if line.startswith("launch/pair.sh --drafter eagle3:")))[1:]
    head = trained_head(tmp_path, "smollm2")
    p = planned([head if a.startswith("eagle3:") else a for a in argv])
    assert p.target[p.target.index("--model") + 1] == "smollm2" and pool_of(p) == ("10", "3", "3")


def test_a_head_that_does_not_say_its_target_needs_one_named(tmp_path, capsys):
    head = trained_head(tmp_path, None)
    with pytest.raises(SystemExit) as exited:
        planned(["--drafter", head])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--target and --drafter go together" in err and f"{head} does not say" in err


@pytest.mark.parametrize("pair", [[], ["--drafter", "HEAD"], ["--target", "smollm2", "--drafter", "HEAD"],
                                  ["--drafter", "smollm2:int8"], ["--target", "mock", "--drafter", "mock"],
                                  ["--target", "random:tiny", "--drafter", "random:tiny"],
                                  ["--drafter", "HEAD", "--pool-depth", "2"], ["--drafter", "HEAD", "--paper-pool"]],
                         ids=["embedded", "head", "named-target", "int8", "mock", "random", "pool-depth",
                              "paper-pool"])
def test_launch_pair_pool_grows_the_pool_a_decode_of_the_same_pair_runs(pair, tmp_path):
    from programs.pool_program import build_parser, chosen_pool, pair_of

    pair = [trained_head(tmp_path, "smollm2") if a == "HEAD" else a for a in pair]
    ns = build_parser("launch/pair.sh pool").parse_args([*pair, "--prompt-ids", "1,2"])
    pair_of(ns)
    pool = chosen_pool(build_parser("pool"), ns, [])
    assert (str(pool.topk), str(pool.depth), str(pool.expand)) == pool_of(planned(pair))
