"""What the server uses of an App: the members of ``ServedApp``, and nothing else."""

from __future__ import annotations

import threading

from conftest import FILES, Client, get, shared_app

from axon.app import App, Request
from axon.server.served import ServedApp


class OnlyTheProtocol:
    """An App seen through ``ServedApp`` alone: any other member the server reached for would
    raise ``AttributeError``. Counts what it is asked."""

    __slots__ = ("_app", "handled", "closed")

    def __init__(self, app: App) -> None:
        self._app = app
        self.handled: list[str] = []
        self.closed = 0

    @property
    def limits(self):
        return self._app.limits

    @property
    def store(self):
        return self._app.store

    @property
    def shared_files(self):
        return self._app.shared_files

    def remembers(self):
        return self._app.remembers()

    def records_responses(self):
        return self._app.records_responses()

    def record_sent(self, *args):
        return self._app.record_sent(*args)

    @property
    def routes_version(self):
        return self._app.routes_version

    @property
    def executor(self):
        return self._app.executor

    def handle_on_loop(self, request):
        self.handled.append(request.path)
        return self._app.handle_on_loop(request)

    def fixed_answers(self):
        return self._app.fixed_answers()

    def close(self) -> None:
        self.closed += 1
        self._app.close()


def _app(root) -> App:
    app = shared_app(root)

    @app.route("/blocking")
    def blocking(request: Request) -> str:
        return threading.current_thread().name

    @app.route("/chunks")
    def chunks(request: Request):
        from axon.response import stream_response

        return stream_response(iter([b"a", b"b", b"c"]))

    return app


def test_the_server_needs_nothing_beyond_the_protocol(serve, root) -> None:
    served = OnlyTheProtocol(_app(root))
    _: ServedApp = served  # what mypy checks statically: the wrapper is a ServedApp
    server = serve(served)
    with Client(server.port) as c:
        assert c.get("/api/health").status == 200
        assert served.handled == []  # a fixed answer: sent from bytes, the App not asked
        assert c.get("/files/a.txt").body == FILES["a.txt"]
        assert c.get("/blocking").body.startswith(b"axon-handler")
        assert c.get("/chunks").body == b"abc"
        assert c.get("/nope").status == 404
    assert served.handled == ["/files/a.txt", "/blocking", "/chunks", "/nope"]
    server.stop()
    assert served.closed == 1


def test_an_app_served_again_after_a_stop_runs_blocking_handlers(serve, root) -> None:
    app = _app(root)
    first = serve(app)
    assert get(first.port, "/blocking").status == 200  # the App's thread pool starts
    first.stop()  # and is stopped with the server
    second = serve(app)
    resp = get(second.port, "/blocking")
    assert resp.status == 200 and resp.body.startswith(b"axon-handler")
    assert get(second.port, "/chunks").body == b"abc"  # a stream's generator runs in the pool too


def test_fixed_answers_are_asked_again_by_each_sweep(harness, root) -> None:
    app = App(root)
    h = harness(app)
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\n")
    app.records.attach(type("R", (), {"read": lambda self, records: None, "flush": lambda self: None})())  # now observed
    app.add_route("/api/health", lambda request: {"status": "mine"}, blocking=False)
    h.worker._sweep()
    h.feed(b"GET /api/health HTTP/1.1\r\n\r\n")
    assert [r.body for r in h.responses()] == [b'{"status":"available"}', b'{"status":"mine"}']
    assert h.worker.shortcuts.fixed == {}


def test_the_server_leaves_the_app_as_it_was_built(serve, root) -> None:
    """The worker changes nothing of the App: its store is the one it was built with, before,
    while and after it serves; stopping closes the shared files' descriptors through App.close."""
    app = shared_app(root)
    store = app.store
    server = serve(app)
    assert get(server.port, "/files/a.txt").body == FILES["a.txt"]
    assert app.store is store and app.shared_files is store and len(store.cache) == 1
    server.stop()
    assert app.store is store and len(store.cache) == 0
