"""A large object sent while the disk tier fills it (:mod:`axon.storage.object_fill`), against a
real SeaweedFS behind a proxy of the test's own that slows the store's answers, counts the ranges
asked of it, and can cut every connection: the first bytes arrive while the fill's temporary file
is still there; a fill cut midway cuts the response short and keeps nothing, and the next request
fills again; twenty requests at once read behind one fill whose ranges cover the object once."""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import HOST, serve

pytest.importorskip("obstore")

from axon.storage.object_tiered import fill_spans  # noqa: E402

MiB = 1 << 20
#: The store's answers, all connections together, in bytes a second: a fill of SIZE takes seconds.
RATE = 16 * MiB
SIZE = 5 * 8 * MiB - 12345  # five ranged GETs (object_tiered.fill_spans)
#: The ranges a fill of SIZE asks for (the rule: test_a_fills_first_round_grows_and_covers_the_object_once).
FILL_RANGES = [(start, stop - 1) for start, stop in fill_spans(SIZE)]
_RANGE = re.compile(rb"(?i)\r\nrange: bytes=(\d+)-(\d+)")


class SlowStore:
    """A TCP proxy to the store, in a thread of its own: what the store answers goes on at RATE
    bytes a second at most (over every connection), the ranges asked are noted, and :meth:`cut`
    aborts every connection and refuses new ones until :meth:`heal`."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.ranges: list[tuple[int, int]] = []  # (first, last) byte of each ranged GET
        self.cutting = False
        #: GETs of the first piece (an opening that leads a fill) still to answer with a 503.
        self.refuse_leads = 0
        #: The first piece's answer stalls past its first MiB until set (:meth:`hold_first_piece`).
        self._first_piece_goes_on: asyncio.Event | None = None
        self._next_free = 0.0
        self._transports: set[asyncio.BaseTransport] = set()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._connection, HOST, 0), self.loop).result(5)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def fill_ranges(self) -> list[tuple[int, int]]:
        """The ranges asked beyond the openings that read the first 64 KiB only (an opening that
        leads a fill asks for its first piece, which the fill goes on with: that one counts)."""
        return sorted(r for r in self.ranges if r != (0, 65535))

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cutting:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(HOST, self.target)
        self._transports |= {writer.transport, up_writer.transport}

        first_piece = False  # this connection asked for the first piece

        async def asks() -> None:
            nonlocal first_piece
            while data := await reader.read(65536):
                asked = [(int(a), int(b)) for a, b in _RANGE.findall(data)]
                first_piece = first_piece or (0, 8 * MiB - 1) in asked
                if self.refuse_leads and (0, 8 * MiB - 1) in asked:
                    self.refuse_leads -= 1
                    writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    await writer.drain()
                    raise ConnectionResetError("refused")  # (closes both sides)
                self.ranges += asked
                up_writer.write(data)

        async def answers() -> None:
            sent = 0
            while data := await up_reader.read(65536):
                held = self._first_piece_goes_on
                if first_piece and held is not None and sent > MiB:
                    await held.wait()
                sent += len(data)
                now = self.loop.time()
                self._next_free = max(now, self._next_free) + len(data) / RATE
                await asyncio.sleep(self._next_free - now)
                writer.write(data)
                await writer.drain()

        try:
            await asyncio.gather(asks(), answers())
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_writer):
                self._transports.discard(w.transport)
                w.transport.abort()

    def hold_first_piece(self) -> None:
        """From now on the first piece's answer stalls after its first MiB, until :meth:`release`."""
        self._first_piece_goes_on = asyncio.Event()

    def release(self) -> None:
        held = self._first_piece_goes_on
        if held is not None:
            self.loop.call_soon_threadsafe(held.set)

    def cut(self) -> None:
        def abort() -> None:
            self.cutting = True
            for transport in list(self._transports):
                transport.abort()

        self.loop.call_soon_threadsafe(abort)

    def heal(self) -> None:
        self.loop.call_soon_threadsafe(setattr, self, "cutting", False)

    def close(self) -> None:
        async def shut() -> None:
            self.server.close()
            for transport in list(self._transports):
                transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def large(weed):
    """One large object in a prefix of its own: (prefix, key, bytes)."""
    prefix = f"fill-{uuid.uuid4().hex[:8]}"
    payload = os.urandom(SIZE)
    weed.put(f"{prefix}/big.bin", payload)
    return prefix, "big.bin", payload


@pytest.fixture
def slow(weed):
    proxy = SlowStore(weed.port)
    yield proxy
    proxy.close()


@pytest.fixture
def served(weed, large, slow, tmp_path):
    """``axon serve`` of the large object's prefix, its store behind the slow proxy, with a disk
    tier: (server, the tier's directory); stopped after the test."""
    cache_dir = tmp_path / "tier"
    server = serve("native", weed.url(large[0]), weed, tmp_path, "--object-disk-cache", str(cache_dir),
                   "--object-cache", "0", AWS_ENDPOINT_URL=slow.endpoint, AXON_STORE_TIMEOUT="20")
    yield server, cache_dir
    server.stop()


def files_in(cache_dir) -> tuple[list[str], list[str]]:
    """(kept files, temporary files) under the tier's directory."""
    names = [f for _, _, fs in os.walk(cache_dir) for f in fs]
    return [f for f in names if "." not in f], [f for f in names if f.endswith(".tmp")]


def kept_soon(cache_dir, within: float = 10.0) -> int:
    """The kept files under the tier's directory once there is one (or ``within`` seconds have
    passed): a fill's sync and rename come after the response's last byte (they change no byte)."""
    deadline = time.monotonic() + within
    while not (kept := files_in(cache_dir)[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(kept)


def first_bytes(port: int, key: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    conn.request("GET", f"/files/{key}")
    response = conn.getresponse()
    return conn, response, response.read(4096)


def rest_of(response: http.client.HTTPResponse) -> bytes:
    """What is left of the body, however the connection ends."""
    got = b""
    try:
        while chunk := response.read1(1 << 20):
            got += chunk
    except (http.client.IncompleteRead, OSError) as exc:
        got += getattr(exc, "partial", b"")
    return got


def written_fill(path, data: bytes, size: int = 300):
    """A fill of an object of ``size`` bytes (on the running loop) whose temporary file at
    ``path`` holds ``data`` from its start, written and not yet checked: (its descriptor, the fill)."""
    from axon.storage.object_fill import Fill

    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fill = Fill("key", size)
    fill.begin(fd)
    os.pwrite(fd, data, 0)
    fill.advance(len(data))
    return fd, fill


def test_the_last_piece_waits_for_the_commit_and_a_failed_fill_gives_nothing_more(tmp_path):
    from axon.storage.object_stream import ObjectStreamBroken

    async def scenario(commit: bool) -> None:
        path = tmp_path / f"object-{commit}.tmp"
        fd, fill = written_fill(path, b"a" * 300)  # all written, not yet checked
        assert await fill.read(0, 100) == b"a" * 100
        last = asyncio.ensure_future(fill.read(200, 100))
        await asyncio.sleep(0.05)
        assert not last.done(), "the last piece was given before the fill was committed"
        os.close(fd)
        if commit:
            fill.finish(os.open(path, os.O_RDONLY))
            assert await last == b"a" * 100
        else:  # the check failed (its length, its MD5): whatever was sent is cut short
            fill.finish(None)
            with pytest.raises(ObjectStreamBroken):
                await last
            with pytest.raises(ObjectStreamBroken):
                await fill.read(0, 100)
        fill.release()

    asyncio.run(scenario(commit=True))
    asyncio.run(scenario(commit=False))


@pytest.mark.parametrize("mib", [0, 0.001, 8, 8.001, 17, 20, 40 - 0.01, 64, 65, 300])
def test_a_fills_first_round_grows_and_covers_the_object_once(mib):
    from axon.storage.object_tiered import FILL_AHEAD, FILL_PIECE

    size = int(mib * MiB)
    spans = fill_spans(size)
    if not size:
        assert spans == []
        return
    assert spans[0] == (0, min(size, FILL_PIECE))  # what a leading opening asks for
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] == size
    assert len(spans) == -(-size // FILL_PIECE)  # no more GETs than equal pieces make
    lengths = [stop - start for start, stop in spans]
    first_round = lengths[1:FILL_AHEAD]
    # Asked together, each ends about when the one before it has: what readers may take grows.
    assert first_round == sorted(first_round) and all(length > 0 for length in first_round)
    if len(first_round) >= 3:
        assert first_round[0] < FILL_PIECE < first_round[-1]
    assert all(length == FILL_PIECE for length in lengths[FILL_AHEAD:-1])


def test_ready_names_the_bytes_in_the_fills_file_when_read_would_give_them(tmp_path):
    # For a server that sends them from the file itself (sendfile): the same waits as read's.
    from axon.http.segments import FileSlice
    from axon.storage.object_stream import ObjectStreamBroken

    async def scenario() -> None:
        fd, fill = written_fill(tmp_path / "object.tmp", b"a" * 200)
        first = await fill.ready(0, 100)
        assert type(first) is FileSlice and first[1:] == (0, 100) and first.fd != fd
        assert os.pread(first.fd, 100, 0) == b"a" * 100
        last = asyncio.ensure_future(fill.ready(200, 100))
        await asyncio.sleep(0.02)
        assert not last.done(), "bytes not yet written were named"
        os.pwrite(fd, b"b" * 100, 200)
        fill.advance(300)
        await asyncio.sleep(0.02)
        assert not last.done(), "the last piece was named before the object was checked"
        fill.finish(None)  # the check failed
        with pytest.raises(ObjectStreamBroken):
            await last
        os.close(fd)
        fill.release()

    asyncio.run(scenario())


def test_the_last_piece_is_given_once_checked_not_after_the_sync(tmp_path):
    # The commit's sync and rename change no byte: a whole response need not wait for them.
    async def scenario() -> None:
        fd, fill = written_fill(tmp_path / "object.tmp", b"a" * 300)
        last = asyncio.ensure_future(fill.read(200, 100))
        await asyncio.sleep(0.02)
        assert not last.done()
        fill.check()  # whole and checked; not committed yet
        assert await asyncio.wait_for(last, 1) == b"a" * 100
        os.close(fd)
        fill.finish(None)
        fill.release()

    asyncio.run(scenario())


@pytest.mark.slow  # SeaweedFS, a proxy and axon serve over sockets
def test_the_first_bytes_arrive_while_the_object_fills(large, slow, served):
    _, key, payload = large
    server, cache_dir = served
    conn, response, head = first_bytes(server.port, key)
    kept, temporary = files_in(cache_dir)
    assert response.status == 200 and head == payload[:4096]
    assert kept == [] and len(temporary) == 1, "the first bytes came only once the fill was over"
    assert head + rest_of(response) == payload
    conn.close()
    assert kept_soon(cache_dir) == 1
    assert slow.fill_ranges() == FILL_RANGES


@pytest.mark.slow
def test_pieces_are_written_as_they_arrive_and_checked_in_order(weed, large, slow, served):
    # The first piece (the opening's lead) stalls after its first MiB: the pieces behind it are
    # written at their own places meanwhile (none waits in memory for its turn), the response
    # stops at the gap, and once the first piece goes on the object is sent whole and kept, its
    # MD5 (one part: the ETag is the MD5) summed in the file's order.
    import hashlib

    import obstore

    prefix, key, payload = large
    etag = obstore.put(weed.store, f"{prefix}/{key}", payload, use_multipart=False)["e_tag"]
    assert etag.strip('"') == hashlib.md5(payload).hexdigest()
    server, cache_dir = served
    slow.hold_first_piece()
    conn, response, head = first_bytes(server.port, key)
    try:
        assert response.status == 200 and head == payload[:4096]
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "the pieces behind the first were not written meanwhile"
            temporary = [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs if f.endswith(".tmp")]
            if temporary:
                with open(temporary[0], "rb") as f:
                    if os.pread(f.fileno(), SIZE, 8 * MiB) == payload[8 * MiB :]:
                        break
            time.sleep(0.05)
        assert files_in(cache_dir)[0] == []
        slow.release()
        assert head + rest_of(response) == payload
    finally:
        slow.release()
        conn.close()
    assert kept_soon(cache_dir) == 1  # whole, and its MD5 agreed
    assert slow.fill_ranges() == FILL_RANGES


@pytest.mark.slow
def test_an_opening_whose_lead_fails_is_filled_by_the_fills_own_gets(large, slow, served):
    # The opening's GET of the first piece fails (a 503, and obstore's two retries) and a HEAD
    # opens the object: there is no lead, so the fill asks for every piece itself, and the request
    # does not wait for a lead of its own (it once waited for itself, and its key with it).
    _, key, payload = large
    server, cache_dir = served
    slow.refuse_leads = 3
    for _ in range(2):
        conn, response, head = first_bytes(server.port, key)
        assert response.status == 200 and head + rest_of(response) == payload
        conn.close()
    assert slow.refuse_leads == 0
    assert slow.fill_ranges() == FILL_RANGES
    assert kept_soon(cache_dir) == 1


@pytest.mark.slow
def test_a_range_short_of_the_end_completes_while_the_object_fills(large, slow, served):
    # The README's rule: a span that ends before the object's last byte (past the opening's first
    # 64 KiB: read behind the fill) does not wait for the whole object to be fetched and checked
    # (one that includes the last byte does: test_the_last_piece_waits_for_the_commit_...).
    _, key, payload = large
    server, cache_dir = served
    first, last = 8 * MiB + 1, 9 * MiB
    conn = http.client.HTTPConnection(HOST, server.port, timeout=30)
    conn.request("GET", f"/files/{key}", headers={"Range": f"bytes={first}-{last}"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert response.status == 206 and body == payload[first : last + 1]
    assert files_in(cache_dir)[0] == [], "the range waited for the whole object"


@pytest.mark.slow
def test_a_fill_cut_midway_cuts_the_response_short_and_keeps_nothing(large, slow, served):
    _, key, payload = large
    server, cache_dir = served
    conn, response, head = first_bytes(server.port, key)
    assert files_in(cache_dir)[0] == [], "the first bytes came only once the fill was over"
    slow.cut()  # the store is gone midway through the fill
    got = head + rest_of(response)
    conn.close()
    assert int(response.headers["Content-Length"]) == SIZE
    assert len(got) < SIZE and got == payload[: len(got)]  # short, never presented as whole
    deadline = time.monotonic() + 10
    while files_in(cache_dir) != ([], []):
        assert time.monotonic() < deadline, f"left in the tier: {files_in(cache_dir)}"
        time.sleep(0.05)
    slow.heal()
    asked = len(slow.fill_ranges())
    conn, response, head = first_bytes(server.port, key)
    assert response.status == 200 and head + rest_of(response) == payload
    conn.close()
    assert len(slow.fill_ranges()) - asked == 5  # filled again, whole
    assert kept_soon(cache_dir) == 1


@pytest.mark.slow
def test_twenty_requests_at_once_read_behind_one_fill(large, slow, served):
    _, key, payload = large
    server, cache_dir = served
    started_at: list[tuple[bool, bool]] = []  # (bytes arrived, with the fill still under way)

    def one(_: int) -> bytes:
        conn, response, head = first_bytes(server.port, key)
        started_at.append((response.status == 200, files_in(cache_dir)[0] == []))
        try:
            return head + rest_of(response)
        finally:
            conn.close()

    with ThreadPoolExecutor(20) as pool:
        bodies = list(pool.map(one, range(20)))
    assert all(body == payload for body in bodies)
    assert all(ok for ok, _ in started_at)
    # Readers that wait for the fill see its file whole at their first byte, every one of them;
    # how many start before the fill ends depends on how soon a loaded machine runs their threads.
    assert any(during for _, during in started_at), "the readers waited for the fill to end"
    ranges = slow.fill_ranges()
    assert ranges == FILL_RANGES  # once, whole


def test_the_crc_of_a_committed_fill_lets_the_store_loop_turn(tmp_path):
    # A zip's entry asks the source for the CRC-32 of an object read behind a fill
    # (ObjectSource.crc32, from a handler's thread): the store loop only waits for the fill to be
    # whole; the object is read and summed elsewhere, so every other fill, open and stream of the
    # process goes on meanwhile.
    import zlib

    from axon.storage.object_file import ObjectFile
    from axon.storage.object_fill import Fill, FillingFile
    from axon.storage.objects import ObjectSource

    size = 32 * MiB
    payload = os.urandom(size)
    path = tmp_path / "object"
    path.write_bytes(payload)
    # The CRC of an object on disk asks nothing of the store: none is given.
    source = ObjectSource("s3://bucket/prefix", store=object(), check=False)
    loop = source._ensure()

    async def committed() -> Fill:
        fill = Fill("big.bin", size)
        fill.finish(os.open(path, os.O_RDONLY))  # committed (by another process, say)
        return fill

    turns: list[float] = []  # when the store loop turned
    done = threading.Event()

    async def other_work() -> None:
        while not done.is_set():
            turns.append(time.perf_counter())
            await asyncio.sleep(0)

    fill = source.run(committed())
    f = FillingFile(ObjectFile(source, "big.bin", '"e"', "big.bin", "big.bin", size, 0, "application/octet-stream"), fill)
    fill.release()  # the fill's own use: the file holds one
    ticker = asyncio.run_coroutine_threadsafe(other_work(), loop)
    try:
        while not turns:
            time.sleep(0.001)
        started = time.perf_counter()
        crc = source.crc32(f)
        ended = time.perf_counter()
    finally:
        done.set()
        ticker.result(5)
        f.close()
        loop.call_soon_threadsafe(loop.stop)
    assert crc == zlib.crc32(payload)
    during = [started] + [t for t in turns if started < t < ended] + [ended]
    still = max(b - a for a, b in zip(during, during[1:]))
    assert still < (ended - started) / 2, f"the store loop stood still {still:.3f} s of the CRC's {ended - started:.3f} s"


@pytest.mark.slow  # SeaweedFS
def test_a_fill_hashes_its_bytes_off_the_store_loop(weed, tmp_path, monkeypatch):
    # The MD5 a fill checks against the ETag is summed by a thread of its own behind the writes:
    # the store loop, which streams every fill, opening and response of the process, never sums.
    import hashlib

    import obstore

    from axon.storage.objects import ObjectSource
    from test_object_listing import source_of

    prefix, key, payload = f"md5-{uuid.uuid4().hex[:8]}", "big.bin", os.urandom(12 * MiB)
    # One part, so that its ETag is its MD5 (and ranged GETs fill it: more than FILL_PIECE).
    etag = obstore.put(weed.store, f"{prefix}/{key}", payload, use_multipart=False)["e_tag"]
    assert etag.strip('"') == hashlib.md5(payload).hexdigest()

    hashed_by: set[str] = set()
    real_md5 = hashlib.md5

    class Watched:
        def __init__(self, *args, **kwargs) -> None:
            self._md5 = real_md5(*args, **kwargs)

        def update(self, data) -> None:
            hashed_by.add(threading.current_thread().name)
            self._md5.update(data)

        def hexdigest(self) -> str:
            return self._md5.hexdigest()

    monkeypatch.setattr(hashlib, "md5", Watched)
    source: ObjectSource = source_of(weed, prefix, cache_bytes=0, disk_cache=str(tmp_path / "tier"))
    f = source.open(key)
    try:
        fd = source.run(f.fill.whole_file())  # the fill, committed: checked by its length and MD5
    finally:
        f.close()
    assert fd is not None
    try:
        assert os.pread(fd, len(payload) + 1, 0) == payload
    finally:
        os.close(fd)
    assert hashed_by and all(name.startswith("axon-md5") for name in hashed_by), hashed_by


def test_a_fill_given_up_waits_for_its_hash_even_when_cancelled_again(tmp_path):
    # The MD5's thread reads the fill's file by its descriptor, which the fill's undoing closes:
    # a fill given up waits for the hashing under way, even if it is cancelled meanwhile (a thread
    # cannot be stopped), and raises the cancellation once the thread is done with the file.
    from axon.storage.object_tiered import Hashing

    gate = threading.Event()
    hashed: list[int] = []

    class SlowMd5:
        def update(self, data) -> None:
            gate.wait(5)
            hashed.append(len(data))

    async def give_up() -> None:
        fd = os.open(tmp_path / "filling", os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(fd, b"x" * 100, 0)
        with ThreadPoolExecutor(1) as executor:
            hashing = Hashing(SlowMd5(), executor, fd)
            hashing.add(50)
            hashing.add(100)
            undoing = asyncio.ensure_future(hashing.abandon())
            await asyncio.sleep(0.05)
            undoing.cancel()
            await asyncio.sleep(0.05)
            assert not undoing.done(), "gave up while its thread still read the file"
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await undoing
            assert hashed == [50, 50]
        os.close(fd)

    asyncio.run(give_up())
