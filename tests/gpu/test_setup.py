"""launch/setup.sh keeps a torch installed into .venv by hand (a CUDA build for this machine's driver),
and installs the pinned one into a new venv or over the torch it installed itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
PIN = "torch==2.13.0"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / ".venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=60)
    return venv


def plan_installs(tmp_path: Path, bare_venv: Path, torch: str | None, recorded: str | None) -> tuple[list[str], str]:
    """setup.sh's installs (dry run) for a .venv holding `torch`, of which setup recorded `recorded`."""
    project = tmp_path / "project"
    (project / "launch").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", project)
    shutil.copy(ROOT / "launch" / "setup.sh", project / "launch")
    venv = project / ".venv"
    shutil.copytree(bare_venv, venv, symlinks=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    if torch:
        info = site / f"torch-{torch}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    if recorded:
        (venv / ".setup-torch").write_text(recorded + "\n")
    env = {**os.environ, "SPECPAIR_SETUP_DRY_RUN": "1"}
    done = subprocess.run([project / "launch" / "setup.sh"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines(), done.stderr


def test_the_pin_is_pyprojects():
    assert f'"{PIN}"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("torch, recorded", [("2.11.0+cu126", None), ("2.11.0+cu126", "2.13.0+cpu")],
                         ids=["installed-by-hand", "replaced-setups-own"])
def test_a_torch_installed_by_hand_is_kept(tmp_path, bare_venv, torch, recorded):
    installs, messages = plan_installs(tmp_path, bare_venv, torch, recorded)
    assert f"keeping torch {torch}" in messages
    assert not any(word.startswith("torch") for line in installs for word in line.split()[2:])
    assert any("transformers==" in line for line in installs)  # the other requirements still come
    assert any(line.endswith(f"install --no-deps -e {tmp_path / 'project'}") for line in installs)


@pytest.mark.parametrize("torch, recorded", [(None, None), ("2.12.0+cpu", "2.12.0+cpu")], ids=["new", "setups-own"])
def test_the_pin_goes_into_a_new_venv_or_over_setups_own_torch(tmp_path, bare_venv, torch, recorded):
    installs, messages = plan_installs(tmp_path, bare_venv, torch, recorded)
    assert installs[0] == f"pip install {PIN}" and "keeping" not in messages


def test_a_cuda_build_of_the_pinned_release_satisfies_the_pin(tmp_path, bare_venv):
    installs, messages = plan_installs(tmp_path, bare_venv, "2.13.0+cu126", None)
    assert installs[0] == f"pip install {PIN}" and "keeping" not in messages
    assert "2.13.0+cu126" in SpecifierSet(PIN.removeprefix("torch"))  # so pip leaves it in place
