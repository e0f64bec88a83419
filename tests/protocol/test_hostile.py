"""A hostile peer on either side: every targeted attack is refused with its typed error (or, legal, accepted),
in bounded time, and the drafters go on serving, each EAGLE-3 head a decode equal to ar's; a seeded campaign of
tampered messages of every type never crashes or hangs either side, and every decode that completes despite it
gives ar's greedy output (tests.protocol.hostile)."""

from __future__ import annotations

import resource
import threading

import pytest

from programs.cli import raise_open_file_limit
from protocol.limits import REQUEST_CONTEXT, request_frame_bytes
from tests.protocol.hostile import (ATTACKS, HARD_S, OUTCOMES, TYPES, Arena, Campaign, _handshake, drafter_process,
                                    long_ids_cost, memory_requests_cost, served_beside_half_open)


@pytest.fixture(scope="module")
def arena():
    place = Arena()
    yield place
    place.close()


def bounded(run, arena) -> None:
    """Run an attack on a thread; re-raise what it raised; fail if it outlives HARD_S."""
    box = {}

    def body() -> None:
        try:
            run(arena)
        except BaseException as e:  # handed to the test thread
            box["error"] = e

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(HARD_S)
    assert not worker.is_alive(), f"the attack still runs after {HARD_S} s"
    if "error" in box:
        raise box["error"]


@pytest.mark.parametrize("case", ATTACKS, ids=[case.name for case in ATTACKS])
def test_each_attack_is_refused_with_its_typed_error_and_the_drafters_serve_on(arena, case):
    """A legal input (no typed error) is accepted; serving on includes a decode through each head equal to ar's."""
    if case.error is None:
        bounded(case.run, arena)
    else:
        with pytest.raises(case.error, match=case.match):
            bounded(case.run, arena)
    assert arena.serving()


def test_a_campaign_of_tampered_messages_never_crashes_hangs_or_changes_the_output():
    campaign = Campaign(seed=0)
    try:
        result = campaign.run(300)
    finally:
        campaign.close()
    assert result["tried"] == 300
    assert (result["crashed"], result["hung"], result["wrong"]) == (0, 0, 0), result["examples"]
    assert result["refused"] > 100 and result["accepted"] > 10  # both ways out were exercised
    assert set(result["tampered_types"]) == {*TYPES, "injected"}  # every message type, and extra messages
    assert sum(result[o] for o in OUTCOMES) + result["untouched"] == 300
    assert result["untouched"] < 15


@pytest.mark.slow
def test_hellos_beyond_the_request_limit_are_refused_and_leave_the_drafter_process_memory_flat():
    with drafter_process() as (endpoint, proc, context):
        assert _handshake(context, endpoint, [REQUEST_CONTEXT])  # the limit's own cache, once
        cost = memory_requests_cost(context, endpoint, proc.pid, count=100)
        assert cost["requests_100_refused"] == 100  # each a typed `limit` error naming the limit
        assert cost["requests_100_peak_mib"] - cost["requests_100_before_mib"] < 20
        assert _handshake(context, endpoint, [256]) and proc.poll() is None  # serving on


@pytest.mark.slow
def test_routing_ids_beyond_the_frame_limit_are_refused_and_ids_within_it_cost_bounded_memory():
    """libzmq keeps each connected peer's routing id: the drafter refuses one over its frame limit at the
    handshake, so 100 peers connected at once with 1 MiB ids cost nothing, and with ids just within the
    limit of the default request limit (64 KiB) a few MiB, handed back once they have left."""
    with drafter_process() as (endpoint, proc, context):
        long = long_ids_cost(endpoint, proc.pid, peers=100, id_bytes=1 << 20)
        assert long["ids_100x1024_kib_kept"] == 0
        assert long["ids_100x1024_kib_peak_mib"] - long["ids_100x1024_kib_before_mib"] < 20
        within = long_ids_cost(endpoint, proc.pid, peers=100, id_bytes=request_frame_bytes(REQUEST_CONTEXT) - 64)
        assert within["ids_100x63_kib_kept"] == 100
        assert within["ids_100x63_kib_peak_mib"] - within["ids_100x63_kib_before_mib"] < 100
        assert within["ids_100x63_kib_after_mib"] - within["ids_100x63_kib_before_mib"] < 10
        assert _handshake(context, endpoint, [256]) and proc.poll() is None  # serving on


@pytest.mark.slow
def test_connections_that_never_handshake_do_not_keep_a_keyed_target_out():
    """At the common soft limit of 1024 open files, 1,100 connections that never begin their handshake would
    take every descriptor a drafter may hold; it raises its soft limit to the hard one at start, so that it
    takes them all and still serves a target with an authorized key at once."""
    if raise_open_file_limit() < 1500 or resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1500:
        pytest.skip("this host's hard limit on open files is below what the attack and the drafter need")
    got = served_beside_half_open(connections=1100, soft_files=1024, ready_s=5.0)
    assert got["soft_files"] > 1024  # raised at start, to the hard limit
    assert got["held"] > 1024  # more connections than the limit it was started with allows, at once
    assert got["ready_s"] is not None and got["ready_s"] < 5.0, got
