"""The listing's rendering (pure: from Entry facts) and its planning (a real FileStore).

The HTML is read back with the standard library's HTML parser, as a browser would read it:
hostile names (quotes, <, &, CR/LF, non-ASCII, markup) must come out as the same text, links
and checkbox values, and never as markup.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError
from axon.limits import Limits
from axon.errors import BadRequest, NotFound
from axon.plan.listing import (
    back_link, batch_directory, error_page, form_download, human_size, plan_listing, render_html, render_json,
    sort_entries, utc_time, wants_json, wants_page,
)
from axon.response import Response
from axon.storage import Entry
from axon.storage.local import FileStore

HOSTILE = [
    'quo"te\'s.txt',
    "<script>alert(1)</script>.txt",
    "a&amp;b &lt; c.txt",
    "cr\rlf\n.txt",
    "ünï cödé 日本.txt",
    "</td></tr></table></form><form action=//evil>",
    "100% ?#;.txt",
    "-- comment -->",
]
T = 1_700_000_000_500_000_000  # 2023-11-14 22:13:20.5 UTC


class Page(HTMLParser):
    """What a browser sees of the page: links, checkboxes, forms, buttons, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[str, str]] = []  # (href, text)
        self.boxes: list[dict] = []
        self.forms: list[dict] = []
        self.buttons: list[dict] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.all_text: list[str] = []  # every text node, as shown (text above restarts at each link)
        self._href: str | None = None
        self._in_script = self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "a":
            self._href = attrs["href"]
            self.text = []
        elif tag == "input":
            self.boxes.append(attrs)
        elif tag == "form":
            self.forms.append(attrs)
        elif tag == "button":
            self.buttons.append(attrs)
        elif tag == "script":
            self._in_script = True
            self.scripts.append("")
        elif tag == "style":
            self._in_style = True
            self.styles.append("")

    def handle_endtag(self, tag):
        if tag == "a":
            self.links.append((self._href, "".join(self.text)))
        elif tag == "script":
            self._in_script = False
        elif tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        if self._in_style:
            self.styles[-1] += data
        self.text.append(data)
        self.all_text.append(data)


def parse(body: bytes) -> Page:
    page = Page()
    page.feed(body.decode("utf-8"))
    page.close()
    return page


def files(*names: str, size: int = 1) -> list[Entry]:
    return [Entry(name, "file", size, T) for name in names]


# -- rendering ------------------------------------------------------------------------------------


def test_json_shape():
    entries = sort_entries([Entry("b.txt", "file", 12, T), Entry("d", "dir", 0, T), Entry("a.txt", "file", 0, T)])
    data = json.loads(render_json("sub/", entries, False))
    assert data == {
        "path": "sub/",
        "truncated": False,
        "entries": [
            {"name": "d", "type": "dir", "mtime": 1700000000.5},
            {"name": "a.txt", "type": "file", "size": 0, "mtime": 1700000000.5},
            {"name": "b.txt", "type": "file", "size": 12, "mtime": 1700000000.5},
        ],
    }
    assert json.loads(render_json("", [], True)) == {"path": "", "entries": [], "truncated": True}


def test_json_hostile_names_round_trip():
    body = render_json("", files(*HOSTILE), False)
    body.decode("ascii")  # every other character escaped
    assert [e["name"] for e in json.loads(body)["entries"]] == HOSTILE


def test_sorted_directories_first():
    entries = [Entry("b", "file", 1, T), Entry("z", "dir", 0, T), Entry("a", "file", 1, T), Entry("B", "dir", 0, T)]
    assert [e.name for e in sort_entries(entries)] == ["B", "z", "a", "b"]


def test_html_hostile_names():
    body = render_html("", files(*HOSTILE), False)
    page = parse(body)
    # No name became markup: the only elements are the page's own.
    assert set(page.tags) <= {"html", "head", "meta", "title", "style", "body", "h1", "form", "p", "button",
                              "table", "thead", "tbody", "tr", "th", "td", "a", "input", "script"}
    assert len(page.forms) == 1 and page.tags.count("script") == 1  # the page's own, after every name
    shown = {text: href for href, text in page.links}
    for name in HOSTILE:
        assert unquote(shown[name]) == "/files/" + name
    for href in shown.values():
        assert href.isascii() and not any(c in href for c in " \"'<>&\r\n#?")  # all percent-encoded
    values = [b["value"] for b in page.boxes if "value" in b]
    assert values == [n for n in HOSTILE if "\r" not in n and "\n" not in n]  # in the order given
    # A name with a line break gets a disabled checkbox: a form would send it with CRLF.
    assert [b for b in page.boxes if "disabled" in b and "name" not in b]


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1),
                min_size=1, max_size=5, unique=True))
def test_html_any_names_come_back_as_they_are(names):
    """Whatever a name holds, a parser reads back the same name as the link's text, its URL
    and the checkbox's value (but for names with a line break: a form would send it as CRLF),
    and no name adds an element to the page."""
    page = parse(render_html("d/", files(*names), False))
    # One checkbox per name, and select-all.
    assert page.tags.count("a") == len(names) + 1 and page.tags.count("input") == len(names) + 1
    assert page.tags.count("script") == 1
    assert [unquote(href, errors="strict") for href, _ in page.links[1:]] == ["/files/d/" + n for n in names]
    assert [text for _, text in page.links[1:]] == names
    boxes = [b["value"] for b in page.boxes if "value" in b]
    assert boxes == ["d/" + n for n in names if "\r" not in n and "\n" not in n]


def test_html_form_targets_the_batch_urls():
    page = parse(render_html("sub/", files("x.bin"), False))
    # POST: a GET of a few hundred ticked paths is a URL longer than servers take (a 414).
    assert page.forms == [{"id": "batch", "method": "post", "action": "/api/stream-files"}]
    assert {b.get("formaction") for b in page.buttons} == {
        "/api/stream-files.zip", "/api/stream-files.tar", "/api/stream-files",
    }
    select_all, *boxes = page.boxes
    # Unnamed, so never sent; hidden until the script that makes it work shows it.
    assert "name" not in select_all and select_all["id"] == "all" and "hidden" in select_all
    assert boxes == [{"type": "checkbox", "name": "f", "value": "sub/x.bin"}]  # relative to the root
    assert ("/files/sub/x.bin", "x.bin") in page.links
    assert ("/browse/", "../") in page.links


def test_html_directories_and_parent_links():
    page = parse(render_html("a b/c%d/", [Entry("e?f", "dir", 0, T)], False))
    assert ("/browse/a%20b/", "../") in page.links
    assert ("/browse/a%20b/c%25d/e%3Ff/", "e?f/") in page.links
    assert [b for b in page.boxes if "name" in b] == []  # directories are not ticked: a batch names files
    assert ("/browse/", "../") in parse(render_html("top/", [], False)).links
    assert not any(text == "../" for _, text in parse(render_html("", [], False)).links)


def test_html_readable_sizes_and_dates():
    body = render_html("", [Entry("big", "file", 3 * 1024**3 // 2, T)], False).decode()
    assert "1.5 GiB" in body and "2023-11-14 22:13:20" in body
    assert "the directory holds more" not in body
    assert "the directory holds more" in render_html("", [], True).decode()


@pytest.mark.parametrize(
    "size, text",
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 1024**2, "5.0 MiB"),
     (2**50 * 3, "3.0 PiB"), (2**60, "1024.0 PiB")],
)
def test_human_size(size, text):
    assert human_size(size) == text


def test_utc_time():
    assert utc_time(0) == "1970-01-01 00:00:00"
    assert utc_time(T) == "2023-11-14 22:13:20"


@pytest.mark.parametrize(
    "accept, json_wanted",
    [
        ("", False),
        ("*/*", False),
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", False),  # a browser
        ("application/json, text/html;q=0.5", True),
        ("text/html, application/json", False),  # a tie: HTML
        ("application/json;q=0", False),
        ("application/json;q=0.5, */*;q=0.1", True),
        ("application/*", True),
        ("text/*;q=0.2, application/json;q=0.3", True),
        ("application/json;q=nonsense", True),  # a q that is not a number counts as 1 (axon.http.accept)
    ],
)
def test_wants_json(accept, json_wanted):
    assert wants_json(accept) is json_wanted


def _hash_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def test_the_only_script_is_the_one_the_policy_allows(tmp_path):
    """The page's policy runs a script and applies a style only by their hashes: the page's own
    match them, and nothing else on the page (hostile names included) is a script or a style."""
    (tmp_path / "<script>alert(1)<!--.txt").write_bytes(b"x")
    resp = plan_listing(FileStore(tmp_path), "", {}, Limits())
    page = parse(b"".join(resp.body))
    policy = dict(resp.headers)["Content-Security-Policy"]
    assert len(page.scripts) == 1 and len(page.styles) == 1
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == _hash_source(page.scripts[0])  # that script, and no other
    assert directives["style-src"] == _hash_source(page.styles[0])  # no 'unsafe-inline' (REDbot warns)
    assert directives["default-src"] == "'none'" and directives["form-action"] == "'self'"
    assert "all.checked" in page.scripts[0]  # select-all


# -- what the App answers the page's form -----------------------------------------------------------


@pytest.mark.parametrize(
    "paths, directory",
    [
        (["sub/a.txt", "sub/b.txt"], "sub/"),
        (["a/b/c.txt", "a/b/d/e.txt"], "a/b/"),
        (["a/b/c.txt", "a/x/e.txt"], "a/"),
        (["./a//b/c.txt", "a/b/../b/d.txt"], "a/b/"),  # as the store normalizes them
        (["a.txt", "sub/b.txt"], ""),
        (["a.txt"], ""),
        (["x/a.txt", "y/a.txt"], ""),
        (["sub/a.txt", "../etc/passwd"], ""),  # a refused path names no directory
        ([], ""),
    ],
)
def test_batch_directory(paths, directory):
    assert batch_directory(paths) == directory


def _disposition(paths: list[str], suffix: str) -> str:
    planned = Response(
        200, [("Content-Type", "application/zip"), ("Content-Disposition", 'attachment; filename="batch.zip"')], [b"z"]
    )
    headers = form_download(planned, paths, suffix).headers
    assert [k for k, _ in headers].count("Content-Disposition") == 1
    return dict(headers)["Content-Disposition"]


def test_form_download_is_named_after_the_directory():
    assert _disposition(["photos/2024/a.jpg", "photos/2024/b.jpg"], ".zip") == (
        "attachment; filename=\"2024.zip\"; filename*=UTF-8''2024.zip"
    )
    assert _disposition(["a.txt", "b.txt"], ".tar").startswith('attachment; filename="batch.tar"')  # the root
    # Escaped as every file name Axon sends: an ASCII fallback without quotes, the real name encoded.
    hostile = _disposition(['r\u00e9sum\u00e9 "q";% \u65e5/a.bin'], ".multipart")
    assert hostile == (
        "attachment; filename=\"resume _q_;% _.multipart\"; "
        "filename*=UTF-8''r%C3%A9sum%C3%A9%20%22q%22%3B%25%20%E6%97%A5.multipart"
    )
    assert "\r" not in _disposition(["cr\rlf\n/a.bin"], ".zip") and "\n" not in _disposition(["cr\rlf\n/a.bin"], ".zip")


def test_form_download_leaves_a_304_alone():
    resp = form_download(Response(304, [("ETag", '"x"')]), ["sub/a"], ".zip")
    assert resp.headers == [("ETag", '"x"')]


@pytest.mark.parametrize(
    "paths, referer, back",
    [
        ([], "http://h:8000/browse/a%20b/", "/browse/a%20b/"),  # where the form was
        (["x/y.bin"], "http://h:8000/browse/a%20b/", "/browse/a%20b/"),
        (["x/y.bin"], "", "/browse/x/"),  # no Referer (a policy may strip it): the files' directory
        (["x/y.bin"], "http://elsewhere/not/a/listing", "/browse/x/"),
        ([], "", "/browse/"),
        ([], "https://evil.example//browse/x", "/browse/"),  # its path is "//browse/x": not a listing
        ([], "http://h/browse/%22%3E%3Cscript%3E/\r\n", "/browse/%22%3E%3Cscript%3E/"),  # only the path, encoded
        ([], "http://h/browse/%ff%0d%0a/", "/browse/%EF%BF%BD%0D%0A/"),
    ],
)
def test_back_link(paths, referer, back):
    assert back_link(paths, referer) == back


@pytest.mark.parametrize(
    "accept, page_wanted",
    [
        ("text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8", True),  # Chromium
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),  # Firefox
        ("", False), ("*/*", False), ("application/json", False), ("text/html, application/json", False),
        ("application/json;q=0.5, text/html", True),
    ],
)
def test_wants_page(accept, page_wanted):
    assert wants_page(accept) is page_wanted


def test_error_page_is_readable_and_escaped():
    hostile = "<script>alert(1)</script>&.bin"
    error = NotFound("no such file", paths=[hostile], headers=[("Retry-After", "1")])
    resp = error_page(error, back_link(['sub dir/"<b>&/x.bin']))
    assert resp.status == 404
    headers = dict(resp.headers)
    assert headers["Content-Type"] == "text/html; charset=utf-8" and headers["Cache-Control"] == "no-store"
    assert headers["Retry-After"] == "1" and headers["Content-Security-Policy"].startswith("default-src 'none'")
    page = parse(b"".join(resp.body))
    assert f"style-src {_hash_source(page.styles[0])};" in headers["Content-Security-Policy"]
    assert "script" not in page.tags and "form" not in page.tags
    text = "".join(page.all_text)
    assert "No such file." in text and hostile in text and "404 Not Found" in text
    assert page.links == [("/browse/sub%20dir/%22%3Cb%3E%26/", "Back to the listing")]
    # A refusal naming several paths lists each with its own reason; no link when there is no listing.
    several = BadRequest("2 of the 3 requested files cannot be served", paths=["a", "b"], details=[
        {"path": "a", "status": 404, "code": "not_found", "message": "no such file"},
        {"path": "b\r\n<i>", "status": 403, "code": "outside_root", "message": "path leaves the root"},
    ])
    page = parse(b"".join(error_page(several, None).body))
    text = "".join(page.all_text)
    assert "a: no such file" in text and "b\r\n<i>: path leaves the root" in text and page.links == []
    assert "i" not in page.tags


# -- planning, on a real store --------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> FileStore:
    root = tmp_path / "root"
    (root / "sub dir").mkdir(parents=True)
    (root / "sub dir" / "x.txt").write_bytes(b"xx")
    (root / "a.txt").write_bytes(b"aaa")
    (root / ".hidden").write_bytes(b"h")
    os.symlink("/etc", root / "out")
    return FileStore(root)


def _plan(store, path, accept="", limits=Limits()):
    return plan_listing(store, path, {"accept": accept} if accept else {}, limits)


def test_plan_json_and_html(tree):
    resp = _plan(tree, "", "application/json")
    assert resp.status == 200 and ("Vary", "Accept") in resp.headers
    assert ("Content-Type", "application/json") in resp.headers
    names = [e["name"] for e in json.loads(b"".join(resp.body))["entries"]]
    assert names == ["sub dir", "a.txt"]
    resp = _plan(tree, "sub dir/")
    assert ("Content-Type", "text/html; charset=utf-8") in resp.headers
    assert dict(resp.headers)["Content-Security-Policy"].startswith("default-src 'none'")
    assert dict(resp.headers)["Content-Length"] == str(len(b"".join(resp.body)))
    assert ("/files/sub%20dir/x.txt", "x.txt") in parse(b"".join(resp.body)).links


@pytest.mark.parametrize(
    "path, location",
    [
        ("sub dir", "/browse/sub%20dir/"),  # a directory without its slash
        ("a.txt", "/files/a.txt"),  # a file: where it is served
        ("sub dir//", "/browse/sub%20dir/"),  # one URL per directory
        ("./sub dir/./", "/browse/sub%20dir/"),
        ("sub dir/../", "/browse/"),
        ("sub dir/..", "/browse/"),
        ("sub dir/x.txt", "/files/sub%20dir/x.txt"),
    ],
)
def test_plan_redirects(tree, path, location):
    resp = _plan(tree, path)
    assert resp.status == 308 and dict(resp.headers)["Location"] == location


@pytest.mark.parametrize(
    "path, status", [("out/", 403), ("out", 403), (".hidden", 403), ("a.txt/", 404), ("nope/", 404), ("../", 403)]
)
def test_plan_refuses(tree, path, status):
    with pytest.raises(HTTPError) as caught:
        _plan(tree, path)
    assert caught.value.status == status


def test_plan_cap(tree):
    data = json.loads(b"".join(_plan(tree, "", "application/json", Limits(max_listing=1)).body))
    assert data["truncated"] is True and len(data["entries"]) == 1
