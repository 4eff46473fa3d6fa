"""The opt-in directory listing (``axon serve --browse``): HTML for people, JSON for programs.

:func:`plan_listing` reads the directory through the storage layer (which applies the root jail,
the hidden rule and the symlink rule: :meth:`~axon.storage.local.FileStore.list_dir`); the
rendering below is pure, from plain :class:`~axon.storage.Entry` facts, and opens nothing.

The JSON is a contract (README, "Browsing"; a later fsspec ``ls`` reads it)::

    {"path": "sub/", "truncated": false,
     "entries": [{"name": "d", "type": "dir", "mtime": 1700000000.5},
                 {"name": "a.txt", "type": "file", "size": 12, "mtime": 1700000000.5}]}

Directories come first, then files, each sorted by name (code point order), as nginx's autoindex
orders them. The HTML page is a plain form: its checkboxes (``name="f"``, the value a path
relative to the root) become a batch's query parameters, and its buttons send them to the
batch's URLs, so it works without JavaScript.
"""

from __future__ import annotations

import html
import json
from datetime import datetime, timezone
from urllib.parse import quote

from ..http.accept import negotiate
from ..limits import Limits
from ..response import Response, redirect
from ..storage import Entry
from ..storage.local import FileStore, normalize

#: Where the App serves each thing the page links to.
BROWSE, FILES, BATCH = "/browse/", "/files/", "/api/stream-files"
#: The page runs no script and loads nothing: names on it are hostile input, so a policy that
#: allows neither is a second wall behind the escaping. Its form may go only to this origin.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'"
_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def plan_listing(store: FileStore, requested: str, headers: dict[str, str], limits: Limits) -> Response:
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
        item["mtime"] = e.mtime_ns / 1e9
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


def utc_time(mtime_ns: int) -> str:
    """``2023-11-14 22:13:20``: ISO 8601, UTC, to the second."""
    return datetime.fromtimestamp(mtime_ns // 1_000_000_000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _escape(text: str) -> str:
    """``html.escape``, and a CR as a character reference: a browser reads a raw CR as LF."""
    return html.escape(text).replace("\r", "&#13;")


def render_html(path: str, entries: list[Entry], truncated: bool) -> bytes:
    """The page: a table of the entries inside one GET form (see the module's docstring).

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
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}
td,th{{padding:.2em .8em;text-align:left}}td.n{{text-align:right}}tr:nth-child(even){{background:#f4f4f4}}</style>
</head><body>
<h1>{title}</h1>{note}
<form method="get" action="{BATCH}">
<p>Download the ticked files as
<button type="submit" formaction="{BATCH}.zip">zip</button>
<button type="submit" formaction="{BATCH}.tar">tar</button>
<button type="submit" formaction="{BATCH}">multipart</button></p>
<table>
<thead><tr><th></th><th>Name</th><th>Size</th><th>Modified (UTC)</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
</form>
</body></html>
"""
    return page.encode("utf-8")
