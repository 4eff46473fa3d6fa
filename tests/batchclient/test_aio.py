"""axon.batchclient.aio: the async AsyncRoundTrip on aiohttp, over real sockets to a real server."""

from __future__ import annotations

import asyncio
import socket

import pytest
from http_peer import BODY, http_peer

pytest.importorskip("aiohttp")

from axon.batchclient.aio import AsyncRoundTrip, session_for_one_fetch  # noqa: E402
from axon.batchclient.errors import FetchError  # noqa: E402
from axon.batchclient.request import build_request  # noqa: E402


@pytest.fixture(scope="module")
def peer():
    with http_peer() as server:
        yield server


def request_to(port: int, *files: str):
    return build_request(f"http://127.0.0.1:{port}/", list(files), method="GET")


async def fetch(request, chunk_size=None) -> tuple[int, bytes]:
    async with session_for_one_fetch(5) as session, AsyncRoundTrip(session, request) as trip:
        head = await trip.start()
        if not head.ok:
            return head.status, await trip.error_body()
        return head.status, b"".join([chunk async for chunk in trip.chunks(chunk_size)])


def test_an_async_round_trip_reads_the_answer_as_sent(peer):
    request = request_to(peer.server_address[1], "a.bin")
    assert asyncio.run(fetch(request)) == (200, BODY)
    assert asyncio.run(fetch(request, 1000)) == (200, BODY)
    method, target, headers = peer.seen[-1]
    assert (method, target) == ("GET", request.target)  # the target as built, not encoded again


def test_a_chunked_answer_whose_chunk_ends_arrive_apart_is_read_to_its_end(peer):
    """aiohttp then reports each chunk's end as an empty read of its own, which is not the end."""
    assert asyncio.run(fetch(request_to(peer.server_address[1], "apart.bin"))) == (200, BODY)


def test_a_refusal_and_failures_in_the_transports_words(peer):
    status, body = asyncio.run(fetch(request_to(peer.server_address[1], "gone.bin")))
    assert status == 404 and b'"not_found"' in body
    with pytest.raises(FetchError, match="the body was cut short"):
        asyncio.run(fetch(request_to(peer.server_address[1], "cut.bin")))
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(FetchError, match=f"127.0.0.1:{port}: failed while connecting"):
        asyncio.run(fetch(request_to(port, "a.bin")))
