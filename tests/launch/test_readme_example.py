"""The Python API's example in docs/api.md runs as written, start to finish, with the embedded default pair."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.processes.proc_tools import ROOT


@pytest.mark.slow
def test_the_api_pages_example_runs_as_written(tmp_path):
    page = (ROOT / "docs" / "api.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert re.search(r"\n\[\d+ tokens\]$", done.stdout), done.stdout[-300:]
