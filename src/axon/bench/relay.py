"""A TCP relay that holds every chunk for a while in each direction, like a long link.

    python -m axon.bench.relay --listen 127.0.0.1:0 --to 127.0.0.1:8000 --delay-ms 10

prints the port it listens on (one line, then nothing else) and forwards every connection to
``--to``. Each chunk read from either side is written on ``delay`` later, in the order it was read:
with 10 ms each way a request and its answer take 20 ms more, as over a link with a 20 ms round
trip. It stands in for ``tc netem`` where the kernel has none, and it runs in its own process so
that no sleep ever sits inside the server or the client being measured.

A new connection costs ``--connect-ms`` more (default 0): the kernel completes the handshake
before the relay sees the connection, so the relay instead holds the client's first bytes that much
longer, as a link whose handshake takes a round trip would (set it to twice ``--delay-ms``).

``start()`` runs it from Python (tests, benchmark scripts) and returns once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import select
import subprocess
import sys
from dataclasses import dataclass

CHUNK = 256 * 1024
#: Bytes one direction may hold before the relay stops reading from that direction's source, so a
#: fast sender fills the kernel's buffers and TCP's window instead of this process's memory.
HIGH_WATER = 4 * 1024 * 1024

_EOF = b""  # the source sent FIN: shut down writing on the sink
_RESET = None  # the source failed: drop the sink


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) -> ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class _Direction:
    """One direction of one connection: what ``source`` sends reaches ``sink`` ``delay`` later."""

    def __init__(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, delay: float):
        self._source, self._sink, self._delay = source, sink, delay
        self._held: collections.deque = collections.deque()  # (due, chunk | _EOF | _RESET)
        self._held_bytes = 0
        self._changed = asyncio.Event()  # the reader queued a chunk, or the writer freed room

    async def run(self) -> None:
        reading = asyncio.ensure_future(self._read())
        try:
            await self._write()
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        last_due = 0.0
        while True:
            while self._held_bytes > HIGH_WATER:
                self._changed.clear()
                await self._changed.wait()
            try:
                chunk = await self._source.read(CHUNK)
            except OSError:
                chunk = _RESET
            # Never earlier than the chunk before it: the clock could step, order must not.
            last_due = max(loop.time() + self._delay, last_due)
            self._held.append((last_due, chunk))
            self._held_bytes += len(chunk or b"")
            self._changed.set()
            if not chunk:
                return

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        sink = self._sink
        while True:
            while not self._held:
                self._changed.clear()
                await self._changed.wait()
            due, chunk = self._held[0]
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._held.popleft()
            if chunk is _RESET:
                sink.transport.abort()
                return
            if chunk == _EOF:
                if sink.can_write_eof():
                    sink.write_eof()
                return
            self._held_bytes -= len(chunk)
            self._changed.set()
            sink.write(chunk)
            await sink.drain()


async def _connection(client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter,
                      to: tuple[str, int], delay: float, connect: float = 0.0) -> None:
    if connect:
        await asyncio.sleep(connect)  # the handshake's round trip: nothing is read before it ends
    try:
        server_in, server_out = await asyncio.open_connection(*to, limit=CHUNK)
    except OSError:
        client_out.transport.abort()
        return
    directions = [asyncio.ensure_future(_Direction(client_in, server_out, delay).run()),
                  asyncio.ensure_future(_Direction(server_in, client_out, delay).run())]
    try:
        done, _ = await asyncio.wait(directions, return_when=asyncio.FIRST_EXCEPTION)
        if any(not task.cancelled() and task.exception() for task in done):
            # A sink went away while we wrote to it: drop both ends, as a broken link would.
            client_out.transport.abort()
            server_out.transport.abort()
    finally:
        for task in directions:
            task.cancel()
        await asyncio.gather(*directions, return_exceptions=True)
        for out in (client_out, server_out):
            out.close()


async def serve(listen: tuple[str, int], to: tuple[str, int], delay_ms: float,
                ready=None, connect_ms: float = 0.0) -> None:
    """Relay connections to ``listen`` on to ``to`` until cancelled; ``ready(port)`` once listening."""
    delay, connect = delay_ms / 1000.0, connect_ms / 1000.0
    # The loop holds tasks weakly, and a connection whose both sockets wait (one at EOF, the
    # other idle) is referenced by nothing else: without this set it is collected mid-flight.
    live: set[asyncio.Task] = set()

    async def handle(reader, writer):
        task = asyncio.current_task()
        live.add(task)
        try:
            await _connection(reader, writer, to, delay, connect)
        finally:
            live.discard(task)

    server = await asyncio.start_server(handle, *listen, limit=CHUNK, backlog=1024)
    if ready is not None:
        ready(server.sockets[0].getsockname()[1])
    async with server:
        await server.serve_forever()


@dataclass
class Relay:
    """A relay process started by ``start()``: ``.port`` to connect to, ``.stop()`` when done
    (also on leaving a ``with`` block); ``pid``, ``poll()`` and ``wait()`` as a Popen has them."""

    process: subprocess.Popen
    host: str
    port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def stop(self, grace: float = 5.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start(listen: str | tuple[str, int], to: str | tuple[str, int], delay_ms: float, timeout: float = 10.0,
          connect_ms: float = 0.0) -> Relay:
    """Run the relay in its own process; return once it listens (``listen`` port 0 picks one).
    Addresses are ``"host:port"`` or ``(host, port)``."""
    from axon.bench.procs import wrap  # ties the relay's life to ours where setpriv exists

    listen, to = _text(listen), _text(to)
    host, _ = parse_address(listen)
    argv = [sys.executable, "-m", "axon.bench.relay", "--listen", listen, "--to", to,
            "--delay-ms", str(delay_ms), "--connect-ms", str(connect_ms)]
    proc = subprocess.Popen(wrap(argv, None), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    readable, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if readable else b""
    if not line.strip().isdigit():
        Relay(proc, host, 0).stop()
        raise RuntimeError(f"the relay did not start (printed {line!r})")
    return Relay(proc, host, int(line))


def _text(address: str | tuple[str, int]) -> str:
    if isinstance(address, str):
        return address
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m axon.bench.relay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True, type=parse_address, help="HOST:PORT (port 0: any free port)")
    parser.add_argument("--to", required=True, type=parse_address, help="HOST:PORT to forward to")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="held in each direction (default 10)")
    parser.add_argument("--connect-ms", type=float, default=0.0,
                        help="a new connection's first bytes held this much longer: its handshake (default 0)")
    args = parser.parse_args(argv)

    def ready(port: int) -> None:
        print(port, flush=True)

    try:
        asyncio.run(serve(args.listen, args.to, args.delay_ms, ready, args.connect_ms))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
