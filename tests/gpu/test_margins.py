"""The margin where two greedy outputs part, measured in the target's row after what it had read: a near tie
within twice the rows' gap is explained, a wider one is not."""

from __future__ import annotations

import json

import pytest
import torch

from models.hf import HFRunner
from models.shapes import random_model
from target_proc.target import Target
from tests.gpu import margins
from tests.gpu.margins import Parting, explained, first_parting, relative_margin


def test_the_first_parting_is_the_first_differing_token_or_where_the_shorter_ends():
    assert first_parting([1, 2, 3], [1, 2, 3]) is None
    assert first_parting([1, 2, 3], [1, 5, 3]) == 1
    assert first_parting([1, 2], [1, 2, 3]) == 2 and first_parting([], [4]) == 0


def test_the_margin_is_on_the_scale_of_the_rows_largest_logit():
    row = torch.tensor([1.0, 3.0, 2.9, -4.0])
    assert relative_margin(row, 1, 2) == pytest.approx(0.1 / 4)
    assert relative_margin(row * 0.1, 1, 2) == pytest.approx(0.01)  # logits under 1: over 1
    assert explained(0.02, 0.01) and not explained(0.0201, 0.01) and not explained(None, 0.01)
    with pytest.raises(ValueError, match="not a parting"):
        Parting("ar", "prompt/0", 0, (1, 2), ())


@pytest.fixture(scope="module")
def tiny():
    return random_model("tiny", "cpu", torch.float32)


def test_margins_are_read_in_the_row_after_the_prefix(tiny):
    """The row margins reads is the model's own next-token row after the whole prefix."""
    prefix = [3, 9, 27, 4, 8, 100]
    with torch.inference_mode():
        reference = random_model("tiny", "cpu", torch.float32)(torch.tensor([prefix])).logits[0, -1]
    top, second = reference.topk(2).indices.tolist()
    far = int(reference.argmin())
    target = Target(HFRunner(tiny, 256, graphs=False))
    parts = [Parting("root", "prompt/0", 2, (top, second), tuple(prefix)),
             Parting("root", "prompt/1", 2, (top, far), tuple(prefix)),
             Parting("draft", "prompt/0", 3, (top, None), tuple(prefix))]
    near, wide, ended = margins.margins(target, parts)
    assert near == pytest.approx(relative_margin(reference, top, second), abs=1e-5)
    assert wide == pytest.approx(relative_margin(reference, top, far), abs=1e-5) and wide > near
    assert ended is None


def test_the_child_reads_its_request_and_writes_the_margins(tmp_path):
    parts = [Parting("ar", "prompt/0", 0, (5, 6), (1, 2, 3))]
    request = margins.request(parts, tmp_path / "request.json")
    assert margins.main(["--shape", "tiny", "--device", "cpu", "--capacity", "128", "--request", str(request),
                         "--result", str(tmp_path / "result.json")]) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "passed" and len(result["margins"]) == 1 and 0 <= result["margins"][0] < 1
