"""A real HTTP server on loopback for the transports' tests, answering by path:
``/api/stream-files`` with ``BODY`` (in chunks, or cut short, or in chunked coding with each
chunk's closing CRLF sent apart), a JSON refusal, a server that
closes at once, one that closes its kept connection after answering without saying so. What it
received is kept in ``seen``, and the client port of each request in ``ports``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = b"0123456789" * 10_000
REFUSAL = {"error": {"status": 404, "code": "not_found", "message": "no such file", "paths": ["gone.bin"]}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each write goes out as written

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.server.seen.append((self.command, self.path, dict(self.headers)))  # type: ignore[attr-defined]
        self.server.ports.append(self.client_address[1])  # type: ignore[attr-defined]
        query = self.path.partition("?")[2]
        if "gone" in query:
            body = json.dumps(REFUSAL).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif "cut" in query:  # announces it all, sends half, closes
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[: len(BODY) // 2])
            self.close_connection = True
        elif "drop" in query:  # no answer at all
            self.close_connection = True
        elif "apart" in query:  # chunked; a chunk's data, then a pause, then the CRLF that ends it
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(BODY), 20_000):
                piece = BODY[at : at + 20_000]
                for write in (b"%x\r\n%s" % (len(piece), piece), b"\r\n"):
                    self.wfile.write(write)
                    self.wfile.flush()
                    time.sleep(0.02)
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            for at in range(0, len(BODY), 7_000):
                self.wfile.write(BODY[at : at + 7_000])
                self.wfile.flush()
            if "hangup" in query:  # a kept connection the server then closes, as an idle timeout does
                self.close_connection = True


@contextmanager
def http_peer() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.seen = []  # type: ignore[attr-defined]
    server.ports = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
