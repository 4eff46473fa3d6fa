"""The app every Axon target serves in a benchmark: Axon's built-in endpoints over ``$AXON_ROOT``
plus one user endpoint, the JSON echo of seed 004 (POST a small user object, get it back).

    gunicorn axon.bench.echo_app:wsgi
    uvicorn axon.bench.echo_app:asgi

The echo measures what Axon's request layer costs a user's own handler. It rebuilds the object
field by field, as seed 004's endpoint does, rather than returning the parsed body, so that the
work is the same as there. It is declared ``blocking=False`` because it never blocks, which is
what its author would write: async runtimes then call it inline instead of in a thread pool.
The extra route is one more exact-path entry, so it costs the file endpoints nothing.

``GET /metrics`` shows the event loop's lag alone (axon.metrics.loop_lag), which the bench reads
before and after each phase; it counts no request, so the figures are those of a server without
``--metrics``. ``axon serve --metrics`` replaces it with the whole set (the lag is in it too).
Under a runtime without Axon's event loop it shows nothing.

``cold_app`` (``cold_wsgi``, ``cold_asgi``) is the same app with a CRC-32 cache that keeps
nothing: every zip batch reads its files for their CRCs, as the first one after a change does.
The zip scenarios' cold case serves it.
"""

from __future__ import annotations

from ..app import App, Request
from ..asgi import create_app
from ..metrics import CONTENT_TYPE
from ..metrics.exposition import render_lag
from ..metrics.loop_lag import LAG
from ..response import Response
from ..settings import Settings
from ..storage.crc_cache import CrcCache
from ..storage.local import FileStore
from ..wsgi import WSGIApp


def echo(request: Request) -> dict:
    user = request.json()
    return {"id": user["id"], "name": user["name"], "email": user["email"]}


def loop_lag(request: Request) -> Response:
    return Response(200, [("Content-Type", CONTENT_TYPE)], [render_lag(LAG.samples())])


def build(cold_crc: bool = False) -> App:
    """Axon's endpoints over ``$AXON_ROOT`` and the echo; ``cold_crc``: no CRC-32 is kept."""
    store = None
    if cold_crc:
        store = FileStore(Settings.from_env().root)
        store.crcs = CrcCache(size=0)
    served = App(store=store)
    served.add_route("/api/echo", echo, ["POST"], blocking=False)
    served.add_route("/metrics", loop_lag, ["GET"], blocking=False)
    return served


app = build()
wsgi = WSGIApp(app)
asgi = create_app(app=app)
cold_app = build(cold_crc=True)
cold_wsgi = WSGIApp(cold_app)
cold_asgi = create_app(app=cold_app)
