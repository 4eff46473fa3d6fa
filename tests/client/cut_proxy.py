"""A TCP proxy that cuts a response short: the client's connection ends after exactly N body bytes.

``proxy.cuts = [1234, None]``: the first connection's response stops after 1234 bytes of body
(its head passes whole), the second passes whole. The cut is a clean close (FIN), as when a
server or a middlebox goes away, so the client sees exactly the bytes before the cut.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit


class CutProxy:
    def __init__(self, upstream_url: str) -> None:
        url = urlsplit(upstream_url)
        self._upstream = (url.hostname or "127.0.0.1", url.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.cuts: list[int | None] = []
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> CutProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Closing alone does not wake a thread blocked in accept(); a shutdown does (Linux).
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            cut = self.cuts[self.connections] if self.connections < len(self.cuts) else None
            self.connections += 1
            threading.Thread(target=self._serve, args=(client, cut), daemon=True).start()

    def _serve(self, client: socket.socket, cut: int | None) -> None:
        upstream = socket.create_connection(self._upstream)
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
        head: bytearray | None = bytearray()
        sent = 0
        try:
            while cut is None or sent < cut:
                data = upstream.recv(65536)
                if not data:
                    break
                if head is not None:
                    head += data
                    end = head.find(b"\r\n\r\n")
                    if end < 0:
                        continue
                    client.sendall(head[: end + 4])
                    data, head = bytes(head[end + 4 :]), None
                if cut is not None:
                    data = data[: cut - sent]
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)  # FIN after the bytes sent: nothing is lost
            upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """The request direction: copy until either side closes."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        source.close()
