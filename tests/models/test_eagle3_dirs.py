"""Damaged head directories: each refused at load in one line naming the file and the field (HeadError),
before the drafter program binds its endpoint, with status 2 and no traceback; a pickle that would run code
is refused as a checkpoint without running it."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from models.eagle3_config import HeadError, read_head
from tests.models.eagle3_heads import head_config, head_weights, write_head

ST = "model.safetensors"


def _config(**changes):
    def damage(d: Path) -> None:
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(changes)
        (d / "config.json").write_text(json.dumps(cfg))
    return damage


def _config_text(text: str | bytes):
    def damage(d: Path) -> None:
        (d / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    return damage


def _weights(**changes):
    def damage(d: Path) -> None:
        w = head_weights(head_config())
        for key, value in changes.items():
            key = key.replace("__", ".")
            if value is None:
                del w[key]
            else:
                w[key] = value(w[key]) if callable(value) else value
        save_file({k: v.contiguous() for k, v in w.items()}, str(d / ST))
    return damage


def _file(name: str, data: bytes):
    def damage(d: Path) -> None:
        (d / ST).unlink()
        (d / name).write_bytes(data)
    return damage


def _fifo(name: str):
    def damage(d: Path) -> None:
        (d / name).unlink()
        os.mkfifo(d / name)
    return damage


def _header(header: dict, tail: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + tail


def _truncated(d: Path) -> None:
    data = (d / ST).read_bytes()
    (d / ST).write_bytes(data[: len(data) // 2])


def _header_only(d: Path) -> None:
    data = (d / ST).read_bytes()
    (d / ST).write_bytes(data[: 8 + struct.unpack("<Q", data[:8])[0]])


def _duplicate_d2t(w):
    w = w.clone()
    w[1] = w[0] - 1  # draft id 1 onto draft id 0's target
    return w


DAMAGED = {  # name: (damage, the file named, what the line says)
    "config a list": (_config_text("[1, 2]"), "config.json", "the config holds a list, not an object"),
    "config not JSON": (_config_text("{"), "config.json", "is not JSON"),
    "config not UTF-8": (_config_text(b"\xff\xfe{"), "config.json", "is not JSON"),
    "config nested deeply": (_config_text("[" * 200_000), "config.json", "is not JSON"),
    "head_dim of 0": (_config(hidden_size=2, head_dim=None), "config.json", "head_dim is 0, not a positive integer"),
    "config huge": (_config_text(" " * (2 << 20)), "config.json", "too large for a config"),
    "config a FIFO": (_fifo("config.json"), "config.json", "is not a regular file"),
    "layer ids nested": (_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [[1], [2], [3]]}), "config.json",
                         r"`eagle_aux_hidden_state_layer_ids` is \[\[1\], \[2\], \[3\]\], not a list of 3"),
    "layer ids a string": (_config(eagle_config={"eagle_aux_hidden_state_layer_ids": "011"}), "config.json",
                           r"`eagle_aux_hidden_state_layer_ids` is '011', not a list of 3"),
    "layer ids of 2": (_config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2]}), "config.json",
                       "not a list of 3"),
    "eagle_config a list": (_config(eagle_config=[1]), "config.json", r"`eagle_config` is \[1\], not an object"),
    "rope_scaling a string": (_config(rope_scaling="llama3"), "config.json",
                              "`rope_scaling` is 'llama3', not an object"),
    "rope_scaling lacks keys": (_config(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "config.json",
                                "`rope_scaling.low_freq_factor` is None, not a positive number"),
    "rope_scaling dynamic": (_config(rope_scaling={"type": "dynamic", "factor": 2.0}), "config.json",
                             "rope type 'dynamic'; this runtime reads default, linear and llama3"),
    "rope_parameters a list": (_config(rope_parameters=[1]), "config.json", "`rope_parameters` is"),
    "rope_theta -1": (_config(rope_theta=-1), "config.json", "`rope_theta` is -1, not a positive number"),
    "rope_theta a string": (_config(rope_theta="1e4"), "config.json", "`rope_theta` is '1e4'"),
    "rms_norm_eps NaN": (_config(rms_norm_eps=float("nan")), "config.json", "`rms_norm_eps` is nan"),
    "hidden_size a string": (_config(hidden_size="64"), "config.json", "`hidden_size` is '64', not a positive integer"),
    "vocab_size true": (_config(vocab_size=True), "config.json", "`vocab_size` is True"),
    "intermediate_size missing": (_config(intermediate_size=None), "config.json", "`intermediate_size` is None"),
    "norm_before_residual a string": (_config(norm_before_residual="yes"), "config.json",
                                      "`norm_before_residual` is 'yes', not true or false"),
    "safetensors of 0 bytes": (lambda d: (d / ST).write_bytes(b""), ST, "not a valid safetensors file"),
    "safetensors truncated": (_truncated, ST, "not a valid safetensors file"),
    "safetensors header only": (_header_only, ST, "not a valid safetensors file"),
    "safetensors garbage": (lambda d: (d / ST).write_bytes(os.urandom(4096)), ST, "not a valid safetensors file"),
    "safetensors huge header": (lambda d: (d / ST).write_bytes(struct.pack("<Q", 1 << 40) + b"{}"), ST,
                                "not a valid safetensors file"),
    "safetensors huge tensor": (lambda d: (d / ST).write_bytes(_header(
        {"fc.weight": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]}}, b"\0" * 64)),
        ST, "not a valid safetensors file"),
    "safetensors a FIFO": (_fifo(ST), ST, "is not a regular file"),
    "bin of 0 bytes": (_file("pytorch_model.bin", b""), "pytorch_model.bin",
                       r"is not a valid checkpoint \(a torch state dict of tensors\)"),
    "bin garbage": (_file("pytorch_model.bin", b"\x80\x04garbage"), "pytorch_model.bin", "is not a valid checkpoint"),
    "d2t duplicate": (_weights(d2t=_duplicate_d2t), ST, "d2t maps two draft ids to one target id"),
    "d2t float": (_weights(d2t=lambda w: w.float() + 0.5), ST, "d2t is float32, not integer offsets"),
    "d2t out of range": (_weights(d2t=lambda w: w + 1000), ST, r"d2t maps draft ids outside the vocabulary \[0, 96\)"),
    "t2d inconsistent": (_weights(t2d=lambda w: ~w), ST, "t2d does not mark exactly the target ids d2t maps to"),
    "weight NaN": (_weights(norm__weight=lambda w: w.clone().fill_(float("nan"))), ST,
                   "norm.weight holds values that are not finite"),
    "weight Inf": (_weights(fc__weight=lambda w: w.clone().index_fill_(0, torch.tensor([3]), float("inf"))), ST,
                   "fc.weight holds values that are not finite"),
    "weight int32": (_weights(midlayer__mlp__up_proj__weight=lambda w: w.int()), ST,
                     "midlayer.mlp.up_proj.weight is int32, not floating point"),
    "weight unknown": (_weights(midlayer__self_attn__q_proj__bias=torch.zeros(64)), ST,
                       "holds midlayer.self_attn.q_proj.bias, a weight this runtime does not read"),
    "weight missing": (_weights(lm_head__weight=None), ST, "the head lacks lm_head.weight"),
}


@pytest.mark.parametrize("name", DAMAGED)
def test_a_damaged_head_directory_is_refused_in_one_line_naming_the_file(tmp_path, name):
    damage, file, said = DAMAGED[name]
    directory = write_head(tmp_path / "head")
    damage(directory)
    with pytest.raises(HeadError, match=said) as refused:
        read_head(directory)
    line = str(refused.value)
    assert "\n" not in line and f"{directory / file}" in line
    if file == "config.json" and said != "is not JSON":
        assert "is not JSON" not in line  # a field's error is worded as the field's


class RunsCode:
    """A pickle whose loading would run code: it would leave a file behind."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_pickle_that_would_run_code_is_refused_as_a_checkpoint_and_never_runs(tmp_path):
    directory = write_head(tmp_path / "head")
    (directory / ST).unlink()
    ran = tmp_path / "ran"
    with open(directory / "pytorch_model.bin", "wb") as f:
        pickle.dump({"fc.weight": RunsCode(ran)}, f)
    with pytest.raises(HeadError, match=r"pytorch_model.bin' is not a valid checkpoint \(a torch state dict of "
                                        r"tensors\): UnpicklingError"):
        read_head(directory)
    assert not ran.exists()


def test_a_good_pytorch_checkpoint_loads_as_its_safetensors_twin(tmp_path):
    cfg = head_config()
    weights = head_weights(cfg)
    twin = write_head(tmp_path / "st", cfg, weights)
    directory = write_head(tmp_path / "bin", cfg, weights)
    (directory / ST).unlink()
    torch.save({f"model.{k}": v for k, v in weights.items()}, directory / "pytorch_model.bin")
    _, read = read_head(directory)
    _, want = read_head(twin)
    assert read.keys() == want.keys() and all(torch.equal(read[k], want[k]) for k in want)


def test_a_damaged_head_stops_the_drafter_program_before_it_binds(tmp_path, monkeypatch):
    from programs import drafter_program
    from protocol.transport import Listener

    directory = write_head(tmp_path / "head")
    _weights(d2t=_duplicate_d2t)(directory)
    bound = []
    monkeypatch.setattr(Listener, "bind", classmethod(lambda cls, *a, **k: bound.append(a) or 1 / 0))
    rc = drafter_program.main(["--model", f"eagle3:{directory}", "--head-target", "random:tiny",
                               "--endpoint", f"ipc://{tmp_path}/d.sock"])
    assert rc == 2 and bound == []


@pytest.mark.parametrize("name", ["config a FIFO", "weight NaN", "layer ids a string"])
def test_the_drafter_program_ends_a_damaged_heads_start_with_status_2_and_one_line(tmp_path, name):
    damage, file, said = DAMAGED[name]
    directory = write_head(tmp_path / "head")
    damage(directory)
    done = subprocess.run([sys.executable, "-m", "programs.drafter_program", "--model", f"eagle3:{directory}",
                           "--head-target", "random:tiny", "--endpoint", f"ipc://{tmp_path}/d.sock"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert file in lines[0]
    assert not (tmp_path / "d.sock").exists()
