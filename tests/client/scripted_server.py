"""A real HTTP server on a real socket, in a thread, answering whatever each test scripts.

``http_server.reply = fn`` sets how it answers: ``fn(request) -> Reply``. The reply can lie on
purpose (cut the body short, send hostile paths), which a real Axon server never would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes

    @property
    def files(self) -> list[str]:
        """The paths asked for, from the query (GET) or the JSON body (POST)."""
        if self.method == "POST":
            return json.loads(self.body)["files"]
        return [value for _, value in self.query]


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    cut_after: int | None = None  # send only this many body bytes, then close the connection
    chunked: bool = False
    stall: float = 0.0  # seconds to wait, silent, after the (possibly cut) body before closing


class ScriptedServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.reply: Callable[[Recorded], Reply] = lambda request: Reply(404)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # a handler stalling on purpose must not hold up teardown
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def log_message(self, format: str, *args: object) -> None:
                pass  # keep test output quiet

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                url = urlsplit(self.path)
                request = Recorded(
                    self.command,
                    url.path,
                    parse_qsl(url.query, keep_blank_values=True),
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                )
                server.requests.append(request)
                reply = server.reply(request)
                self.send_response(reply.status)
                names = {name.lower() for name, _ in reply.headers}
                for name, value in reply.headers:
                    self.send_header(name, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                elif "content-length" not in names:
                    self.send_header("Content-Length", str(len(reply.body)))
                self.send_header("Connection", "close")
                self.end_headers()
                body = reply.body if reply.cut_after is None else reply.body[: reply.cut_after]
                if reply.chunked:
                    for start in range(0, len(body), 1000):
                        piece = body[start : start + 1000]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    if reply.cut_after is None:
                        self.wfile.write(b"0\r\n\r\n")
                else:
                    self.wfile.write(body)
                self.wfile.flush()
                time.sleep(reply.stall)
                self.close_connection = True

        return Handler

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
