"""A message whose answer fails in the model or the pool gets an Error reply, its traceback goes to the log,
and the drafter serves on from where it was: a failed Commit leaves the rows as before and may be sent again
(its pool then the one an undisturbed request gets), a failed Start leaves no request open. Features a head
cannot take are refused before any of its rows is written."""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from drafter_proc.drafter import Drafter
from drafter_proc.head import HeadDrafter
from drafter_proc.server import DrafterServer
from models.load import load
from models.mock import MockHead, MockHeadRunner, MockModel, MockRunner
from models.options import ModelOptions
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.pool import InvalidPool
from pipeline.settings import DecodeConfig
from protocol.errors import BadFeatures, PeerError
from protocol.messages import Shutdown
from protocol.transport import Channel, Listener
from target_proc.client import RemoteDrafter
from target_proc.target import Target

WAIT_S = 10.0
POOL = PoolConfig(topk=3, depth=3, expand=2)
PROMPT = [5, 17, 3, 40]
CONTEXT = 256


@contextmanager
def head_served(endpoint):
    """(the DrafterServer of the mock head on a thread, a RemoteDrafter after its handshake, the mock target
    keeping its features)."""
    listener = Listener.bind(endpoint)
    server = DrafterServer(listener, load(ModelOptions(model="eagle3:mock"), "drafter"))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    channel = Channel.connect(endpoint, peer="drafter")
    loaded = load(ModelOptions(model="mock"), "target")
    client = RemoteDrafter(channel, loaded.vocab_size, POOL, WAIT_S)
    target = Target(loaded.runner(CONTEXT))
    target.keep_features(client.handshake("mock", loaded.tokenizer.fingerprint, CONTEXT, WAIT_S).layers())
    try:
        yield server, client, target
    finally:
        channel.send(Shutdown())
        thread.join(WAIT_S)
        channel.close()
        listener.close()
    assert not thread.is_alive()


def features(target: Target, tokens: list[int]) -> torch.Tensor:
    """(len(tokens), F) the features the mock target keeps for `tokens` as a context."""
    decode(target, None, tokens, DecodeConfig("ar", 0.0, 1, 1), frozenset(), None)
    return target.features(0, len(tokens))


def nan_tree_passes(runner, monkeypatch) -> None:
    """From now on, the head's tree passes (not a commit's rows) give NaN logits: grow_pool fails."""
    forward = runner.forward

    def spoiled(*args, last_only: bool = False, **kwargs):
        logits = forward(*args, last_only=last_only, **kwargs)
        return logits if last_only else torch.full_like(logits, torch.nan)
    monkeypatch.setattr(runner, "forward", spoiled)


def test_a_pool_error_mid_commit_is_an_error_reply_with_a_logged_traceback_and_the_rows_stay(
        endpoint, monkeypatch, caplog):
    with head_served(endpoint) as (server, client, target):
        kept = features(target, PROMPT + [7])
        client.start(PROMPT, kept[:3])
        client.pool()
        head = server.session.drafter
        rows = head.rows
        nan_tree_passes(head.runner, monkeypatch)
        with caplog.at_level(logging.ERROR, logger="drafter"):
            client.commit([7], kept[3:4])
            with pytest.raises(PeerError, match=r"peer reported drafter: the drafter could not answer the Commit of "
                                                r"request 1: InvalidPool: candidate 3 has edge log-prob nan"):
                client.pool()
        failed = [r for r in caplog.records if "could not answer the Commit" in r.getMessage()]
        assert len(failed) == 1 and failed[0].exc_info[0] is InvalidPool  # once, with its traceback
        assert head.rows == rows and server.session.position() == (1, 0)
        monkeypatch.undo()
        client.round -= 1  # the same Commit again
        client.commit([7], kept[3:4])
        got = client.pool().pool
    local = HeadDrafter(MockHeadRunner(MockHead(MockModel(ModelOptions().mock_vocab, ModelOptions().mock_seed,
                                                          ModelOptions().mock_noise)), CONTEXT), POOL)
    local.start(PROMPT, kept[:3])
    want = local.commit([7], kept[3:4]).pool
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.logp, want.logp)


def test_a_start_whose_pool_fails_leaves_no_request_open_and_the_next_start_is_served(endpoint, monkeypatch):
    with head_served(endpoint) as (server, client, target):
        kept = features(target, PROMPT)
        nan_tree_passes(server.session.drafter.runner, monkeypatch)
        client.start(PROMPT, kept[:3])
        with pytest.raises(PeerError, match=r"could not answer the Start of request 1: InvalidPool"):
            client.pool()
        assert server.session.position() == (-1, -1)
        client.commit([7], kept[3:4])
        with pytest.raises(PeerError, match=r"stale: commit for request 1 round 1, but no request is open"):
            client.pool()
        monkeypatch.undo()
        client.start(PROMPT, kept[:3])
        assert len(client.pool().pool) == POOL.size


def test_features_a_head_cannot_norm_are_refused_before_any_row_is_written(monkeypatch):
    model = MockModel(64, 0, 0.5)
    head = HeadDrafter(MockHeadRunner(MockHead(model), CONTEXT), POOL)
    digests = torch.tensor(np.random.default_rng(0).integers(0, 256, (5, 16)), dtype=torch.float32)
    head.start([1, 2, 3, 4], digests[:3])
    fuse = head.runner.fuse
    monkeypatch.setattr(head.runner, "fuse", lambda f: fuse(f) * 1e20)  # fused rows whose squares overflow
    with pytest.raises(BadFeatures, match=r"`features` row 0 gives the head's fc a row beyond float32's range"):
        head.commit([5, 6], digests[3:5])
    assert head.rows == 3
    monkeypatch.undo()
    got = head.commit([5, 6], digests[3:5]).pool
    want = HeadDrafter(MockHeadRunner(MockHead(model), CONTEXT), POOL).start([1, 2, 3, 4, 5, 6], digests).pool
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.logp, want.logp)


def test_a_standalone_drafter_whose_pool_fails_keeps_its_context(monkeypatch):
    model = MockModel(64, 0, 0.5)
    drafter = Drafter(MockRunner(model, CONTEXT), POOL)
    drafter.start([1, 2, 3])
    nan_tree_passes(drafter.runner, monkeypatch)
    with pytest.raises(InvalidPool):
        drafter.commit([4, 5])
    assert drafter.through_root == 3
    monkeypatch.undo()
    got = drafter.commit([4, 5]).pool
    want = Drafter(MockRunner(model, CONTEXT), POOL).start([1, 2, 3, 4, 5]).pool
    np.testing.assert_array_equal(got.logp, want.logp)
