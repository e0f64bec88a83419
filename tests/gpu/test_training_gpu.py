"""The head training program on a GPU: the target answers there in bfloat16, the head trains there, the head
it writes loads in the runtime and is scored there by training.agreement; the checkpoint it leaves resumes on
the CPU."""

from __future__ import annotations

import json

import pytest
import torch

from tests.training import killed_after
from training import cli

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _run(work, out, device: str, *extra: str) -> int:
    return cli.main(["--target", "random:tiny", "--work", str(work), "--out", str(out), "--prompts", "6",
                     "--max-new", "12", "--shard", "4", "--draft-vocab", "64", "--epochs", "2", "--batch", "2",
                     "--save-every", "1", "--device", device, *extra])


def test_a_head_trained_on_the_gpu_loads_and_its_checkpoint_resumes_on_the_cpu(tmp_path, monkeypatch):
    real = cli.train
    monkeypatch.setattr(cli, "train", killed_after(3))  # the GPU run stops after its third step
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "w-cut", tmp_path / "h-cut", "cuda")
    monkeypatch.setattr(cli, "train", real)
    # the answers were made in bfloat16: the CPU resumes them only in the same dtype, and trains on
    assert _run(tmp_path / "w-cut", tmp_path / "h-cut", "cpu") == 2
    assert _run(tmp_path / "w-cut", tmp_path / "h-cut", "cpu", "--dtype", "bfloat16") == 0
    curve = json.loads((tmp_path / "h-cut" / "training.json").read_text())["curve"]
    assert len(curve) == 6 and all(torch.isfinite(torch.tensor(row["loss"])) for row in curve)

    assert _run(tmp_path / "w", tmp_path / "h", "cuda") == 0
    report = json.loads((tmp_path / "h" / "training.json").read_text())
    assert report["device"].startswith("cuda") and report["dtype"] == "bfloat16"
    assert all(torch.isfinite(torch.tensor(row["loss"])) for row in report["curve"])

    from models.load import load
    from models.options import ModelOptions

    loaded = load(ModelOptions(model=f"eagle3:{tmp_path / 'h'}", head_target="random:tiny"), "drafter")
    assert loaded.model.cfg.draft_vocab == 64
    from training import agreement

    assert agreement.main(["--head", str(tmp_path / "h"), "--target", "random:tiny", "--prompts", "builtin",
                           "--limit", "2", "--max-new", "8", "--work", str(tmp_path / "w"), "--device", "cuda"]) == 0
