"""The launcher's help and its key tool answer without importing torch (seconds, not the model stack's
start-up): what they read (the rule table, the options, the wire's keys) imports nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes.proc_tools import ROOT

PROBE = """
import io, sys, contextlib
from launch.pair import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
assert out.getvalue(), "no output"
heavy = sorted(m for m in ("torch", "transformers", "matplotlib") if m in sys.modules)
print("HEAVY=" + ",".join(heavy) + f" CODE={code}")
"""


@pytest.mark.parametrize("argv", [["--help"], ["sweep", "--help"], ["keys"], ["keys", "--help"]])
def test_help_and_keys_import_no_torch(argv, tmp_path):
    env = {"SPECPAIR_KEYS": str(tmp_path / "keys"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-P", "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY= CODE=0", done.stdout[-500:]
