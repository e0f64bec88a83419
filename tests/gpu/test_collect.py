"""The GPU tests are collected on an image that has torch and transformers but no pyzmq."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# pytest in a child process where `import zmq` fails, as it does on a bare GPU image
COLLECT_WITHOUT_ZMQ = """
import sys
sys.modules["zmq"] = None
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests/gpu"]))
"""


@pytest.mark.slow  # a child process imports torch and transformers
def test_gpu_tests_collect_without_pyzmq():
    done = subprocess.run([sys.executable, "-c", COLLECT_WITHOUT_ZMQ], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_graph_rows_equal_eager_rows_for_root_and_every_bucket" in done.stdout
