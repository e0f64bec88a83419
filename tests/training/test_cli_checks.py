"""train-head's edges: bad flags, damaged files, a full disk and a foreign --out each end the run in one line
with status 2, keeping what is done; a run too small for its schedule says so, and a rerun says what it reuses."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch

from training import cli


def run(work: Path, out: Path, *extra: str) -> int:
    return cli.main(["--target", "random:tiny", "--work", str(work), "--out", str(out), "--prompts", "6",
                     "--max-new", "12", "--shard", "4", "--draft-vocab", "64", "--epochs", "2", "--batch", "2",
                     "--save-every", "1", *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> bytes:
    """The weights of an unbroken run."""
    base = tmp_path_factory.mktemp("whole")
    assert run(base / "w", base / "h") == 0
    return (base / "h" / "model.safetensors").read_bytes()


BAD_FLAGS = [
    (("--prompts", "-1"), "`prompts` must be at least 1, not -1"),
    (("--max-new", "1"), "`max_new` must be at least 2"),
    (("--context-prompts", "-2"), "`context_prompts` must be at least 0"),
    (("--shard", "0"), "`shard` must be at least 1"),
    (("--draft-vocab", "0"), "`draft_vocab` must be at least 1"),
    (("--draft-vocab", "100000"), "`draft_vocab` must be at most the target's vocabulary of 512"),
    (("--max-new", "8192"), "`max_new` below its context of 8192 tokens (got 64, 8192)"),
    (("--threads", "-1"), "`threads` must be at least 0"),
    (("--epochs", "0"), "`epochs` must be at least 1"),
    (("--batch", "-1"), "`batch` must be at least 1"),
    (("--steps", "0"), "`steps` must be at least 1"),
    (("--save-every", "0"), "`save_every` must be at least 1"),
    (("--lr", "inf"), "`lr` must be positive and finite"),
    (("--lr", "nan"), "`lr` must be positive and finite"),
    (("--decay", "2"), "`decay` in (0, 1]"),
    (("--min-lr", "-0.1"), "`min_lr` in [0, 1]"),
    (("--warmup", "-1"), "`warmup` must be in [0, 2^31)"),
    (("--seed", "-1"), "`seed` in [0, 2^32)"),
    (("--seed", str(2 ** 70)), "`seed` in [0, 2^32)"),
    (("--clip", "0"), "`clip` must be positive and finite"),
    (("--epochs", "two"), "argument --epochs: invalid int value: 'two'"),
    (("--lr", "fast"), "argument --lr: invalid float value: 'fast'"),
    (("--dtype", "int4"), "argument --dtype: invalid choice: 'int4'"),
    (("--device", "tpu"), "`device` must be cpu, cuda or cuda:N"),
    (("--prompt-source", "/no/such/prompts.jsonl"), "/no/such/prompts.jsonl"),
]


@pytest.mark.parametrize("flags, message", BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_each_bad_flag_is_one_line_and_status_2_before_any_work(tmp_path, capsys, flags, message):
    try:
        code = run(tmp_path / "w", tmp_path / "h", *flags)
    except SystemExit as e:  # argparse's own refusals: a value of the wrong type or no choice
        code = e.code
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[train-head] ")]
    assert code == 2 and len(lines) == 1 and message in lines[0], lines  # no usage beside it, no traceback
    assert not (tmp_path / "w").exists() and not (tmp_path / "h").exists()


@pytest.mark.parametrize("flag", ["--work", "--out"])
def test_a_folder_flag_naming_a_file_or_a_path_through_one_is_refused(tmp_path, capsys, flag):
    (tmp_path / "file").write_text("x")
    for where in (tmp_path / "file", tmp_path / "file" / "below"):
        paths = {"--work": tmp_path / "w", "--out": tmp_path / "h", flag: where}
        assert run(paths["--work"], paths["--out"]) == 2
        assert f"{flag} {where}: {tmp_path / 'file'} is a file, not a directory" in one_line(capsys)
    assert not (tmp_path / "w").exists()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = {"truncated": _truncate, "empty": lambda p: p.write_bytes(b""),
          "garbage": lambda p: p.write_bytes(b"not a torch file at all" * 40),
          "another object": lambda p: torch.save({"weights": 1}, p)}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_shard_is_named_with_delete_it_and_answered_again_once_deleted(tmp_path, capsys, whole, damage):
    assert run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0
    shard = tmp_path / "w" / "answers-0001.pt"
    DAMAGE[damage](shard)
    assert run(tmp_path / "w", tmp_path / "h") == 2
    line = one_line(capsys)
    assert f"{shard} is damaged or not a training shard" in line and "delete it" in line and "may be good" not in line
    shard.unlink()
    (tmp_path / "w" / "checkpoint.pt").unlink()  # of the one-epoch run
    assert run(tmp_path / "w", tmp_path / "h") == 0
    assert (tmp_path / "h" / "model.safetensors").read_bytes() == whole


@pytest.mark.parametrize("damage", sorted(DAMAGE) + ["other shapes", "a step past its curve", "no optimizer groups"])
def test_a_damaged_checkpoint_is_named_with_delete_it(tmp_path, capsys, whole, damage):
    assert run(tmp_path / "w", tmp_path / "h") == 0
    checkpoint = tmp_path / "w" / "checkpoint.pt"
    if damage in DAMAGE:
        DAMAGE[damage](checkpoint)
    else:
        state = torch.load(checkpoint, weights_only=True)
        if damage == "other shapes":
            state["weights"]["fc.weight"] = state["weights"]["fc.weight"][:, :3]
        elif damage == "no optimizer groups":
            state["optimizer"] = {"state": {}, "param_groups": []}
        else:
            state["step"] += 5
        torch.save(state, checkpoint)
    assert run(tmp_path / "w", tmp_path / "h") == 2
    line = one_line(capsys)
    assert f"{checkpoint} is damaged or not a checkpoint" in line and "delete it to train from the start" in line
    checkpoint.unlink()
    assert run(tmp_path / "w", tmp_path / "h") == 0
    assert (tmp_path / "h" / "model.safetensors").read_bytes() == whole


@pytest.mark.parametrize("name", ["answers.json", "times.json"])
def test_a_damaged_record_of_the_work_folder_is_named(tmp_path, capsys, name):
    assert run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0
    (tmp_path / "w" / name).write_text('{"shard": 4, "tar')
    assert run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 2
    line = one_line(capsys)
    assert f"{tmp_path / 'w' / name} is damaged (JSONDecodeError" in line and "delete it" in line


def _full_disk(monkeypatch, where: str, after: int = 0) -> None:
    """Writes of files whose name holds `where` fail as a full disk does, after `after` of them succeeded."""
    import safetensors.torch

    done = []

    def failing(real):
        def write(obj, path, *args, **kw):
            if where in str(path):
                done.append(path)
                if len(done) > after:
                    raise OSError(errno.ENOSPC, "No space left on device")
            return real(obj, path, *args, **kw)
        return write

    monkeypatch.setattr(torch, "save", failing(torch.save))
    monkeypatch.setattr(safetensors.torch, "save_file", failing(safetensors.torch.save_file))
    real_text = Path.write_text
    monkeypatch.setattr(Path, "write_text", lambda self, text, *a, **kw: failing(
        lambda t, p, *a, **kw: real_text(p, t, *a, **kw))(text, self, *a, **kw))


@pytest.mark.parametrize("where, after, named", [
    ("answers-0001", 0, "answers-0001.pt"),
    ("checkpoint", 3, "checkpoint.pt"),
    ("model.safetensors", 0, "model.safetensors"),
    ("training.json", 0, "training.json"),
    ("times.json", 1, "times.json"),
])
def test_a_full_disk_ends_in_one_line_naming_the_file_and_the_run_resumes(tmp_path, capsys, monkeypatch, whole,
                                                                          where, after, named):
    with monkeypatch.context() as m:
        _full_disk(m, where, after)
        assert run(tmp_path / "w", tmp_path / "h") == 2
    line = one_line(capsys)
    assert f"cannot write {tmp_path / ('h' if named in ('model.safetensors', 'training.json') else 'w') / named}: " \
           f"No space left on device; what is done is kept in {tmp_path / 'w'}" in line
    assert not [p.name for p in (tmp_path / "w").iterdir() if ".tmp-" in p.name]  # no partial file left behind
    if where == "answers-0001":
        assert (tmp_path / "w" / "answers-0000.pt").exists() and not (tmp_path / "w" / "checkpoint.pt").exists()
    if where == "checkpoint":
        assert torch.load(tmp_path / "w" / "checkpoint.pt", weights_only=True)["step"] == 3
    assert run(tmp_path / "w", tmp_path / "h") == 0
    assert "resuming in" in capsys.readouterr().err
    assert (tmp_path / "h" / "model.safetensors").read_bytes() == whole


def test_a_head_another_run_wrote_is_not_overwritten_unless_asked(tmp_path, capsys):
    assert run(tmp_path / "w1", tmp_path / "h", "--epochs", "1") == 0
    before = (tmp_path / "h" / "model.safetensors").read_bytes()
    assert run(tmp_path / "w1", tmp_path / "h", "--epochs", "1") == 0  # its own run, resumed: written again
    assert run(tmp_path / "w2", tmp_path / "h", "--epochs", "1") == 2
    line = one_line(capsys)
    assert f"{tmp_path / 'h'} holds config.json, model.safetensors, training.json, loss.png already; write " \
           f"elsewhere (--out NEW_DIR) or give --overwrite" in line
    assert (tmp_path / "h" / "model.safetensors").read_bytes() == before and not (tmp_path / "w2").exists()
    assert run(tmp_path / "w2", tmp_path / "h", "--epochs", "1", "--overwrite") == 0
    assert json.loads((tmp_path / "h" / "training.json").read_text())["work"] == str((tmp_path / "w2").resolve())


def test_a_folder_of_files_not_a_head_of_this_program_is_refused(tmp_path, capsys):
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "config.json").write_text("{}")
    assert run(tmp_path / "w", tmp_path / "h") == 2
    assert "holds config.json already; write elsewhere (--out NEW_DIR) or give --overwrite" in one_line(capsys)
    (tmp_path / "h" / "config.json").unlink()
    (tmp_path / "h" / "notes.txt").write_text("mine")  # a folder without a head's files is written into
    assert run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0 and (tmp_path / "h" / "notes.txt").exists()


def test_the_smallest_run_says_what_it_is_too_small_for_and_a_rerun_what_it_reuses(tmp_path, capsys):
    small = ["--target", "random:tiny", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "h"), "--prompts", "4",
             "--epochs", "1", "--max-new", "8", "--draft-vocab", "64"]
    assert cli.main(small) == 0
    err = capsys.readouterr().err
    assert "warning: 1 optimizer step (4 answers, --batch 4, --epochs 1), fewer than the --warmup of 30: the " \
           "learning rate reaches 5e-05, not --lr 0.0015" in err
    assert "distinct tokens, fewer than the draft vocabulary of 64" in err
    assert "resuming" not in err
    assert cli.main(small) == 0
    err = capsys.readouterr().err
    assert f"resuming in {tmp_path / 'w'}: reusing 1 answered shard (answers-0000.pt) and checkpoint.pt" in err
    assert f"training was done at step 1 of 1 ({tmp_path / 'w' / 'checkpoint.pt'})" in err


def test_a_line_is_said_before_the_target_loads(tmp_path, capsys, monkeypatch):
    real, said = cli.load_target, []

    def load(*args):
        said.append(capsys.readouterr().err)
        return real(*args)

    monkeypatch.setattr(cli, "load_target", load)
    assert run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0
    assert said and "[train-head] loading the target random:tiny on cpu (float32)" in said[0]


def test_a_run_killed_while_training_says_the_step_it_resumes_at(tmp_path, capsys, monkeypatch):
    from tests.training import killed_after

    with monkeypatch.context() as m:
        m.setattr(cli, "train", killed_after(3))  # in step 3, before its checkpoint
        with pytest.raises(KeyboardInterrupt):
            run(tmp_path / "w", tmp_path / "h")
    capsys.readouterr()
    assert run(tmp_path / "w", tmp_path / "h") == 0
    err = capsys.readouterr().err
    assert "reusing 2 answered shards (answers-0000.pt to answers-0001.pt) and checkpoint.pt" in err
    assert f"training resumes at step 2 of 6 ({tmp_path / 'w' / 'checkpoint.pt'})" in err


def test_agreement_names_a_damaged_training_shard_before_any_work(tmp_path, capsys):
    from training import agreement

    assert run(tmp_path / "w", tmp_path / "h", "--epochs", "1") == 0
    _truncate(tmp_path / "w" / "answers-0001.pt")
    capsys.readouterr()
    assert agreement.main(["--head", str(tmp_path / "h"), "--target", "random:tiny", "--prompts", "builtin",
                           "--limit", "2", "--max-new", "8", "--work", str(tmp_path / "w")]) == 2
    assert f"{tmp_path / 'w' / 'answers-0001.pt'} is damaged or not a training shard" in one_line(capsys)
