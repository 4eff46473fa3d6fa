"""Multipart framing: boundaries, escaped part headers, and whole bodies parsed back by ``email``."""

from __future__ import annotations

import email.parser
import email.policy
import os
import re
from urllib.parse import quote, unquote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from axon.http.multipart import ascii_fallback, content_disposition, file_part_headers, frame, new_boundary
from axon.http.segments import FileSlice, body_length

SETTINGS = settings(max_examples=150, deadline=None, database=None)
# RFC 2046 bcharsnospace, and RFC 5987 attr-char.
_BCHARS = re.compile(r"[0-9A-Za-z'()+_,\-./:=?]{1,70}")
_ATTR_CHARS = re.compile(r"[A-Za-z0-9!#$&+\-.^_`|~%]*")
_FALLBACK = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII without '"' and '\'
HOSTILE = [
    "plain.txt",
    'quo"te.txt',
    "back\\slash.txt",
    "cr\rlf\n.txt",
    "crlf\r\nContent-Type: text/html\r\n\r\n<script>.txt",
    "semi;colon=x; filename=evil.txt",
    "per%cent%41.txt",
    "tab\there.txt",
    "ünïcödé.txt",
    "名前 😀.txt",
    "résumé ü.txt",
    "full＂width＼\u2028.txt",
    "a'b.txt",
    "\x7fdel\x01ctl.txt",
    "",
]


def test_new_boundary():
    seen = {new_boundary() for _ in range(200)}
    assert len(seen) == 200
    for b in seen:
        assert _BCHARS.fullmatch(b)
        assert len(b) * 4 >= 96  # hex: at least 96 random bits


@pytest.mark.parametrize(
    "name, expected",
    [("plain.txt", "plain.txt"), ('a"b', "a_b"), ("a\\b", "a_b"), ("a\r\nb", "a__b"), ("é", "e"),
     ("名前.txt", "__.txt"), ("~ !", "~ !"), ("\x7f", "_"), ("", ""),
     # transliterated: accents dropped, compatibility forms (ligatures, full width) spelled out
     ("résumé ü.txt", "resume u.txt"), ("re\u0301sume\u0301.txt", "resume.txt"), ("ﬁle№１.txt", "fileNo1.txt"),
     ("Ærøskøbing straße.txt", "_r_sk_bing stra_e.txt"),
     # what a compatibility form spells out is checked too: a quote, a backslash or a line
     # separator never reaches the header
     ("full＂width＼.txt", "full_width_.txt"), ("a\u2028b\x85c", "a_b_c"), ("tab\tnbsp\u00a0.txt", "tab_nbsp .txt")],
)
def test_ascii_fallback(name, expected):
    assert ascii_fallback(name) == expected



@SETTINGS
@given(st.text(st.characters(max_codepoint=127), max_size=30))
def test_ascii_fallback_of_an_ascii_name_replaces_only_what_a_quoted_string_cannot_hold(name):
    # Nothing to transliterate in ASCII: each character is kept if printable and not '"' or '\\'.
    assert ascii_fallback(name) == "".join(c if c.isprintable() and c not in '"\\' else "_" for c in name)

def _check_disposition(name: str, value: str) -> None:
    m = re.fullmatch(r"attachment; filename=\"(.*)\"; filename\*=UTF-8''(.*)", value)
    assert m, value
    assert _FALLBACK.fullmatch(m.group(1)), m.group(1)
    assert _ATTR_CHARS.fullmatch(m.group(2)), m.group(2)
    assert unquote(m.group(2), errors="strict") == name
    # An independent reading by the email package: the quoted fallback is well formed, and the
    # RFC 5987 value alone decodes to the name (email lets the first of the two win, so each
    # is read on its own).
    assert _filename(value) in (ascii_fallback(name), ascii_fallback(name).strip())
    decoded = _filename(f"attachment; filename*=UTF-8''{m.group(2)}")
    assert decoded in (name, name.strip()) or not name.strip()  # email strips outer whitespace


def _filename(disposition: str) -> str | None:
    parser = email.parser.Parser(policy=email.policy.HTTP)
    return parser.parsestr(f"Content-Disposition: {disposition}\r\n\r\n").get_filename()


@pytest.mark.parametrize("name", HOSTILE)
def test_content_disposition_hostile(name):
    _check_disposition(name, content_disposition(name))


@SETTINGS
@given(st.text(min_size=1, max_size=30))
@example("\r\n\"\\;%")
def test_content_disposition_property(name):
    _check_disposition(name, content_disposition(name))



# Characters quote() keeps with one safe set and not the other, those it always keeps, and others.
_QUOTING = st.text(st.sampled_from(list("aZ09_.-~/!#$&+^`|% :;=?@'\"\\é€\x00\x7f")), max_size=12)


@SETTINGS
@given(_QUOTING, _QUOTING)
def test_part_headers_quote_as_urllib_quote_does(requested, name):
    headers = file_part_headers(requested, name, "text/plain")
    assert f"Content-Location: /files/{quote(requested, safe='/')}\r\n" in headers
    assert f"filename*=UTF-8''{quote(name.rsplit('/', 1)[-1], safe='!#$&+^`|')}\r\n" in headers

@pytest.mark.parametrize("name", HOSTILE[:-1])
def test_file_part_headers(name):
    requested = f"dir/../sub dir/{name}"
    text = file_part_headers(requested, f"sub dir/{name}", "text/plain; charset=utf-8")
    assert text.endswith("\r\n")
    lines = text[:-2].split("\r\n")
    assert [line.split(":", 1)[0] for line in lines] == ["Content-Type", "Content-Disposition", "Content-Location"]
    for line in lines:
        assert "\r" not in line and "\n" not in line
        assert all(" " <= c <= "~" for c in line), line
    headers = dict(line.split(": ", 1) for line in lines)
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    _check_disposition(name.rsplit("/", 1)[-1], headers["Content-Disposition"])  # the basename only
    location = headers["Content-Location"]
    # The URL of that very file under the built-in /files/ endpoint; the rest is the path as
    # requested, percent-encoded.
    assert location.startswith("/files/"), location
    assert _ATTR_CHARS.fullmatch(location.replace("/", "")), location
    assert unquote(location.removeprefix("/files/"), errors="strict") == requested


def test_frame_byte_exact(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"FILEDATA")
    fd = os.open(path, os.O_RDONLY)
    try:
        segs = frame("BOUND", [("Content-Type: a/b\r\n", FileSlice(fd, 2, 4)), ("X: y\r\n", b"inline")])
        assert segs == [
            b"--BOUND\r\nContent-Type: a/b\r\nContent-Length: 4\r\n\r\n",
            FileSlice(fd, 2, 4),
            b"\r\n--BOUND\r\nX: y\r\nContent-Length: 6\r\n\r\ninline",
            b"\r\n--BOUND--\r\n",
        ]
    finally:
        os.close(fd)


def test_frame_one_bytes_segment_per_part(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    try:
        n = 50
        segs = frame("B", [("", FileSlice(fd, i, 1)) for i in range(n)])
        assert len(segs) == 2 * n + 1
        assert all(isinstance(s, FileSlice) for s in segs[1::2])
    finally:
        os.close(fd)


def _render(segs):
    return b"".join(s if isinstance(s, bytes) else os.pread(s.fd, s.count, s.offset) for s in segs)


@pytest.mark.slow  # hypothesis, many examples
@SETTINGS
@given(contents=st.lists(st.binary(max_size=300), min_size=1, max_size=6), inline=st.lists(st.booleans(), min_size=6, max_size=6))
@example(contents=[b"\r\n--", b"\r", b"\n", b""], inline=[False] * 6)
def test_frame_parses_back(tmp_path_factory, contents, inline):
    """Any contents, inline or as file slices: the email parser reads back the same parts.

    Fed whole and byte by byte (a FeedParser fed one byte at a time must agree).
    """
    path = tmp_path_factory.mktemp("frame") / "f"
    path.write_bytes(b"".join(contents))
    fd = os.open(path, os.O_RDONLY)
    try:
        boundary = new_boundary()
        parts, offset = [], 0
        for i, data in enumerate(contents):
            header = f"Content-Type: application/octet-stream\r\nX-Index: {i}\r\n"
            parts.append((header, data if inline[i] else FileSlice(fd, offset, len(data))))
            offset += len(data)
        segs = frame(boundary, parts)
        body = _render(segs)
        assert body_length(segs) == len(body)
        head = f"Content-Type: multipart/mixed; boundary={boundary}\r\n\r\n".encode()
        whole = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        feed = email.parser.BytesFeedParser(policy=email.policy.HTTP)
        for i in range(len(head + body)):
            feed.feed((head + body)[i : i + 1])
        bytewise = feed.close()
        for msg in (whole, bytewise):
            assert not msg.defects
            got = list(msg.iter_parts())
            assert len(got) == len(contents)
            for i, (part, data) in enumerate(zip(got, contents)):
                assert part["X-Index"] == str(i)
                assert part["Content-Length"] == str(len(data))
                assert part.get_payload(decode=True) == data
        assert body.startswith(f"--{boundary}\r\n".encode())
        assert body.endswith(f"\r\n--{boundary}--\r\n".encode())
    finally:
        os.close(fd)
