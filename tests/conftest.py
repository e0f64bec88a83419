"""Fixtures shared by every test package."""

from __future__ import annotations

import os
import shutil

import pytest

from protocol.transport import private_ipc_endpoint


@pytest.fixture
def endpoint():
    """An ipc endpoint in a private directory; /tmp keeps it under the 107-byte socket path limit."""
    ep = private_ipc_endpoint()
    yield ep
    shutil.rmtree(os.path.dirname(ep[len("ipc://"):]), ignore_errors=True)
