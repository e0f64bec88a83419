"""Paths that are not files, or cannot be written, are refused in one line naming the path and the flag, and
a file replaced atomically is left whole or not at all."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from evaluation.paths import input_file, output_dir, output_file, replace_atomically
from pipeline.config import InputError
from programs.cli import EXIT_USAGE, Flags, run_program


@pytest.fixture
def odd(tmp_path):
    """A regular file, a FIFO and a dangling link in tmp_path."""
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    return tmp_path


@pytest.mark.parametrize("name, said", [
    ("", "is a directory, not a regular file"), ("fifo", "is a FIFO, not a regular file"),
    ("dangling", "is a link to {tmp}/gone, which does not exist"), ("nope", "does not exist"),
    ("file/x", "does not exist (a directory on its way is a file)"),
])
def test_what_is_read_must_be_a_regular_file(odd, name, said):
    path = odd / name if name else odd
    with pytest.raises(InputError, match="^--prompts '" + str(path) + "' " + said.format(tmp=odd).replace("(", r"\(")
                       .replace(")", r"\)") + "$"):
        input_file(path, "--prompts")


def test_a_device_is_not_read():
    with pytest.raises(InputError, match="^--prompts '/dev/zero' is a device, not a regular file$"):
        input_file("/dev/zero", "--prompts")


@pytest.mark.parametrize("name, said", [
    ("file", "--out {tmp}/file is not a directory: it is a file"),
    ("file/x", "--out {tmp}/file/x cannot be made: a directory on its way is a file"),
    ("dangling", "--out {tmp}/dangling is a link to {tmp}/gone, which does not exist"),
    ("fifo", "--out {tmp}/fifo is not a directory: it is a FIFO"),
])
def test_an_output_directory_must_be_makeable(odd, name, said):
    with pytest.raises(InputError) as refused:
        output_dir(odd / name, "--out")
    assert str(refused.value) == said.format(tmp=odd)


def test_an_output_directory_is_made_and_a_name_too_long_is_refused(tmp_path):
    assert output_dir(tmp_path / "a" / "b", "--out").is_dir()
    with pytest.raises(InputError, match="^--out .*: a name in it is 300 bytes long; a file system takes at most 255$"):
        output_dir(tmp_path / ("x" * 300), "--out")
    with pytest.raises(InputError, match="^--out /proc/1/x cannot be made"):
        output_dir("/proc/1/x", "--out")


@pytest.mark.parametrize("name, said", [
    ("fifo", "--json {tmp}/fifo is a FIFO, not a regular file"),
    ("dangling", "--json {tmp}/dangling is a link to {tmp}/gone, which does not exist"),
    ("", "--json {tmp} is a directory, not a regular file"),
    ("file/x", "the folder of --json {tmp}/file is not a directory: it is a file"),
])
def test_an_output_file_must_be_writable(odd, name, said):
    with pytest.raises(InputError) as refused:
        output_file(odd / name if name else odd, "--json")
    assert str(refused.value) == said.format(tmp=odd)
    assert output_file(odd / "new" / "out.json", "--json").parent.is_dir()
    with pytest.raises(InputError, match="^--json /dev/zero is a device, not a regular file$"):
        output_file("/dev/zero", "--json")


def test_a_failed_atomic_write_leaves_no_file(tmp_path):
    path = tmp_path / "answers.jsonl"
    with pytest.raises(OSError), replace_atomically(path) as tmp:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert os.listdir(tmp_path) == []
    with replace_atomically(path) as tmp:
        tmp.write_text("whole\n")
    assert os.listdir(tmp_path) == ["answers.jsonl"] and path.read_text() == "whole\n"


@pytest.mark.parametrize("code, said", [
    (errno.ENOTDIR, "cannot use /a/b: Not a directory"), (errno.ENAMETOOLONG, "cannot use /a/b: File name too long"),
    (errno.ENOENT, "cannot use /a/b: No such file or directory"), (errno.EACCES, "cannot open /a/b: Permission denied"),
    (errno.ENOSPC, "cannot write /a/b: No space left on device"),
])
def test_a_path_error_the_checks_missed_ends_in_one_line_with_status_2(caplog, code, said):
    def body():
        raise OSError(code, os.strerror(code), "/a/b")

    with caplog.at_level(logging.ERROR):
        assert run_program(body, Flags({})) == EXIT_USAGE
    assert [r.getMessage() for r in caplog.records] == [said]
