"""The app every Axon target serves in a benchmark: Axon's built-in endpoints over ``$AXON_ROOT``
plus one user endpoint, the JSON echo of seed 004 (POST a small user object, get it back).

    gunicorn axon.bench.echo_app:wsgi
    uvicorn axon.bench.echo_app:asgi

The echo measures what Axon's request layer costs a user's own handler. It rebuilds the object
field by field, as seed 004's endpoint does, rather than returning the parsed body, so that the
work is the same as there. It is declared ``blocking=False`` because it never blocks, which is
what its author would write: async runtimes then call it inline instead of in a thread pool.
The extra route is one more exact-path entry, so it costs the file endpoints nothing.
"""

from __future__ import annotations

from ..app import App, Request
from ..asgi import create_app
from ..wsgi import WSGIApp

app = App()  # root: $AXON_ROOT


@app.route("/api/echo", methods=["POST"], blocking=False)
def echo(request: Request) -> dict:
    user = request.json()
    return {"id": user["id"], "name": user["name"], "email": user["email"]}


wsgi = WSGIApp(app)
asgi = create_app(app=app)
