"""A TCP proxy that passes responses on slowly: ``SlowProxy(url, rate=200_000)`` sends at most
``rate`` bytes a second to the client, in small pieces, so a download of a few megabytes takes
long enough to interrupt in the middle. Requests pass at full speed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit

PIECE = 8192  # bytes sent at a time


class SlowProxy:
    def __init__(self, upstream_url: str, rate: int) -> None:
        url = urlsplit(upstream_url)
        self._upstream = (url.hostname or "127.0.0.1", url.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.rate = rate
        self.sent = 0  # response bytes passed on, all connections together
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> SlowProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self._listener.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self._upstream)
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
        started = time.monotonic()
        passed = 0
        try:
            while data := upstream.recv(PIECE):
                client.sendall(data)
                passed += len(data)
                self.sent += len(data)
                ahead = passed / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)
            client.close()
            upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
