"""An EAGLE-3 drafter served over the wire: the handshake names the layers it takes and refuses a target it
does not fit, every Start and Commit carries the target's features, and every decoder's greedy output is
ar's; a Start or Commit without them is refused."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from drafter_proc.server import DrafterServer
from models.load import load
from models.options import ModelOptions
from pipeline.config import PoolConfig
from pipeline.decode import decode
from pipeline.rules import DECODERS
from pipeline.settings import DecodeConfig
from protocol.errors import HandshakeMismatch, PeerError
from protocol.messages import Commit, Shutdown, Start
from protocol.transport import Channel, Listener
from target_proc.client import RemoteDrafter
from target_proc.target import Target

WAIT_S = 30.0
POOL = PoolConfig(topk=3, depth=3, expand=2)


@contextmanager
def served(endpoint, drafter: ModelOptions, target: ModelOptions):
    """(the loaded target, a RemoteDrafter after its handshake) with a real DrafterServer on a thread."""
    listener = Listener.bind(endpoint)
    server = DrafterServer(listener, load(drafter, "drafter"))
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    channel = Channel.connect(endpoint, peer="drafter")
    loaded = load(target, "target")
    client = RemoteDrafter(channel, loaded.vocab_size, POOL, WAIT_S)
    try:
        yield loaded, client
    finally:
        channel.send(Shutdown())
        thread.join(WAIT_S)
        channel.close()
        listener.close()


def handshake(loaded, client):
    return client.handshake(loaded.name, loaded.tokenizer.fingerprint, 256, WAIT_S, shape=loaded.shape)


def test_the_mock_head_over_the_wire_gives_ars_greedy_output(endpoint, greedy):
    with served(endpoint, ModelOptions(model="eagle3:mock", mock_noise=0.5), ModelOptions(model="mock")) as (
            loaded, client):
        ready = handshake(loaded, client)
        assert ready.layers() == (0,) and client.wants_features
        target = Target(loaded.runner(256))
        target.keep_features(ready.layers())
        accepted = rounds = 0
        for prompt in ([5, 17, 3], [9, 2], [1, 2, 3, 4, 5, 6]):
            want = greedy(loaded.model, prompt, 12)
            for decoder in DECODERS:
                result = decode(target, client if decoder != "ar" else None, prompt,
                                DecodeConfig(decoder, 0.0, 8, 12), frozenset({0}), None)
                assert result.tokens == want, (decoder, prompt)
                if decoder == "draft":
                    accepted += sum(r.accepted for r in result.rounds)
                    rounds += len(result.rounds)
        assert accepted > 0.5 * rounds  # right features: the mock drafter's acceptance


def test_a_random_head_over_a_random_target_gives_ars_greedy_output(endpoint):
    head = ModelOptions(model="random:eagle3-tiny", head_target="random:tiny", max_context=256)
    with served(endpoint, head, ModelOptions(model="random:tiny", max_context=256)) as (loaded, client):
        ready = handshake(loaded, client)
        assert ready.layers() == (0, 1, 1)
        target = Target(loaded.runner(256))
        target.keep_features(ready.layers())
        prompt = [5, 17, 3, 40, 41]
        want = decode(target, None, prompt, DecodeConfig("ar", 0.0, 1, 10), frozenset(), None).tokens
        for decoder in ("draft", "root", "cover"):
            got = decode(target, client, prompt, DecodeConfig(decoder, 0.0, 8, 10), frozenset(), None).tokens
            assert got == want, decoder


def test_a_head_that_does_not_fit_its_target_is_refused_at_the_handshake(endpoint):
    head = ModelOptions(model="random:eagle3-tiny", head_target="random:tiny")
    with served(endpoint, head, ModelOptions(model="mock", mock_vocab=512)) as (loaded, client):
        with pytest.raises(HandshakeMismatch, match=r"is an EAGLE-3 head; target 'mock' has no layers"):
            client.handshake("mock", load(head, "drafter").tokenizer.fingerprint, 256, WAIT_S, shape=(0, 0))
        fingerprint = load(head, "drafter").tokenizer.fingerprint
        with pytest.raises(HandshakeMismatch, match=r"fc takes 3 x 64 target features; the target's hidden size "
                                                    r"is 128$"):
            client.handshake("wide", fingerprint, 256, WAIT_S, shape=(128, 2))
        assert client.handshake("tiny", fingerprint, 256, WAIT_S, shape=(64, 2)).layers() == (0, 1, 1)


def test_a_start_or_commit_without_features_is_refused(endpoint):
    with served(endpoint, ModelOptions(model="eagle3:mock"), ModelOptions(model="mock")) as (loaded, client):
        handshake(loaded, client)
        client.start([5, 17, 3])  # no features
        with pytest.raises(PeerError, match=r"takes features of 16 values a token; the Start carries none"):
            client.pool()
        features = torch.zeros(2, 16)
        client.start([5, 17, 3], features)
        client.pool()
        client.channel.send(Commit(client.request, 1, np.array([4, 4], np.int32)))
        client.round, client.asked = 1, 1
        with pytest.raises(PeerError, match=r"the Commit carries none"):
            client.pool()
        client.channel.send(Start(client.request + 1, np.array([5], np.int32), np.zeros(0, np.uint8), "float32", 16))
        client.request, client.round, client.asked = client.request + 1, 0, 1
        with pytest.raises(PeerError, match=r"starts from two tokens at least"):
            client.pool()
