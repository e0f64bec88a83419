"""Fixtures shared by every test package.

Nothing here imports pyzmq at module level: `tests/gpu` must be collected on an image without it.
"""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture
def endpoint():
    """An ipc endpoint in a private directory; /tmp keeps it under the 107-byte socket path limit."""
    from protocol.transport import private_ipc_endpoint

    ep = private_ipc_endpoint()
    yield ep
    shutil.rmtree(os.path.dirname(ep[len("ipc://"):]), ignore_errors=True)
