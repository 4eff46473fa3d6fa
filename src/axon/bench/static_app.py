"""The app behind granian's static-file mount in a benchmark: the health answer, else 404.

granian serves ``/files/`` itself, from Rust (``--static-path-mount``), and passes every other
request to an ASGI app. This one answers the health probe with the bytes nginx's
``return 200`` sends, so that the health and error baselines compare the servers, not apps.
"""

from __future__ import annotations

from typing import Any

_HEALTH = b'{"status":"available"}'
_MISSING = b'{"error":"not_found"}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":  # lifespan: nothing to start or stop
        return
    status, body = (200, _HEALTH) if scope["path"] == "/api/health" else (404, _MISSING)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
