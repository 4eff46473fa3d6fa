"""axon.batchclient.transport: the blocking RoundTrip, over real sockets to a real HTTP server."""

from __future__ import annotations

import socket
import threading

import pytest
from http_peer import BODY, http_peer

from axon.batchclient.errors import FetchError
from axon.batchclient.request import build_request
from axon.batchclient.transport import RoundTrip
from axon.client.cancel import Cancel, Cancelled


@pytest.fixture(scope="module")
def peer():
    with http_peer() as server:
        yield server


def request_to(peer, *files: str):
    return build_request(f"http://127.0.0.1:{peer.server_address[1]}/", list(files), method="GET")


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
