"""A real DrafterServer between the levels of a growth: no reply to an Ahead, the predicted Commit gets the
pool grown ahead, any other Commit the pool a plain drafter grows, a refused Ahead an Error that changes
nothing; a Waiting gives the growth the target's cores until the pool is sent, and gets no reply."""

from __future__ import annotations

import numpy as np
import pytest

from drafter_proc.drafter import Drafter
from models.mock import MockModel, MockRunner
from models.options import ModelOptions
from pipeline.ahead import HIT, MISSED, NOT_TRIED
from pipeline.cut import NOW, WEIGH
from protocol.errors import BadArray, StaleMessage, TokenOutOfRange
from pipeline.pool import Pool
from protocol.messages import Ahead, Commit, End, Error, PoolMsg, Start, Waiting

from tests.drafter_proc.test_drafter_server import (PROMPT, assert_error, assert_still_serving, assert_valid_pool,
                                                 open_request)
from tests.protocol.wire_peers import CAPACITY, POOL, VOCAB

PATH = np.array([9, 1, 30], np.int32)


def local_drafter() -> Drafter:
    options = ModelOptions(model="mock")
    drafter = Drafter(MockRunner(MockModel(VOCAB, options.mock_seed, options.mock_noise), CAPACITY + 64), POOL)
    drafter.start(PROMPT)
    return drafter


def predicted() -> np.ndarray:
    """The tokens the server's drafter grows ahead from for PATH: PATH and its own next token."""
    drafter = local_drafter()
    drafter.ahead(PATH)
    return drafter.written.astype(np.int32)


@pytest.mark.parametrize("together", [False, True], ids=["after-growth", "during-growth"])
@pytest.mark.parametrize("hit", [True, False])
def test_the_commit_after_an_ahead_gets_the_pool_a_plain_drafter_grows(drafter_server, together, hit):
    open_request(drafter_server)
    tokens = predicted() if hit else np.append(PATH, (predicted()[-1] + 1) % VOCAB).astype(np.int32)
    drafter_server.send(Ahead(1, 1, PATH))
    if not together:
        assert drafter_server.silent(0.3)  # an Ahead gets no reply
    drafter_server.send(Commit(1, 1, tokens))
    reply = drafter_server.recv()
    got = assert_valid_pool(reply, 1, 1)
    assert reply.ahead == (HIT if hit else MISSED)
    assert reply.seconds >= 0 and reply.ahead_seconds >= 0 and (hit or reply.ahead_seconds == 0)
    if hit and not together:  # grown before the Commit came: all of it hidden, nothing left to wait for
        assert reply.ahead_seconds > 0 and reply.seconds < reply.ahead_seconds
    want = local_drafter().commit(tokens).pool
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_allclose(got.logp, want.logp, rtol=1e-6, atol=1e-6)
    assert drafter_server.silent(0.2)  # one reply per Commit
    drafter_server.send(Commit(1, 2, np.array([4], np.int32)))  # and the rounds after go on
    reply = drafter_server.recv()
    assert_valid_pool(reply, 1, 2)
    assert reply.ahead == NOT_TRIED


@pytest.mark.parametrize("msg, error, match", [
    (Ahead(1, 3, PATH), StaleMessage, r"ahead for request 1 round 3, but the drafter expects request 1 round 1"),
    (Ahead(2, 1, PATH), StaleMessage, r"ahead for request 2 round 1, but the drafter expects request 1 round 1"),
    (Ahead(1, 1, np.array([9, VOCAB], np.int32)), TokenOutOfRange, rf"tokens\[1\] = {VOCAB} is outside"),
    (Ahead(1, 1, np.zeros(0, np.int32)), BadArray, r"`tokens` holds 0 tokens"),
])
def test_a_refused_ahead_gets_an_error_and_changes_nothing(drafter_server, msg, error, match):
    open_request(drafter_server)
    drafter_server.send(msg)
    assert_error(drafter_server.recv(), error, match, request=msg.request)
    tokens = np.array([4, 4], np.int32)
    drafter_server.send(Commit(1, 1, tokens))
    reply = drafter_server.recv()
    got = assert_valid_pool(reply, 1, 1)
    assert reply.ahead == NOT_TRIED
    np.testing.assert_allclose(got.logp, local_drafter().commit(tokens).pool.logp, rtol=1e-6, atol=1e-6)


def test_an_end_during_drafting_ahead_leaves_the_drafter_serving(drafter_server):
    open_request(drafter_server)
    drafter_server.send(Ahead(1, 1, PATH))
    drafter_server.send(End(1))
    drafter_server.send(Start(2, PROMPT))
    reply = drafter_server.recv()
    assert_valid_pool(reply, 2, 0)
    assert reply.ahead == NOT_TRIED


@pytest.fixture
def serving_with(endpoint):
    """serving_with(**options) -> a RawPeer connected to a real DrafterServer built with those options."""
    import threading

    import torch

    from drafter_proc.server import DrafterServer
    from models.load import load
    from protocol.messages import Shutdown
    from protocol.transport import Listener
    from tests.protocol.wire_peers import RawPeer, raw_socket

    made, threads = [], torch.get_num_threads()

    def start(**options):
        listener = Listener.bind(endpoint)
        server = DrafterServer(listener, load(ModelOptions(model="mock"), "drafter"), **options)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        peer = RawPeer(raw_socket())
        peer.sock.connect(endpoint)
        made.append((listener, thread, peer))
        return peer

    yield start
    for listener, thread, peer in made:
        peer.send(Shutdown())
        thread.join(5)
        peer.close()
        listener.close()
    torch.set_num_threads(threads)


def test_a_waiting_target_lends_its_cores_until_the_pool_is_sent(serving_with, monkeypatch):
    import time

    import torch

    from drafter_proc import drafter as drafter_module

    seen, expand = [], drafter_module.Drafter._expander

    def watching(self, length):  # each level's pass runs with the threads in use then, slowed so that the
        inner = expand(self, length)  # Waiting sent with the Commit comes before the last level, however loaded
        return lambda *a: seen.append(torch.get_num_threads()) or time.sleep(0.05) or inner(*a)

    monkeypatch.setattr(drafter_module.Drafter, "_expander", watching)
    peer = serving_with(threads=(1, 2))
    open_request(peer)
    seen.clear()
    peer.send(Commit(1, 1, np.array([4, 4], np.int32)))
    peer.send(Waiting(1, 1))  # comes while the pool grows: the levels after it take both threads
    reply = peer.recv()
    assert_valid_pool(reply, 1, 1)
    assert seen[-1] == 2 and seen[0] in (1, 2)
    peer.send(Waiting(1, 1))  # late: its pool was sent already; no reply, nothing changes
    assert peer.silent(0.2)
    seen.clear()
    peer.send(Commit(1, 2, np.array([7], np.int32)))  # the next round starts on the shared threads again
    assert_valid_pool(peer.recv(), 1, 2)
    assert seen == [1] * len(seen) and seen


def test_a_waiting_for_another_request_is_refused(drafter_server):
    open_request(drafter_server)
    drafter_server.send(Waiting(2, 0))
    assert_error(drafter_server.recv(), StaleMessage, r"waiting for request 2 round 0, but the drafter serves "
                 r"request 1 round 0", request=2)


@pytest.fixture
def slow_levels(monkeypatch):
    """Each level of a growth takes 0.1 s more, so that a message sent with a Commit comes mid-growth."""
    import time

    from drafter_proc import drafter as drafter_module

    expand = drafter_module.Drafter._expander

    def slowed(self, length):
        inner = expand(self, length)
        return lambda *a: time.sleep(0.1) or inner(*a)

    monkeypatch.setattr(drafter_module.Drafter, "_expander", slowed)


def test_a_waiting_with_cut_gets_the_levels_grown_at_once(drafter_server, slow_levels):
    from target_proc.client import shape_problem

    open_request(drafter_server)
    tokens = np.array([4, 4], np.int32)
    whole = local_drafter().commit(tokens).pool
    drafter_server.send(Commit(1, 1, tokens))
    drafter_server.send(Waiting(1, 1, cut=1))  # comes before the second level: the pool ends there
    reply = drafter_server.recv()
    assert isinstance(reply, PoolMsg) and (reply.request, reply.round) == (1, 1)
    got = Pool.from_edges(reply.token, reply.parent, reply.logp, reply.expanded, max_depth=POOL.depth)
    depth = int(got.depth.max())
    assert depth < POOL.depth and shape_problem(got, POOL, cut=True) is None
    want = whole.first_levels(depth)
    np.testing.assert_array_equal(got.token, want.token)
    np.testing.assert_array_equal(got.expanded, want.expanded)
    np.testing.assert_allclose(got.logp, want.logp, rtol=1e-6, atol=1e-6)
    # The target asked right after its Commit, and a level's pass takes 0.1 s (timed in round 0): the next
    # pool ends before its second level, which would end after that, asked or not
    drafter_server.send(Commit(1, 2, np.array([7], np.int32)))
    reply = drafter_server.recv()
    assert isinstance(reply, PoolMsg) and (reply.request, reply.round) == (1, 2)
    assert np.bincount(Pool.from_edges(reply.token, reply.parent, reply.logp, reply.expanded).depth)[1:].tolist() \
        == [POOL.topk]
    drafter_server.send(Start(2, PROMPT))  # a new request forgets the timings: its pools are whole until asked
    assert_valid_pool(drafter_server.recv(), 2, 0)
    drafter_server.send(Commit(2, 1, np.array([7], np.int32)))
    assert int(assert_valid_pool(drafter_server.recv(), 2, 1).depth.max()) == POOL.depth


def test_a_waiting_with_cut_ends_a_pool_grown_ahead_which_its_commit_takes(drafter_server, slow_levels):
    open_request(drafter_server)
    tokens = predicted()
    want = local_drafter().commit(tokens).pool
    drafter_server.send(Ahead(1, 1, PATH))
    drafter_server.send(Commit(1, 1, tokens))
    drafter_server.send(Waiting(1, 1, cut=1))
    reply = drafter_server.recv()
    assert isinstance(reply, PoolMsg) and reply.ahead == HIT
    got = Pool.from_edges(reply.token, reply.parent, reply.logp, reply.expanded, max_depth=POOL.depth)
    assert int(got.depth.max()) < POOL.depth
    want = want.first_levels(int(got.depth.max()))
    np.testing.assert_allclose(got.logp, want.logp, rtol=1e-6, atol=1e-6)
    assert drafter_server.silent(0.2)


@pytest.mark.parametrize("waiting, match", [(Waiting(1, 0, cut=3), r"`cut` must be 0, 1 or 2, got 3"),
                                            (Waiting(1, 0, 1, float("nan")), r"`after` must be a finite number"),
                                            (Waiting(1, 0, 1, -1.0), r"`after` must be a finite number")])
def test_a_waiting_with_a_bad_cut_or_time_is_refused(drafter_server, waiting, match):
    from protocol.errors import MalformedMessage

    open_request(drafter_server)
    drafter_server.send(waiting)
    assert_error(drafter_server.recv(), MalformedMessage, match, request=1)
    assert_still_serving(drafter_server)


@pytest.fixture
def slow_passes(monkeypatch, slow_levels):
    """A commit's prefill takes 0.1 s more too: every pass the drafter times for its cuts takes about 0.1 s."""
    import time

    from drafter_proc import drafter as drafter_module

    inner = drafter_module.prefill
    monkeypatch.setattr(drafter_module, "prefill", lambda *a: time.sleep(0.1) or inner(*a))


def deepest_path(pool: Pool) -> list[int]:
    """The tokens of a path to one of the pool's deepest candidates."""
    node, path = int(np.argmax(pool.depth)), []
    while node >= 0:
        path.append(int(pool.token[node]))
        node = int(pool.parent[node])
    return path[::-1]


@pytest.mark.parametrize("pause, cut, depths", [(0.0, WEIGH, [1, 1, 1, 1]), (1.0, WEIGH, [1] + [POOL.depth] * 3),
                                                (1.0, NOW, [1, 1, 1, 1])],
                         ids=["rounds-of-the-growth-alone", "rounds-of-1-s", "rounds-of-1-s-asked-now"])
def test_a_pool_asked_for_grows_on_while_a_level_brings_more_than_its_wait_costs(drafter_server, slow_passes,
                                                                                pause, cut, depths):
    """Each round the target asks for its pool right after its Commit (weighed cuts, or NOW), then works
    `pause` seconds, and its Commit runs through the whole pool. A level (0.1 s) pays in rounds of 1 s (with
    the prior's chances, while its wait stays under 0.2 s): once a round is timed (round 1, when round 2's
    Commit comes), asked pools are whole; in rounds as short as their wait, cut at once. Asked with NOW, they
    are cut at once whatever a level would bring."""
    import time

    from protocol.messages import Ready

    from tests.protocol.wire_peers import hello

    drafter_server.send(hello())
    assert isinstance(drafter_server.recv(), Ready)
    drafter_server.send(Start(1, PROMPT))
    pool = assert_valid_pool(drafter_server.recv(), 1, 0)
    drafter_server.send(Waiting(1, 0, cut=cut))
    got = []
    for round_ in range(1, len(depths) + 1):
        time.sleep(pause)
        drafter_server.send(Commit(1, round_, np.array(deepest_path(pool) + [7], np.int32)))
        drafter_server.send(Waiting(1, round_, cut=cut))
        reply = drafter_server.recv()
        assert isinstance(reply, PoolMsg) and (reply.request, reply.round) == (1, round_)
        pool = Pool.from_edges(reply.token, reply.parent, reply.logp, reply.expanded, max_depth=POOL.depth)
        got.append(int(pool.depth.max()))
    assert got == depths
