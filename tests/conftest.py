"""Fixtures shared by every test package: one intra-op thread, a private ipc endpoint, the mock greedy
stream. Nothing here imports zmq at module level, so `tests/gpu` collects on an image without pyzmq."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from models.mock import EOS, MockModel
from pipeline.config import PoolConfig


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


def synthetic_record(prompt_id: str, decoder: str, temperature: float = 0.0, budget=8, seed: int = 0, *,
                     tokens: int = 10, seconds: float = 1.0, warmup: bool = False, category: str = "c",
                     tree_sizes=(3, 4), accepted=(1, 2), available=None, turn: int = 0, overshoot: int = 0,
                     grid_budget=None, budgets=None, phases=None, ahead_hits=None, ahead_seconds=None,
                     pool_depths=None, load_average=(0.5, 0.5), cpus=2, prefill_seconds=0.1, feature_bytes=None,
                     held_rows=None):
    """A decode record (evaluation.record.DecodeRecord) with made-up numbers, as summaries and reports read,
    placed in a sweep where `grid_budget` or `warmup` is given. budgets: each round's budget (default: the
    budget, 8 under auto); phases: {phase: per-round seconds} (default: 1 ms each); ahead_hits, ahead_seconds:
    drafting ahead per round (default: not tried); pool_depths: per round, with cut pools (default: whole pools
    of 3 levels, not cut); feature_bytes: per round, sent to an EAGLE-3 drafter (default: none, a standalone
    drafter's); held_rows: per round, 1 where it held its root's row (`cover`; default: none held)."""
    from evaluation.record import DecodeRecord, SweepPlace
    from pipeline.result import PHASES

    n = len(tree_sizes)
    return DecodeRecord(
        prompt_id=prompt_id, category=category, turn=turn, decoder=decoder, temperature=temperature, top_k=0,
        top_p=1.0, min_p=0.0, stop_strings=[], stop_token_ids=[], ignore_eos=False, budget=budget, seed=seed,
        max_new_tokens=64,
        prompt="p" * 5, prompt_tokens=5, prompt_token_ids=[1] * 5, new_tokens=tokens, token_ids=[1] * tokens,
        text="x" * tokens, finish_reason="length", stop_reason=None, overshoot=overshoot, stop="limit",
        seconds=seconds, prefill_seconds=prefill_seconds, tokens_per_second=tokens / seconds, rounds=n,
        target_passes=n, accept_lengths=[a + 1 for a in accepted], accepted=list(accepted), tried=list(accepted),
        tree_sizes=list(tree_sizes), available=list(available) if available is not None else [0] * n,
        budgets=list(budgets) if budgets is not None else [budget if budget != "auto" else 8] * n,
        phases={p: list((phases or {}).get(p, [0.001] * n)) for p in PHASES},
        lend_cores=False, ahead=ahead_hits is not None,
        ahead_hits=list(ahead_hits) if ahead_hits is not None else [-1] * n,
        ahead_seconds=list(ahead_seconds) if ahead_seconds is not None else [0.0] * n,
        cut_pools=pool_depths is not None, cut_weigh=False,
        pool_depths=list(pool_depths) if pool_depths is not None else [3 if decoder != "ar" else 0] * n,
        drafter_window=0, held_rows=list(held_rows) if held_rows is not None else [0] * n,
        feature_bytes=list(feature_bytes) if feature_bytes is not None else [0] * n, lookup=0, copied=[0] * n,
        load_average=list(load_average), cpus=cpus, finished=0.0,
        sweep=None if grid_budget is None and not warmup else
        SweepPlace(budget if grid_budget is None else grid_budget, 0, warmup, "1/1"))


@pytest.fixture(scope="session")
def make_record():
    return synthetic_record


MOCK_POOL = PoolConfig(topk=4, depth=3, expand=2)  # small pools: a mock decode takes a few milliseconds
MOCK_VOCAB = 64


def build_session(capacity: int = 1024):
    """A TargetSession over a mock target and an in-process mock drafter (no sockets, no second process)."""
    from drafter_proc.drafter import Drafter
    from models.mock import MockRunner
    from models.tokenizers import MockTokenizer
    from target_proc.session import TargetSession
    from target_proc.target import Target
    from tests.local_drafter import LocalDrafter

    target = Target(MockRunner(MockModel(MOCK_VOCAB, 0), capacity))
    drafter = LocalDrafter(Drafter(MockRunner(MockModel(MOCK_VOCAB, 0, 1.0), capacity), MOCK_POOL))
    return TargetSession(target, MockTokenizer(MOCK_VOCAB), drafter, MOCK_POOL)


@pytest.fixture(scope="session")
def mock_session():
    return build_session


@pytest.fixture(scope="session", autouse=True)
def _private_key_dir(tmp_path_factory):
    """CURVE keys made during the tests (and by the processes they start) go to a directory of their own,
    never to the user's ~/.config/specpair/keys."""
    with _environment("SPECPAIR_KEYS", tmp_path_factory.mktemp("keys") / "specpair"):
        yield


@pytest.fixture(scope="session", autouse=True)
def _private_kernel_cache(tmp_path_factory):
    """The CPU linear kernels chosen during the tests (and by the processes they start) are kept in a file of
    their own, never in the user's cache directory, and budget auto's pass timings beside it."""
    with _environment("SPECPAIR_KERNEL_CACHE", tmp_path_factory.mktemp("kernels") / "linear-kernels.json"):
        yield


@contextlib.contextmanager
def _environment(name: str, value):
    """The environment variable `name` set to `value` inside, and as it was after."""
    before = os.environ.get(name)
    os.environ[name] = str(value)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name)
        else:
            os.environ[name] = before
