"""axon.routing: routes by method and path, their patterns, 405 and OPTIONS * (through the App,
synchronous and asynchronous)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from urllib.parse import unquote, urljoin, urlsplit

import pytest

from axon.app import App, Request, Response, json_response, stream_response
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError, NotFound
from axon.limits import Limits
from test_app import _body, _json, app, call  # noqa: F401 - the App's fixtures and readers


def test_routes(root, call, render):
    app = App(root)
    app.add_route("/exact", lambda r: "exact")
    app.add_route("/items/<name>", lambda r: {"name": r.params["name"]})
    app.add_route("/tree/<path:rest>", lambda r: {"rest": r.params["rest"]})
    app.add_route("/two/<a>/<b>", lambda r: [r.params["a"], r.params["b"]])
    app.add_route("/items/special", lambda r: "exact wins")

    assert _body(call(app, "GET", "/exact"), render) == b"exact"
    assert _json(call(app, "GET", "/items/x.y")) == {"name": "x.y"}
    assert _json(call(app, "GET", "/tree/a/b/c")) == {"rest": "a/b/c"}
    assert _json(call(app, "GET", "/two/1/2")) == ["1", "2"]
    assert _body(call(app, "GET", "/items/special"), render) == b"exact wins"
    for missing in ("/items/a/b", "/items/", "/exact/", "/tree/", "/nope", "/", "/two/1"):
        r = call(app, "GET", missing)
        assert r.status == 404, missing
        assert _json(r)["error"]["code"] == "no_route"


def test_route_decorator_and_methods(root, call):
    app = App(root, builtins=False)

    @app.route("/thing/<id>", methods=["GET"])
    def get(request):
        return {"got": request.params["id"]}

    @app.route("/thing/<id>", methods=["post", "DELETE"])
    def change(request):
        return {"changed": request.params["id"], "method": request.method}

    assert _json(call(app, "GET", "/thing/7")) == {"got": "7"}
    assert _json(call(app, "POST", "/thing/7")) == {"changed": "7", "method": "POST"}
    assert _json(call(app, "DELETE", "/thing/7")) == {"changed": "7", "method": "DELETE"}
    r = call(app, "PUT", "/thing/7")
    assert r.status == 405
    assert dict(r.headers)["Allow"] == "DELETE, GET, HEAD, POST"
    assert _json(r)["error"]["code"] == "method_not_allowed"
    assert call(app, "GET", "/api/health").status == 404  # builtins=False


def test_method_not_allowed(app, call):
    r = call(app, "DELETE", "/api/health")
    assert r.status == 405 and dict(r.headers)["Allow"] == "GET, HEAD"  # HEAD implied by GET
    r = call(app, "PUT", "/api/stream-files")
    assert r.status == 405 and dict(r.headers)["Allow"] == "GET, HEAD, POST"
    r = call(app, "POST", "/files/a.txt")
    assert r.status == 405 and dict(r.headers)["Allow"] == "GET, HEAD"


def test_post_only_route_refuses_head(root, call):
    app = App(root)
    app.add_route("/submit", lambda r: "ok", ["POST"])
    for method in ("GET", "HEAD"):
        r = call(app, method, "/submit")
        assert r.status == 405 and dict(r.headers)["Allow"] == "POST"


def test_route_pattern_must_start_with_slash(app):
    with pytest.raises(ValueError):
        app.add_route("nope", lambda r: "x")


def test_options_asterisk_lists_the_servers_methods(app, call):
    r = call(app, "OPTIONS", "*")
    assert r.status == 200 and dict(r.headers)["Allow"] == "GET, HEAD, OPTIONS, POST"
    assert dict(r.headers)["Content-Length"] == "0"
    r = call(app, "GET", "*")  # the asterisk form is for OPTIONS only
    assert r.status == 405 and dict(r.headers)["Allow"] == "OPTIONS"
