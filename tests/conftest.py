"""Fixtures shared by every test package: one intra-op thread, a private ipc endpoint, the mock greedy
stream. Nothing here imports zmq at module level, so `tests/gpu` collects on an image without pyzmq."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from models.mock import EOS, MockModel


@pytest.fixture(scope="session", autouse=True)
def _one_intra_op_thread():
    # Mock tensors hold a few dozen floats. Waking a second intra-op thread for each of them costs several
    # times the work itself on a two-core machine, so tests run single-threaded (the target's own thread
    # switching between passes still applies where a test asks for it).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def endpoint():
    """An ipc endpoint in a private directory; /tmp keeps it under the 107-byte socket path limit."""
    from protocol.transport import private_ipc_endpoint

    ep = private_ipc_endpoint()
    yield ep
    shutil.rmtree(os.path.dirname(ep[len("ipc://"):]), ignore_errors=True)


def greedy_stream(model: MockModel, prompt: Sequence[int], n: int) -> list[int]:
    """The mock target's argmax continuation of `prompt`: n tokens, or fewer ending at the first EOS."""
    digest = model.digest(prompt)
    out: list[int] = []
    while len(out) < n:
        token = int(np.argmax(model.logits(digest)))
        out.append(token)
        if token == EOS:
            break
        digest = model.extend(digest, token)
    return out


@pytest.fixture(scope="session")
def greedy():
    return greedy_stream


@pytest.fixture(scope="session", autouse=True)
def _private_key_dir(tmp_path_factory):
    """CURVE keys made during the tests (and by the processes they start) go to a directory of their own,
    never to the user's ~/.config/specpair/keys."""
    before = os.environ.get("SPECPAIR_KEYS")
    os.environ["SPECPAIR_KEYS"] = str(tmp_path_factory.mktemp("keys") / "specpair")
    yield
    if before is None:
        os.environ.pop("SPECPAIR_KEYS")
    else:
        os.environ["SPECPAIR_KEYS"] = before
