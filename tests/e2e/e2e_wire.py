"""The e2e suite's client side: raw HTTP/1.1 over sockets, and independent checks of what came back.

Nothing here hides framing. A request is bytes we write; a response is read byte for byte, its
``Content-Length`` or chunked framing checked against what actually arrived, and, with
``Connection: close``, everything up to EOF is kept so that a body longer than it claims shows up
as ``trailing`` bytes. Multipart bodies are checked twice: walked by hand using each part's
``Content-Length`` (a part must deliver exactly what it claims), and parsed by the standard
library's ``email`` package as an independent parser.
"""

from __future__ import annotations

import email.message
import email.policy
import email.utils
import json
import re
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

RECV_SIZE = 256 * KiB

# The fixture files (conftest.py creates them in the served root).
A_SIZE = 100 * KiB
B_SIZE = 1 * MiB
BIG_SIZE = 256 * MiB  # sparse
HOSTILE_NAME = 'quote"and\nnewline.bin'
UNICODE_NAME = "naïve résumé.txt"

# RFC 6266 / RFC 8187: ``attachment; filename="<ascii fallback>"; filename*=UTF-8''<attr-chars>``.
# The fallback is a quoted-string of visible ASCII and spaces: no raw quote, backslash, CR or LF
# (an escaped quoted-pair is tolerated). The extended value is attr-chars and %XX only.
CONTENT_DISPOSITION_RE = re.compile(
    rb'attachment; filename="((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])+)"; '
    rb"filename\*=UTF-8''((?:[A-Za-z0-9!#$&+.^_`|~-]|%[0-9A-Fa-f]{2})+)"
)
# Content-Location is a URI reference: visible ASCII, no space, no quote.
CONTENT_LOCATION_RE = re.compile(rb"[\x21\x23-\x7e]+")
# A part's Content-Location is an absolute path under the single-file endpoint.
FILES_PREFIX = b"/files/"
# RFC 2046 bchars, not ending in a space, 1..70 long.
BOUNDARY_RE = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")


class ConnectionClosedEarly(Exception):
    """The server closed (or reset) the connection before a complete response arrived."""

    def __init__(self, data: bytes, reset: bool) -> None:
        how = "reset" if reset else "closed"
        super().__init__(f"connection {how} after {len(data)} bytes: {data[:300]!r}")
        self.data = data
        self.reset = reset


@dataclass
class Response:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    raw_head: bytes
    trailing: bytes = b""  # bytes after the framed body (only known when read to EOF)
    chunked: bool = False
    reset: bool = False  # the connection ended with a reset rather than a clean close
    method: str = "GET"
    target: str = ""

    def header(self, name: str) -> str | None:
        """The one value of header ``name`` (fails if the response repeats it)."""
        values = self.header_all(name)
        assert len(values) <= 1, f"header {name} repeated: {values}\n{self.describe()}"
        return values[0] if values else None

    def header_all(self, name: str) -> list[str]:
        lower = name.lower()
        return [v for k, v in self.headers if k.lower() == lower]

    def describe(self, limit: int = 600) -> str:
        head = self.raw_head.decode("latin-1")
        body = self.body[:limit]
        more = f" ... ({len(self.body)} bytes)" if len(self.body) > limit else ""
        return f"{self.method} {self.target[:200]}\n--- response ---\n{head}\n\n{body!r}{more}"

    def is_axon_json(self) -> bool:
        """True if this looks like Axon's own JSON error (as opposed to a front server's page)."""
        try:
            doc = json.loads(self.body)
        except ValueError:
            return False
        return isinstance(doc, dict) and isinstance(doc.get("error"), dict)

    def json(self) -> Any:
        ctype = self.header("content-type") or ""
        assert ctype.split(";")[0].strip().lower() == "application/json", (
            f"expected a JSON response, got Content-Type {ctype!r}\n{self.describe()}"
        )
        check_length(self)
        return json.loads(self.body)

    def error(self, *statuses: int) -> dict:
        """Check this is the wire contract's JSON error (with one of ``statuses``); return it."""
        if statuses:
            assert self.status in statuses, f"expected status in {statuses}\n{self.describe()}"
        doc = self.json()
        assert isinstance(doc, dict) and set(doc) == {"error"}, f"not an error document: {doc!r}"
        err = doc["error"]
        assert err.get("status") == self.status, f"error.status {err.get('status')} != {self.status}"
        assert isinstance(err.get("code"), str) and err["code"], f"error.code missing: {err!r}"
        assert isinstance(err.get("message"), str) and err["message"], f"error.message missing: {err!r}"
        if "paths" in err:
            assert isinstance(err["paths"], list) and all(isinstance(p, str) for p in err["paths"])
        return err


def check_length(resp: Response) -> None:
    """``Content-Length`` (when given) equals the bytes delivered; nothing follows the body."""
    declared = resp.header("content-length")
    if declared is not None and resp.method != "HEAD" and resp.status not in (204, 304):
        assert int(declared) == len(resp.body), f"Content-Length {declared} != {len(resp.body)} received"
    assert resp.trailing == b"", f"{len(resp.trailing)} bytes after the body: {resp.trailing[:200]!r}"


# --------------------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.eof = False
        self.reset = False

    def more(self) -> bool:
        if self.eof:
            return False
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"response not complete in time; have {bytes(self.buf[:300])!r}")
        try:
            chunk = self.sock.recv(RECV_SIZE)
        except ConnectionResetError:
            chunk, self.reset = b"", True
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def need(self, n: int) -> None:
        while len(self.buf) < n:
            if not self.more():
                raise ConnectionClosedEarly(bytes(self.buf), self.reset)

    def until(self, marker: bytes, start: int = 0) -> int:
        while True:
            at = self.buf.find(marker, start)
            if at >= 0:
                return at
            if not self.more():
                raise ConnectionClosedEarly(bytes(self.buf), self.reset)

    def take(self, n: int) -> bytes:
        self.need(n)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def _parse_head(raw: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    lines = raw.split(b"\r\n")
    m = re.fullmatch(rb"HTTP/1\.[01] (\d{3})(?: (.*))?", lines[0])
    assert m, f"bad status line {lines[0]!r}"
    headers = []
    for line in lines[1:]:
        assert b"\n" not in line and b"\r" not in line, f"bare CR/LF in response header {line!r}"
        assert not line[:1].isspace(), f"folded/continued header line {line!r} (header injection?)"
        name, sep, value = line.partition(b":")
        assert sep and name and name.strip() == name, f"bad header line {line!r}"
        headers.append((name.decode("latin-1"), value.strip(b" \t").decode("latin-1")))
    return int(m.group(1)), (m.group(2) or b"").decode("latin-1"), headers


def read_response(reader: _Reader, method: str = "GET", *, to_eof: bool = False) -> Response:
    end = reader.until(b"\r\n\r\n")
    raw_head = reader.take(end + 4)[:-4]
    status, reason, headers = _parse_head(raw_head)
    resp = Response(status, reason, headers, b"", raw_head, method=method)
    if 100 <= status < 200 and status != 101:
        return read_response(reader, method, to_eof=to_eof)  # interim response; skip it
    te = resp.header("transfer-encoding")
    cl = resp.header("content-length")
    if method == "HEAD" or status in (204, 304):
        pass
    elif te is not None:
        assert te.lower() == "chunked", f"unexpected Transfer-Encoding {te!r}"
        resp.chunked = True
        body = bytearray()
        while True:
            at = reader.until(b"\r\n")
            size = int(reader.take(at + 2)[:-2].split(b";")[0], 16)
            if size == 0:
                while reader.take(reader.until(b"\r\n") + 2) != b"\r\n":
                    pass  # trailer fields, if any
                break
            body += reader.take(size)
            assert reader.take(2) == b"\r\n", "bad chunk terminator"
        resp.body = bytes(body)
    elif cl is not None:
        assert cl.isdigit(), f"bad Content-Length {cl!r}"
        resp.body = reader.take(int(cl))
    else:
        while reader.more():
            pass
        resp.body = bytes(reader.buf)
        reader.buf.clear()
    if to_eof:
        while reader.more():
            pass
        resp.trailing = bytes(reader.buf)
        reader.buf.clear()
    resp.reset = reader.reset
    return resp


# --------------------------------------------------------------------------------------- sending


def build_request(
    method: str,
    target: str,
    host: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes | None = None,
    close: bool = True,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    names = set()
    for name, value in headers:
        lines.append(f"{name}: {value}")
        names.add(name.lower())
    if body is not None and "content-length" not in names:
        lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _send_all(sock: socket.socket, data: bytes) -> None:
    """Send ``data``; a large body goes from a thread so that an early response is still read."""
    if len(data) <= 64 * KiB:
        sock.sendall(data)
        return

    def pump() -> None:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server answered (and closed) before reading everything: its right

    threading.Thread(target=pump, daemon=True).start()


class Conn:
    """One client connection: requests go out as raw bytes, responses are read by hand."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.host = f"{host}:{port}"
        self.timeout = timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _Reader(self.sock, float("inf"))

    def send_raw(self, data: bytes) -> None:
        _send_all(self.sock, data)

    def read(self, method: str = "GET", *, to_eof: bool = False, timeout: float | None = None) -> Response:
        self.reader.deadline = time.monotonic() + (timeout or self.timeout)
        return read_response(self.reader, method, to_eof=to_eof)

    def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes | None = None,
        *,
        close: bool = False,
        timeout: float | None = None,
    ) -> Response:
        self.send_raw(build_request(method, target, self.host, headers, body, close))
        resp = self.read(method, to_eof=close, timeout=timeout)
        resp.target = target
        return resp

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -------------------------------------------------------------------------------- request helpers


def batch_target(paths: Sequence[str], names: Sequence[str] | None = None) -> str:
    """``/api/stream-files?file1=..&file2=..`` with each value percent-encoded once."""
    names = names or [f"file{i}" for i in range(1, len(paths) + 1)]
    query = "&".join(f"{quote(n, safe='')}={quote(p, safe='/')}" for n, p in zip(names, paths))
    return f"/api/stream-files?{query}"


def files_body(paths: Sequence[Any]) -> bytes:
    return json.dumps({"files": list(paths)}).encode()


JSON_HEADERS = (("Content-Type", "application/json"),)


# ----------------------------------------------------------------------------- multipart checks


def content_type_of(value: str) -> email.message.Message:
    """Parse a Content-Type value with the ``email`` package."""
    return BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + value.encode("latin-1") + b"\r\n\r\n"
    )


def parse_multipart(resp: Response) -> email.message.Message:
    """The body parsed by the ``email`` package, the independent multipart parser."""
    ctype = resp.header("content-type")
    assert ctype, resp.describe()
    msg = BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + resp.body
    )
    assert msg.is_multipart(), f"email does not see a multipart body\n{resp.describe()}"
    assert not msg.defects, f"email found defects {msg.defects}\n{resp.describe()}"
    return msg


def check_boundary(boundary: str | None) -> str:
    """A legal boundary with at least 96 bits: >= 24 hex characters or >= 16 token characters."""
    assert boundary, "no boundary parameter"
    assert BOUNDARY_RE.fullmatch(boundary), f"illegal multipart boundary {boundary!r}"
    if re.fullmatch(r"[0-9a-fA-F]+", boundary):
        assert len(boundary) >= 24, f"boundary {boundary!r} has fewer than 96 bits"
    else:
        assert len(boundary) >= 16, f"boundary {boundary!r} has fewer than 96 bits"
    return boundary


def _part_headers(block: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for line in block.split(b"\r\n"):
        assert b"\r" not in line and b"\n" not in line, f"bare CR/LF in part header {line!r}"
        name, sep, value = line.partition(b":")
        assert sep and name and not name[:1].isspace(), f"bad part header line {line!r}"
        key = name.decode("ascii").lower()
        assert key not in out, f"part header {key} repeated in {block!r}"
        out[key] = value.strip(b" \t")
    return out


def walk_multipart(body: bytes, boundary: str) -> list[tuple[dict[str, bytes], bytes]]:
    """Split a multipart body by hand, trusting each part's Content-Length (must be exact)."""
    b = boundary.encode("latin-1")
    first = b"--" + b + b"\r\n"
    assert body.startswith(first), f"body does not open with the boundary: {body[:120]!r}"
    pos = len(first)
    parts = []
    while True:
        end = body.find(b"\r\n\r\n", pos)
        assert end >= 0, f"part headers never end after byte {pos}"
        headers = _part_headers(body[pos:end])
        pos = end + 4
        assert "content-length" in headers, f"part without Content-Length: {headers}"
        n = int(headers["content-length"])
        data = body[pos : pos + n]
        assert len(data) == n, f"part claims {n} bytes, body has {len(data)}"
        parts.append((headers, data))
        pos += n
        nxt = b"\r\n--" + b + b"\r\n"
        close = b"\r\n--" + b + b"--"
        if body.startswith(nxt, pos):
            pos += len(nxt)
            continue
        assert body.startswith(close, pos), (
            f"after a part of {n} bytes, expected a delimiter, got {body[pos:pos + 80]!r}"
        )
        epilogue = body[pos + len(close) :]
        assert epilogue in (b"", b"\r\n"), f"unexpected epilogue {epilogue[:80]!r}"
        return parts


def rfc2231_filename(disposition: str) -> str | None:
    """The ``filename*`` parameter as the ``email`` package decodes it (RFC 2231/8187)."""
    msg = email.message.Message()
    msg["Content-Disposition"] = disposition
    for name, value in msg.get_params(header="content-disposition") or []:
        if name == "filename" and isinstance(value, tuple):
            return email.utils.collapse_rfc2231_value(value)
    return None


def expected_type(path: str) -> str:
    if path.endswith(".txt"):
        return "text/plain"
    return "application/octet-stream"


def check_part_headers(headers: dict[str, bytes], path: str, size: int) -> None:
    """A batch part's headers, as the wire contract has them, for a file requested as ``path``."""
    assert "content-type" in headers, f"part for {path!r} has no Content-Type: {headers}"
    ctype = headers["content-type"].decode("latin-1").split(";")[0].strip().lower()
    assert ctype == expected_type(path), f"part for {path!r}: Content-Type {headers['content-type']!r}"
    assert int(headers["content-length"]) == size, f"part for {path!r}: Content-Length {headers['content-length']!r} != {size}"

    disposition = headers.get("content-disposition")
    assert disposition is not None, f"part for {path!r} has no Content-Disposition"
    m = CONTENT_DISPOSITION_RE.fullmatch(disposition)
    assert m, f"part for {path!r}: malformed or unsafe Content-Disposition {disposition!r}"
    basename = path.rsplit("/", 1)[-1]
    fallback = m.group(1).decode("ascii")
    if basename.isascii() and basename.isprintable() and '"' not in basename and "\\" not in basename:
        assert fallback == basename, f"ASCII fallback {fallback!r} != {basename!r}"
    assert unquote(m.group(2).decode("ascii"), errors="strict") == basename, (
        f"filename* {m.group(2)!r} does not encode {basename!r}"
    )
    recovered = rfc2231_filename(disposition.decode("ascii"))
    assert recovered == basename, f"email recovers {recovered!r} from filename*, expected {basename!r}"

    location = headers.get("content-location")
    assert location is not None, f"part for {path!r} has no Content-Location"
    assert CONTENT_LOCATION_RE.fullmatch(location), f"raw characters in Content-Location {location!r}"
    # The URL of that very file on the built-in /files/ endpoint; what follows the prefix is the
    # path as requested, percent-encoded.
    assert location.startswith(FILES_PREFIX), f"Content-Location {location!r} is not under {FILES_PREFIX!r}"
    assert unquote(location[len(FILES_PREFIX) :].decode("ascii"), errors="strict") == path, (
        f"Content-Location {location!r} does not carry the requested path {path!r}"
    )


def check_batch(resp: Response, paths: Sequence[str], root: Path) -> list[email.message.Message]:
    """A complete, exact batch response for ``paths`` (in order); returns the email parts."""
    assert resp.status == 200, resp.describe()
    ctype = resp.header("content-type")
    assert ctype, resp.describe()
    parsed = content_type_of(ctype)
    assert parsed.get_content_type() == "multipart/mixed", f"Content-Type {ctype!r}"
    boundary = check_boundary(parsed.get_boundary())
    assert resp.header("transfer-encoding") is None, "a batch has an exact length: no chunking"
    assert resp.header("content-length") is not None, f"no Content-Length\n{resp.describe()}"
    check_length(resp)
    assert resp.body.count(b"--" + boundary.encode()) == len(paths) + 1, (
        "the boundary occurs in the body other than as a delimiter"
    )

    contents = [(root / p).read_bytes() for p in paths]
    walked = walk_multipart(resp.body, boundary)
    assert len(walked) == len(paths), f"{len(walked)} parts for {len(paths)} files"
    for (headers, data), path, content in zip(walked, paths, contents):
        check_part_headers(headers, path, len(content))
        assert data == content, f"part for {path!r} differs from the file"

    msg = parse_multipart(resp)
    parts = list(msg.iter_parts())
    assert len(parts) == len(paths), f"email sees {len(parts)} parts for {len(paths)} files"
    for part, path, content in zip(parts, paths, contents):
        payload = part.get_payload(decode=True)
        assert payload == content, f"email: part for {path!r} differs from the file"
    return parts


# ----------------------------------------------------------------------------- process metrics


def tree(pid: int) -> list[Any]:
    import psutil

    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss(pid: int) -> int:
    import psutil

    total = 0
    for proc in tree(pid):
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def tree_fds(pid: int) -> dict[int, list[str]]:
    """Open descriptors of the process tree: pid -> sorted list of link targets."""
    import os

    out: dict[int, list[str]] = {}
    for proc in tree(pid):
        base = f"/proc/{proc.pid}/fd"
        targets = []
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            try:
                targets.append(os.readlink(f"{base}/{name}"))
            except OSError:
                pass
        out[proc.pid] = sorted(targets)
    return out


def tree_read_bytes(pid: int) -> int:
    """Bytes the process tree has read so far (``rchar`` of /proc/<pid>/io: read, pread, sendfile)."""
    total = 0
    for proc in tree(pid):
        try:
            with open(f"/proc/{proc.pid}/io") as f:
                for line in f:
                    if line.startswith("rchar:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


@dataclass
class RssSampler:
    """Samples the RSS of a process tree every ``interval`` seconds in a thread."""

    pid: int
    interval: float = 0.05
    peak: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssSampler:
        self.peak = tree_rss(self.pid)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, tree_rss(self.pid))
            self.samples += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.pid))
