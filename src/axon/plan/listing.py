"""The opt-in directory listing (``axon serve --browse``): HTML for people, JSON for programs.

:func:`plan_listing` reads the directory through the storage layer (which applies the root jail,
the hidden rule and the symlink rule: :meth:`~axon.storage.local.FileStore.list_dir`); the
rendering below is pure, from plain :class:`~axon.storage.Entry` facts, and opens nothing.

The JSON is a contract (README, "Browsing"; a later fsspec ``ls`` reads it)::

    {"path": "sub/", "truncated": false,
     "entries": [{"name": "d", "type": "dir", "mtime": 1700000000.5},
                 {"name": "a.txt", "type": "file", "size": 12, "mtime": 1700000000.5}]}

Directories come first, then files, each sorted by name (code point order), as nginx's autoindex
orders them. The HTML page is a form that POSTs (``application/x-www-form-urlencoded``): its
checkboxes (``name="f"``, the value a path relative to the root) become the batch's fields, and
its buttons send them to the batch's URLs. A POST, not a GET: a few hundred ticked paths make a
URL longer than any server takes. A form, not a script's ``fetch()``: the browser streams what
the form gets to disk, where a script would hold the whole archive in memory as a blob. It works
without JavaScript; a script allowed by its hash (and nothing else) adds select-all and says so
on the page when nothing is ticked. What the App answers such a form, :func:`form_download` and
:func:`error_page` decide: the download named after the files' directory, a refusal as a page.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from datetime import datetime, timezone
from http import HTTPStatus
from urllib.parse import quote, unquote, urlsplit

from ..errors import HTTPError
from ..http.accept import negotiate
from ..http.multipart import content_disposition
from ..limits import Limits
from ..response import NO_STORE, Response, redirect
from ..storage import Entry, Source
from ..storage.jail import normalize

#: Where the App serves each thing the page links to.
BROWSE, FILES, BATCH = "/browse/", "/files/", "/api/stream-files"
#: The page's one script: select-all, and a word on the page when a button is pressed with
#: nothing ticked. Without it the form still works (the server then answers with a page).
_SCRIPT = """(function () {
  "use strict";
  var form = document.getElementById("batch"), all = document.getElementById("all");
  var note = document.getElementById("note"), boxes = form.querySelectorAll('input[name="f"]');
  function ticked() {
    var n = 0;
    for (var i = 0; i < boxes.length; i++) if (boxes[i].checked) n++;
    return n;
  }
  if (boxes.length) all.removeAttribute("hidden");
  all.addEventListener("change", function () {
    for (var i = 0; i < boxes.length; i++) boxes[i].checked = all.checked;
    note.textContent = "";
  });
  form.addEventListener("change", function (event) {
    if (event.target === all) return;
    var n = ticked();
    all.checked = n > 0 && n === boxes.length;
    all.indeterminate = n > 0 && n < boxes.length;
    note.textContent = "";
  });
  form.addEventListener("submit", function (event) {
    if (ticked() > 0) return;
    event.preventDefault();
    note.textContent = "Nothing is ticked: tick the files to download (the box above them ticks all), " +
      "then press a button.";
  });
})();"""
_STYLE = """body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}
td,th{padding:.2em .8em;text-align:left}td.n{text-align:right}tr:nth-child(even){background:#f4f4f4}
#note{color:#a00}#note:empty{display:none}"""


def _source(text: str) -> str:
    """A CSP source naming an inline script or style by its hash (CSP Level 3, "hash-source")."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


#: Names on the page are hostile input: a policy that applies only the style and runs only the
#: script above (by their hashes), and loads nothing, is a second wall behind the escaping. Its
#: form may go only to this origin.
_POLICY = (
    f"default-src 'none'; style-src {_source(_STYLE)}; script-src {_source(_SCRIPT)}; "
    "form-action 'self'; base-uri 'none'"
)
#: An error page runs nothing and sends nothing anywhere.
_ERROR_POLICY = f"default-src 'none'; style-src {_source(_STYLE)}; form-action 'none'; base-uri 'none'"
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def plan_listing(store: Source, requested: str, headers: dict[str, str], limits: Limits) -> Response:
    """The listing of ``requested`` (``""`` or ending in ``/``: a directory under the root), or
    a redirect: a directory named without its trailing slash to the URL with it (308, as nginx
    does, so that the page's own links resolve), a file to its ``/files/`` URL (308)."""
    canonical = "/".join(normalize(requested, root_ok=True))  # a bad path: its 400 or 403
    if requested and not requested.endswith("/"):
        if store.kind(canonical) == "dir":
            return redirect(BROWSE + quote(canonical + "/" if canonical else ""), 308)
        return redirect(FILES + quote(canonical), 308)
    path = canonical + "/" if canonical else ""
    if requested != path:  # "a//b/", "a/./b/", "a/../b/": one URL per directory, for the links
        return redirect(BROWSE + quote(path), 308)
    entries, truncated = store.list_dir(path, limits.max_listing)
    entries = sort_entries(entries)
    if wants_json(headers.get("accept", "")):
        body, content_type = render_json(path, entries, truncated), "application/json"
    else:
        body, content_type = render_html(path, entries, truncated), "text/html; charset=utf-8"
    out = [("Content-Type", content_type), ("Vary", "Accept")]
    if content_type.startswith("text/html"):
        out += [("Content-Security-Policy", _POLICY), ("X-Content-Type-Options", "nosniff")]
    return Response(200, out, [body])


def sort_entries(entries: list[Entry]) -> list[Entry]:
    """Directories first, then files; by name within each."""
    return sorted(entries, key=lambda e: (e.kind != "dir", e.name))


def wants_json(accept: str) -> bool:
    """Whether ``Accept`` prefers ``application/json`` to ``text/html`` (RFC 9110 12.5.1, by
    :func:`axon.http.accept.negotiate`): ``*/*``, no header and any tie answer HTML."""
    return negotiate(accept, _PAGE_TYPES) == "application/json"


_PAGE_TYPES = ("text/html", "application/json")  # HTML first: it wins ties


def render_json(path: str, entries: list[Entry], truncated: bool) -> bytes:
    """The listing as the JSON the README documents (ASCII: every other character escaped)."""
    items = []
    for e in entries:
        item: dict[str, object] = {"name": e.name, "type": e.kind}
        if e.kind == "file":
            item["size"] = e.size
        item["mtime"] = e.mtime_ns / 1e9 if e.mtime_ns is not None else None  # an S3 "directory" has none
        items.append(item)
    data = {"path": path, "entries": items, "truncated": truncated}
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def human_size(size: int) -> str:
    """``512 B``, ``1.5 KiB``, ``12.0 MiB``: binary units, one decimal."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def utc_time(mtime_ns: int | None) -> str:
    """``2023-11-14 22:13:20``: ISO 8601, UTC, to the second."""
    if mtime_ns is None:
        return ""
    return datetime.fromtimestamp(mtime_ns // 1_000_000_000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _escape(text: str) -> str:
    """``html.escape``, and a CR as a character reference: a browser reads a raw CR as LF."""
    return html.escape(text).replace("\r", "&#13;")


def render_html(path: str, entries: list[Entry], truncated: bool) -> bytes:
    """The page: a table of the entries inside one POST form (see the module's docstring).

    Every name is HTML-escaped where it is shown and percent-encoded where it is a URL. A name
    with CR or LF gets no checkbox: a browser sends a form's values with every line break made
    CRLF (the HTML standard's form encoding), so it would ask for another name; its link works.
    """
    title = _escape("Index of /" + path)
    rows = []
    if path:
        parent = path.rstrip("/").rpartition("/")[0]
        href = BROWSE + quote(parent + "/" if parent else "")
        rows.append(f'<tr><td></td><td><a href="{html.escape(href)}">../</a></td><td></td><td></td></tr>')
    for e in entries:
        rel = path + e.name
        shown = _escape(e.name)
        if e.kind == "dir":
            href = BROWSE + quote(rel + "/")
            rows.append(
                f'<tr><td></td><td><a href="{html.escape(href)}">{shown}/</a></td>'
                f"<td></td><td>{utc_time(e.mtime_ns)}</td></tr>"
            )
            continue
        if "\r" in rel or "\n" in rel:
            box = '<input type="checkbox" disabled title="a line break in the name: download it alone">'
        else:
            box = f'<input type="checkbox" name="f" value="{_escape(rel)}">'
        href = FILES + quote(rel)
        rows.append(
            f'<tr><td>{box}</td><td><a href="{html.escape(href)}">{shown}</a></td>'
            f'<td class="n">{human_size(e.size)}</td><td>{utc_time(e.mtime_ns)}</td></tr>'
        )
    note = f"<p>Only {len(entries)} entries are shown: the directory holds more.</p>" if truncated else ""
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{title}</title>
<style>{_STYLE}</style>
</head><body>
<h1>{title}</h1>{note}
<form id="batch" method="post" action="{BATCH}">
<p>Download the ticked files as
<button type="submit" formaction="{BATCH}.zip">zip</button>
<button type="submit" formaction="{BATCH}.tar">tar</button>
<button type="submit" formaction="{BATCH}">multipart</button></p>
<p id="note" role="alert"></p>
<table>
<thead><tr><th><input type="checkbox" id="all" title="tick every file" aria-label="tick every file" hidden></th>
<th>Name</th><th>Size</th><th>Modified (UTC)</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</form>
<script>{_SCRIPT}</script>
</body></html>
"""
    return page.encode("utf-8")


# -- what the App answers the page's form ---------------------------------------------------------

#: A download's name when its files have no directory in common below the root.
_NO_DIRECTORY = "batch"


def wants_page(accept: str) -> bool:
    """Whether ``Accept`` prefers ``text/html`` to ``application/json`` (a browser's does):
    ties, ``*/*`` and no header keep JSON, the API's answer, for programs (curl, scripts)."""
    return negotiate(accept, ("application/json", "text/html")) == "text/html"


def batch_directory(paths: list[str]) -> str:
    """The deepest directory holding every path (``"sub/deeper/"``), ``""`` for the root, when
    they share none, or when a path is malformed (it is refused elsewhere)."""
    common: list[str] | None = None
    for path in paths:
        try:
            parent = normalize(path)[:-1]
        except HTTPError:
            return ""
        if common is None:
            common = parent
        else:
            n = 0
            while n < min(len(common), len(parent)) and common[n] == parent[n]:
                n += 1
            common = common[:n]
        if not common:
            return ""
    return "/".join(common) + "/" if common else ""


def form_download(response: Response, paths: list[str], suffix: str) -> Response:
    """The batch a form asked for, saved under its directory's name (``deeper.zip`` for files in
    ``sub/deeper/``; ``batch.zip`` at the root), escaped as every file name Axon sends is."""
    directory = batch_directory(paths)
    name = directory.rstrip("/").rpartition("/")[2] if directory else _NO_DIRECTORY
    headers = response.headers
    for i, (key, _) in enumerate(headers):
        if key == "Content-Disposition":
            headers[i] = (key, content_disposition(name + suffix))
    return response


def error_page(error: HTTPError, back: str | None) -> Response:
    """A refusal for a person: the same status and headers as the JSON error, the message and
    every path it names as a page, and a link ``back`` to the listing (when there is one)."""
    try:
        reason = HTTPStatus(error.status).phrase
    except ValueError:
        reason = ""
    items = [
        f"<li><code>{_escape(str(d['path']))}</code>: {_escape(str(d['message']))}</li>"
        for d in error.details if "path" in d and "message" in d
    ]
    if not items:
        items = [f"<li><code>{_escape(p)}</code></li>" for p in error.paths]
    listed = f"<ul>\n{chr(10).join(items)}\n</ul>" if items else ""
    link = f'<p><a href="{html.escape(back)}">Back to the listing</a></p>' if back is not None else ""
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>Nothing was downloaded</title>
<style>{_STYLE}</style>
</head><body>
<h1>Nothing was downloaded</h1>
<p>{_escape(_sentence(error.message))}</p>
{listed}
<p><small>{error.status} {_escape(reason)} ({_escape(error.code)})</small></p>
{link}
</body></html>
"""
    out = [("Content-Type", "text/html; charset=utf-8"), NO_STORE, ("Content-Security-Policy", _ERROR_POLICY),
           ("X-Content-Type-Options", "nosniff"), *error.headers]
    return Response(error.status, out, [page.encode("utf-8")])


def _sentence(message: str) -> str:
    text = message[:1].upper() + message[1:]
    return text if text.endswith((".", "?", "!")) else text + "."


def back_link(paths: list[str], referer: str = "") -> str:
    """The listing the form was on: the ``Referer``'s path when it is a listing (only its path,
    re-encoded: a link back to this server), else the ticked files' directory's."""
    path = urlsplit(referer).path
    if path.startswith(BROWSE):
        return quote(unquote(path, errors="replace"))
    return BROWSE + quote(batch_directory(paths))
