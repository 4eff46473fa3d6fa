"""The directory listing, ``GET /browse/<dir>/`` (on: the e2e servers run with AXON_BROWSE=1),
on every runtime: JSON for programs, HTML for people, the jail's rules, and the page's form
sending what it lists back as a batch."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest

from e2e_wire import A_SIZE, HOSTILE_NAME, UNICODE_NAME, check_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]  # every runtime over real sockets

JSON = [("Accept", "application/json")]


def listing(server, path: str) -> dict:
    resp = server.get("/browse/" + path, JSON)
    assert resp.status == 200, resp.describe()
    assert resp.header("content-type") == "application/json" and resp.header("vary") == "Accept"
    assert resp.header("cache-control") == "no-cache"
    return json.loads(resp.body)


class Form(HTMLParser):
    """The checkboxes, links and button targets of the page, as a browser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: list[str] = []
        self.links: list[str] = []
        self.actions: list[str] = []
        self.method = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.method = (attrs.get("method") or "get").lower()
        elif tag == "input" and attrs.get("name") == "f" and "disabled" not in attrs:
            self.values.append(attrs["value"])
        elif tag == "a":
            self.links.append(attrs["href"])
        elif tag == "button":
            self.actions.append(attrs["formaction"])


def test_json_listing(server, served_root):
    data = listing(server, "examples/")
    assert data["path"] == "examples/" and data["truncated"] is False
    got = {e["name"]: e for e in data["entries"]}
    # Served files only: not the FIFO, nor the link to /dev/zero. (Other tests add files here.)
    assert set(got) >= {"a.bin", "b.bin", "small.txt", "empty.bin", "big.bin", "link.bin", HOSTILE_NAME, UNICODE_NAME}
    assert "fifo" not in got and "zero.bin" not in got
    for name, entry in got.items():
        st = (served_root / "examples" / name).stat()
        assert (entry["type"], entry["size"]) == ("file", st.st_size), name
        assert entry["mtime"] == pytest.approx(st.st_mtime_ns / 1e9, abs=1e-6)
    assert got["link.bin"]["size"] == A_SIZE  # a symlink inside the root, listed as its target
    assert [e["name"] for e in data["entries"]] == sorted(got)


def test_root_listing_obeys_the_jail(server):
    entries = listing(server, "")["entries"]
    # Hidden names, links to them and links out of the root are never shown.
    assert [(e["name"], e["type"]) for e in entries] == [("deep", "dir"), ("examples", "dir")]


@pytest.mark.parametrize(
    "target, status, location",
    [
        ("/browse", 308, "/browse/"),
        ("/browse/deep", 308, "/browse/deep/"),
        ("/browse/deep/dir/c.bin", 308, "/files/deep/dir/c.bin"),
        ("/browse/escdir/", 403, None),
        ("/browse/link-dir/", 403, None),
        ("/browse/.hid/", 403, None),
        ("/browse/examples/a.bin/", 404, None),
        ("/browse/missing/", 404, None),
    ],
)
def test_redirects_and_refusals(server, target, status, location):
    resp = server.get(target)
    assert resp.status == status, resp.describe()
    if location is None:
        assert resp.is_axon_json(), resp.describe()
    else:
        assert resp.header("location") == location


def test_html_page_and_its_form(server, served_root):
    """The page lists what the JSON lists, and its form's POST (what a browser sends when files
    are ticked: form-encoded, so that 400 of them are no 414) is the batch of those files."""
    resp = server.get("/browse/examples/", [("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")])
    assert resp.status == 200, resp.describe()
    assert resp.header("content-type") == "text/html; charset=utf-8" and resp.header("vary") == "Accept"
    form = Form()
    form.feed(resp.body.decode("utf-8"))
    # Every file but the one whose name holds a line break (a form would send it as CRLF).
    names = {"a.bin", "b.bin", "small.txt", "empty.bin", "big.bin", "link.bin", UNICODE_NAME}
    assert set(form.values) >= {"examples/" + n for n in names} and form.values == sorted(form.values)
    assert "examples/" + HOSTILE_NAME not in form.values and "examples/fifo" not in form.values
    assert set(form.actions) == {"/api/stream-files", "/api/stream-files.zip", "/api/stream-files.tar"}
    ticked = [v for v in form.values if v.startswith("examples/") and v[len("examples/"):] in names - {"big.bin"}]
    assert form.method == "post"
    body = urlencode([("f", v) for v in ticked]).encode("ascii")
    batch = server.request("POST", "/api/stream-files", [("Content-Type", "application/x-www-form-urlencoded")], body)
    check_batch(batch, ticked, served_root)
    for link in form.links:
        if link.startswith("/files/"):
            assert server.head(link).status == 200, link


def test_head(server):
    get = server.get("/browse/examples/")
    head = server.head("/browse/examples/")
    assert head.status == 200 and head.body == b""
    assert head.header("content-length") == get.header("content-length") == str(len(get.body))
