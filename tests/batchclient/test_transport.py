"""axon.batchclient.transport: the blocking RoundTrip, over real sockets to a real HTTP server."""

from __future__ import annotations

import socket
import threading

import pytest
from http_peer import BODY, http_peer

from axon.batchclient.errors import FetchError
from axon.batchclient.request import build_request
from axon.batchclient.transport import Connections, RoundTrip
from axon.client.cancel import Cancel, Cancelled


@pytest.fixture(scope="module")
def peer():
    with http_peer() as server:
        yield server


def request_to(peer, *files: str, **headers: str):
    return build_request(f"http://127.0.0.1:{peer.server_address[1]}/", list(files), method="GET", headers=headers)


def kept(peer, *files: str):
    return request_to(peer, *files, Connection="keep-alive")


def test_a_round_trip_sends_the_built_request_and_reads_the_answer(peer):
    request = request_to(peer, "a.bin")
    with RoundTrip(request, timeout=5) as trip:
        head = trip.start()
        assert (head.status, head.ok, head.content_length) == (200, True, len(BODY))
        assert b"".join(trip.chunks(4096)) == BODY
    method, target, headers = peer.seen[-1]
    assert (method, target) == ("GET", request.target)
    assert all(headers.get(name) == value for name, value in request.headers)


def test_the_answer_reads_as_a_file(peer):
    with RoundTrip(request_to(peer, "a.bin"), timeout=5) as trip:
        trip.start()
        got = bytearray()
        while chunk := trip.read(1000):
            assert len(chunk) <= 1000
            got += chunk
    assert got == BODY


def test_a_refusal_is_read_up_to_its_json(peer):
    with RoundTrip(request_to(peer, "gone.bin"), timeout=5) as trip:
        head = trip.start()
        assert head.status == 404 and not head.ok
        assert b'"not_found"' in trip.error_body()


def test_a_body_cut_short_simply_ends(peer):
    with RoundTrip(request_to(peer, "cut.bin"), timeout=5) as trip:
        trip.start()
        got = b"".join(trip.chunks(65536))
    assert got == BODY[: len(BODY) // 2]  # the reader sees what is missing


def test_failures_say_what_was_under_way(peer):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens here
    refused = build_request(f"http://127.0.0.1:{port}/", ["a.bin"], method="GET")
    with pytest.raises(FetchError, match=f"127.0.0.1:{port}: failed while connecting"), RoundTrip(refused, 5) as trip:
        trip.start()
    with pytest.raises(FetchError, match="failed while sending the request"), RoundTrip(request_to(peer, "drop.bin"), 5) as trip:
        trip.start()


def test_a_cancel_from_another_thread_stops_the_read(peer):
    cancel = Cancel()
    with RoundTrip(request_to(peer, "a.bin"), timeout=5, cancel=cancel) as trip:
        trip.start()
        chunks = trip.chunks(1000)
        next(chunks)
        threading.Thread(target=cancel.set).start()
        with pytest.raises(Cancelled):
            for _ in chunks:
                pass


# -- kept connections --------------------------------------------------------------------------------


def read_whole(trip: RoundTrip) -> bytes:
    assert trip.start().status == 200
    body = trip.read_exactly(len(BODY))
    assert trip.read_exactly(10) == b""  # the end
    return body


def test_a_pool_keeps_a_connection_read_to_its_end_for_the_next_round_trip(peer):
    pool = Connections(timeout=5)
    try:
        for _ in range(3):
            with RoundTrip(kept(peer, "a.bin"), 5, pool=pool) as trip:
                assert read_whole(trip) == BODY
        with RoundTrip(kept(peer, "a.bin"), 5, pool=pool) as trip:  # left unread: not reused
            trip.start()
        with RoundTrip(kept(peer, "a.bin"), 5, pool=pool) as trip:
            assert read_whole(trip) == BODY
    finally:
        pool.close()
    ports = peer.ports[-5:]
    assert len(set(ports[:4])) == 1 and ports[4] != ports[0], ports


def test_requests_sent_ahead_are_answered_in_their_turn_on_connections_of_their_own(peer):
    pool = Connections(timeout=5)
    try:
        trips = [RoundTrip(kept(peer, f"{name}.bin"), 5, pool=pool) for name in ("a", "gone", "b")]
        for trip in trips:
            trip.send()
        assert len(peer.ports) >= 3  # all three asked before any answer is read
        assert read_whole(trips[0]) == BODY
        assert trips[1].start().status == 404
        assert read_whole(trips[2]) == BODY
        for trip in trips:
            trip.close()
    finally:
        pool.close()
    assert len(set(peer.ports[-3:])) == 3


def test_a_kept_connection_the_server_closed_is_replaced_and_the_request_sent_again(peer):
    pool = Connections(timeout=5)
    try:
        with RoundTrip(kept(peer, "hangup.bin"), 5, pool=pool) as trip:
            assert read_whole(trip) == BODY  # the server closes this connection after the answer
        with RoundTrip(kept(peer, "a.bin"), 5, pool=pool) as trip:
            assert read_whole(trip) == BODY
    finally:
        pool.close()
    assert peer.seen[-1][1].endswith("a.bin") and peer.ports[-1] != peer.ports[-2]


def test_a_failure_to_send_ahead_is_raised_when_the_answer_is_asked_for():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    trip = RoundTrip(build_request(f"http://127.0.0.1:{port}/", ["a.bin"]), 5, pool=Connections(5))
    trip.send()  # no error yet
    with pytest.raises(FetchError, match="failed while connecting"):
        trip.start()
    trip.close()


def test_read_exactly_a_body_cut_short_raises(peer):
    with RoundTrip(request_to(peer, "cut.bin"), timeout=5) as trip:
        trip.start()
        with pytest.raises(FetchError, match="short of its Content-Length"):
            trip.read_exactly(len(BODY))
