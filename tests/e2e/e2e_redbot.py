"""REDbot, mnot's HTTP linter, run in-process on one URL of the e2e server: every note it makes.

REDbot fetches the URL, then probes it with requests of its own built from that response (a
``Range`` of a sample of the body, ``If-None-Match`` with its ETag, ``If-Modified-Since`` with its
``Last-Modified``, ``Accept-Encoding: gzip``), and lints every response with httplint. It runs on
thor, its own event loop, which ``lint`` runs until the check is done.

It reaches nothing but loopback: ``lint`` takes only URLs whose host is a loopback IP literal
(thor looks up no name for those), REDbot follows no links (``descend`` off), and its client
refuses to connect to any other address (``check_ip``).
"""

from __future__ import annotations

import configparser
import html
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import ip_address
from urllib.parse import urlsplit

import thor
from httplint.note import Note, levels
from redbot.resource import HttpResource
from redbot.resource.fetch import RedFetcher, RedHttpClient

#: The levels a failure shows (REDbot's others are "info" and "good").
BAD = levels.BAD.value
WARNING = levels.WARN.value


@dataclass(frozen=True)
class Finding:
    level: str  # "bad", "warning", "info" or "good"
    category: str  # REDbot's heading: "Caching", "Validation", "Partial Content", ...
    name: str  # the note's class in httplint or REDbot, e.g. FRESHNESS_HEURISTIC
    summary: str
    detail: str  # REDbot's explanation, as plain text

    def describe(self) -> str:
        text = textwrap.fill(self.detail, 100, initial_indent="      ", subsequent_indent="      ")
        return f"  {self.level.upper()} [{self.category}] {self.name}: {self.summary}\n{text}"


@dataclass
class Report:
    url: str
    request_headers: list[tuple[str, str]]
    status: int | None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # why REDbot got no complete response, if it did not

    def at(self, *wanted: str) -> list[Finding]:
        return [f for f in self.findings if f.level in wanted]

    def describe(self) -> str:
        """The request, the status, and every finding at warning level or above, for a failure."""
        shown = self.at(BAD, WARNING)
        sent = "".join(f"\n  (sent {name}: {value})" for name, value in self.request_headers)
        lines = [f"REDbot on GET {self.url} -> {self.status}{sent}"]
        if self.error:
            lines.append(f"  fetch error: {self.error}")
        lines += [f.describe() for f in shown] or ["  nothing at warning level or above"]
        return "\n".join(lines)


def _finding(note: Note) -> Finding:
    detail = html.unescape(re.sub(r"<[^>]*>", "", str(note.detail)))
    return Finding(note.level.value, note.category.value, type(note).__name__, str(note.summary),
                   " ".join(detail.split()))  # fmt: skip


def _only_loopback(address: str) -> bool:
    try:
        return ip_address(address).is_loopback
    except ValueError:  # a name, not an address
        return False


def lint(url: str, headers: Iterable[tuple[str, str]] = (), timeout: float = 30.0) -> Report:
    """Run REDbot on ``GET url`` with ``headers``; wait for it and its probes to finish."""
    if not _only_loopback(urlsplit(url).hostname or ""):
        raise ValueError(f"REDbot may only reach a loopback address, not {url}")
    headers = list(headers)
    config = configparser.ConfigParser()
    # enable_local_access lets it reach 127.0.0.1 at all; _only_loopback then allows nothing else.
    config.read_dict({"redbot": {"enable_local_access": "True"}})
    # A fresh client each run: the default one is shared by the class and keeps idle connections
    # to servers stopped since (thor's loop drops their sockets when it stops).
    RedFetcher.client = RedHttpClient()
    RedFetcher.client.check_ip = _only_loopback
    resource = HttpResource(config["redbot"])
    resource.set_request(url, headers=headers)
    resource.on("check_done", thor.stop)
    thor.schedule(timeout, thor.stop)
    thor.schedule(0, resource.check)  # from inside the loop, so a check done at once stops it too
    thor.run()

    report = Report(url, headers, resource.response.status_code)
    if resource.fetch_error is not None:
        report.error = f"{resource.fetch_error.desc} ({resource.fetch_error.detail or ''})"
    elif not resource.check_done:
        report.error = f"REDbot did not finish within {timeout:.0f}s"
    for note in resource.response.notes:
        report.findings += [_finding(note)] + [_finding(sub) for sub in note.subnotes]
    return report
