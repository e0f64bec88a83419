"""The held-out prompts and the head judged on them: kept out of the training by their text, scored per drafting
step every --eval-every steps (and on --eval-prompts'), the best head written as it improves, and a run killed
at any point that resumes to the weights and the curve of an unbroken one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.training import killed_after
from training import cli, ttt
from training.distill import read_shard
from training.prompts import training_prompts
from training.train import train


def _run(work: Path, out: Path, *extra: str) -> int:
    return cli.main(["--target", "random:tiny", "--work", str(work), "--out", str(out), "--prompts", "12",
                     "--max-new", "12", "--shard", "4", "--draft-vocab", "64", "--epochs", "2", "--batch", "2",
                     "--save-every", "1", "--eval-every", "2", *extra])


@pytest.fixture
def one_in_three(monkeypatch):
    """A third of the prompts held out, so that a run of 12 holds some out."""
    monkeypatch.setattr(cli, "HELD_OUT", 3)


def _prompts_of(path: Path, tokenizer) -> list[str]:
    return [tokenizer.prompt_text(a.tokens[: a.start].tolist()) for a in read_shard(path)]


def _report(out: Path) -> dict:
    return json.loads((out / "training.json").read_text())


def _without_seconds(curve: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in curve]


def test_held_out_prompts_are_chosen_by_their_text_never_trained_on_and_scored_per_step(tmp_path, one_in_three):
    prompts = training_prompts(12, 0)
    held = [q for q in prompts if cli.held_out(q)]
    assert 0 < len(held) < 12 and held == [q for q in training_prompts(24, 0) if cli.held_out(q)][: len(held)]
    assert _run(tmp_path / "w", tmp_path / "h") == 0
    _, tokenizer = cli.load_target("random:tiny")
    trained, kept_out = ([t for path in sorted((tmp_path / "w").glob(f"{kind}-*.pt"))
                          for t in _prompts_of(path, tokenizer)] for kind in ("answers", "held"))
    assert len(kept_out) == len(held) and len(trained) == 12 - len(held)
    assert all(q in t for q, t in zip(held, kept_out)) and not any(q in t for q in held for t in trained)
    report = _report(tmp_path / "h")
    assert report["data"]["held_out"] == len(held)
    total = len(report["curve"])
    judged = [r for r in report["curve"] if "eval" in r]
    assert [r["step"] for r in judged] == list(range(2, total + 1, 2)) and total % 2 == 0
    for r in judged:  # training.agreement's figures: rows, top-1 and top-3 at each unrolled step
        assert len(r["eval"]["held_out"]["top1"]) == len(r["eval"]["held_out"]["top3"]) == 5
        assert r["eval"]["score"] == r["eval"]["held_out"]["top1"][0]
    best = max(judged, key=lambda r: r["eval"]["score"])["step"]
    assert report["head_step"] == best


def test_the_head_written_is_the_best_judged_not_the_last(tmp_path, one_in_three, monkeypatch):
    scores = iter([0.5, 0.9, 0.7, 0.2, 0.1, 0.0, 0.0, 0.0])
    monkeypatch.setattr(ttt, "agreement", lambda head, answers, steps: {
        "rows": [1] * steps, "top1": [next(scores)] * steps, "top3": [1.0] * steps})
    assert _run(tmp_path / "w", tmp_path / "h") == 0
    state = torch.load(tmp_path / "w" / "checkpoint.pt", weights_only=True)
    assert state["best"]["step"] == 4 and _report(tmp_path / "h")["head_step"] == 4
    head = load_file(str(tmp_path / "h" / "model.safetensors"))
    for key, value in state["best"]["weights"].items():
        assert torch.equal(head[key], value.to(head[key].dtype))
    assert not torch.equal(head["fc.weight"], state["weights"]["fc.weight"].to(torch.float16))


@pytest.mark.parametrize("steps", [3, 4])  # killed after a checkpoint; after a judged step wrote --out
def test_a_run_killed_while_judged_resumes_to_the_head_and_curve_of_an_unbroken_one(tmp_path, one_in_three,
                                                                                      monkeypatch, steps):
    assert _run(tmp_path / "whole", tmp_path / "h-whole") == 0
    monkeypatch.setattr(cli, "train", killed_after(steps))
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "broken", tmp_path / "h-broken")
    left = _report(tmp_path / "h-broken")  # the best head so far is in --out
    assert left["head_step"] in (2, 4) and left["curve"][-1]["step"] in (2, 4)
    assert (tmp_path / "h-broken" / "model.safetensors").is_file()
    monkeypatch.setattr(cli, "train", train)
    assert _run(tmp_path / "broken", tmp_path / "h-broken") == 0
    assert ((tmp_path / "h-whole" / "model.safetensors").read_bytes()
            == (tmp_path / "h-broken" / "model.safetensors").read_bytes())
    whole, broken = _report(tmp_path / "h-whole"), _report(tmp_path / "h-broken")
    assert _without_seconds(whole["curve"]) == _without_seconds(broken["curve"])
    assert whole["head_step"] == broken["head_step"]


def test_eval_prompts_are_answered_once_greedily_and_scored_beside_the_held_out(tmp_path, capsys):
    mine = tmp_path / "eval.jsonl"
    mine.write_text("".join(json.dumps({"prompt": f"Describe the colour number {i} to a child."}) + "\n"
                            for i in range(14)))
    assert _run(tmp_path / "w", tmp_path / "h", "--eval-prompts", str(mine)) == 0
    answers = [a for path in sorted((tmp_path / "w").glob("eval-*.pt")) for a in read_shard(path)]
    assert len(answers) == cli.EVAL_PROMPTS == 12 and not (tmp_path / "w" / "eval-0003.pt").exists()
    report = _report(tmp_path / "h")
    judged = [r for r in report["curve"] if "eval" in r]
    assert judged and report["data"]["eval_answers"] == 12
    for r in judged:
        assert r["eval"]["score"] == r["eval"].get("held_out", r["eval"]["eval_prompts"])["top1"][0]
        assert len(r["eval"]["eval_prompts"]["top3"]) == 5
    first = (tmp_path / "w" / "eval-0000.pt").stat().st_mtime_ns
    assert _run(tmp_path / "w", tmp_path / "h", "--eval-prompts", str(mine)) == 0
    assert (tmp_path / "w" / "eval-0000.pt").stat().st_mtime_ns == first  # kept, not answered again
    capsys.readouterr()
    assert _run(tmp_path / "w2", tmp_path / "h2", "--eval-prompts", str(tmp_path / "none.jsonl")) == 2
    err = capsys.readouterr().err
    assert "none.jsonl" in err and err.count("\n") == 1 and not (tmp_path / "w2").exists()


def test_a_frozen_output_layer_keeps_the_targets_rows(tmp_path):
    assert _run(tmp_path / "w", tmp_path / "h", "--freeze-output") == 0
    head = load_file(str(tmp_path / "h" / "model.safetensors"))
    model, _ = cli.load_target("random:tiny")
    rows = model.get_output_embeddings().weight.detach()[head["d2t"] + torch.arange(len(head["d2t"]))]
    assert torch.equal(head["lm_head.weight"], rows.to(torch.float16))
    assert _run(tmp_path / "w2", tmp_path / "h2") == 0
    assert not torch.equal(load_file(str(tmp_path / "h2" / "model.safetensors"))["lm_head.weight"],
                           head["lm_head.weight"])
