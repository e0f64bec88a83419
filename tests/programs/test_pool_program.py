"""`launch/pair.sh pool` prints the pool a drafter grows after raw ids: a head in the reference's layout gives
the reference arithmetic's pool, the mock head the mock drafter's, and bad input is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch

from launch.pair import main
from models.shapes import random_model
from tests.models.eagle3_heads import head_config, head_weights, reference_path, target_features, write_head

IDS = [3, 5, 7, 11, 13]


def pool_json(capsys, *argv: str) -> dict:
    assert main(["pool", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_mock_head_grows_the_mock_drafters_pool(capsys):
    """The mock head reads the mock target's features (their digests): right features, the same pool."""
    args = ["--target", "mock", "--prompt-ids", ",".join(map(str, IDS)), "--pool-topk", "4", "--pool-depth", "3",
            "--pool-expand", "2"]
    head = pool_json(capsys, *args, "--drafter", "eagle3:mock")
    standalone = pool_json(capsys, *args, "--drafter", "mock")
    assert head == standalone and len(head["tokens"]) == 4 + 2 * 2 * 4


def test_a_head_directory_gives_the_reference_pool(tmp_path, capsys):
    """eagle3:PATH over random:tiny: every candidate's score is the reference's log-probabilities summed along
    its path, each from a full recompute of the committed rows and the path (to float32 rounding)."""
    cfg = head_config(vocab_size=512, draft_vocab_size=100, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]})
    weights = head_weights(cfg)
    directory = write_head(tmp_path / "head", cfg, weights)
    got = pool_json(capsys, "--target", "random:tiny", "--drafter", f"eagle3:{directory}", "--prompt-ids",
                    ",".join(map(str, IDS)), "--pool-topk", "3", "--pool-depth", "3", "--pool-expand", "2")
    target = random_model("tiny", "cpu", torch.float32)
    feats = target_features(target, IDS, layers=(0, 1, 1))
    embed = target.get_input_embeddings().weight.detach()
    for i, (token, parent) in enumerate(zip(got["tokens"], got["parents"])):
        path = []
        j = parent
        while j >= 0:
            path.insert(0, got["tokens"][j])
            j = got["parents"][j]
        logp = torch.log_softmax(reference_path(cfg, weights, embed, feats, IDS, path)[-1], -1)[token]
        want = float(logp) + (got["scores"][parent] if parent >= 0 else 0.0)
        assert abs(got["scores"][i] - want) < 1e-4, i


@pytest.mark.parametrize("argv, message", [
    (["--prompt-ids", "1,x"], "--prompt-ids must list token ids"),
    (["--prompt-ids", "1,2", "--paper-pool", "--pool-topk", "3"], "--paper-pool sets --pool-topk"),
])
def test_bad_options_are_refused_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["pool", "--target", "mock", "--drafter", "mock", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_head_from_one_id_is_refused(capsys):
    assert main(["pool", "--target", "mock", "--drafter", "eagle3:mock", "--prompt-ids", "4"]) == 2
    assert "--prompt-ids must hold two ids at least" in capsys.readouterr().err


def test_it_says_what_it_loads_before_the_wait(capsys):
    """The models' loads (seconds each for the embedded pair, and the kernels' timing on a first start) come
    after a line saying what the pool will be, each load with its own line."""
    tiny = "random:tiny"
    assert main(["pool", "--target", tiny, "--drafter", tiny, "--prompt-ids", "1,2,3", "--pool-depth", "2"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"[pool] the pool of {tiny} (top-k 10, depth 2, expand 10: 110 candidates) after 3 ids")
    assert [line for line in err if "loading random" in line] == [f"[pool] loading {tiny} on cpu"] * 2
