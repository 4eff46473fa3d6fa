"""A sans-IO streaming parser for ``multipart/mixed`` and ``multipart/byteranges`` bodies.

Bytes go in with :meth:`MultipartParser.feed`, events come out: :class:`PartStart`, then
:class:`PartData` chunks, then :class:`PartEnd`, for each part, and :class:`StreamEnd` after the
closing delimiter. No sockets, no files: the caller moves the bytes (as in h11).

Memory stays constant whatever the part sizes. A part that declares ``Content-Length`` is
streamed by count, without looking inside its data, and the delimiter must follow exactly there;
a part without one is scanned for ``CRLF--boundary`` while holding back only the few bytes that
could begin a delimiter. Everything the stream promises is checked: each part's length, the
closing delimiter, and the end of input (``feed(b"")`` or :meth:`~MultipartParser.close`)
arriving only after it. Any violation raises :class:`MultipartError` naming the part.

A part's data is handed out as slices of what was fed: ``bytes`` by default, or, from a parser
made with ``views=True``, read-only ``memoryview``s that copy nothing (see :class:`PartData`).

The client reads batches with it (``axon.client`` re-exports it). One module of some 600 lines on
purpose: the parser is one state machine, and its events and errors are its vocabulary; split,
a reader would follow each state's transition into another module and back.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import Any, NamedTuple
from urllib.parse import unquote

__all__ = [
    "ContentRange",
    "Event",
    "MultipartError",
    "MultipartParser",
    "Part",
    "PartData",
    "PartEnd",
    "PartStart",
    "StreamEnd",
    "boundary_from_content_type",
    "parse_content_range",
    "requested_path",
]

DEFAULT_MAX_HEADER_BYTES = 16 * 1024
DEFAULT_MAX_PARTS = 100_000

# RFC 2046 section 5.1.1: 1 to 70 characters from this set, not ending in a space.
_BOUNDARY_CHARS = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
# Header values may hold visible ASCII, Latin-1, spaces and tabs; never CR, LF, NUL or DEL.
_BAD_VALUE_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# One header line (RFC 9110 5.1, 5.5): a token, a colon, the value between optional whitespace.
# Folded lines and names with spaces are refused, as RFC 9110 does.
_FIELD_LINE = re.compile(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*")
# A whole header block of such lines, each ending in CRLF, values free of control characters:
# one match of it checks a part's headers at once, which costs a fraction of a match per line
# (on a batch of small files the headers are most of the parser's work). A block it refuses is
# read again line by line, only to say what is wrong.
_FIELD_BLOCK = re.compile(r"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r\n)*")

# A part's head as Axon's own server writes it (http/multipart.py: ``part_headers``, then
# ``frame``'s Content-Length), from the CRLF that ends the delimiter line: these four fields in
# this order, one space after each colon, each value free of control characters and of white space
# at either end. One match reads such a head; the fields it gives are those the general reading
# gives, which reads any other head (another server's order, more fields, other spacing).
_AXON_VALUE = rb"([!-~\x80-\xff](?:[\t -~\x80-\xff]*[!-~\x80-\xff])?)\r\n"
_AXON_HEAD = re.compile(
    rb"\r\nContent-Type: " + _AXON_VALUE + rb"Content-Disposition: " + _AXON_VALUE
    + rb"Content-Location: " + _AXON_VALUE + rb"Content-Length: ([0-9]{1,18})\r\n\r\n"
)
_AXON_NAMES = ("Content-Type", "Content-Disposition", "Content-Location", "Content-Length")


class MultipartError(ValueError):
    """The stream is malformed, truncated or over a limit.

    ``part_index`` (0-based) and ``path`` (the requested path the part's ``Content-Location``
    names) say where, when known; both are also in the message.
    """

    def __init__(self, message: str, *, part_index: int | None = None, path: str | None = None):
        if part_index is not None:
            where = f"part {part_index}" + (f" ({path!r})" if path is not None else "")
            message = f"{where}: {message}"
        super().__init__(message)
        self.part_index = part_index
        self.path = path


def boundary_from_content_type(content_type: str) -> str:
    """The ``boundary`` parameter of a ``multipart/*`` Content-Type value, validated.

    >>> boundary_from_content_type('multipart/mixed; boundary="b1"')
    'b1'
    """
    message = Message()
    message["Content-Type"] = content_type
    if message.get_content_maintype() != "multipart":
        raise MultipartError(f"not a multipart content type: {content_type!r}")
    boundary = message.get_boundary()
    if boundary is None:
        raise MultipartError(f"multipart content type without a boundary: {content_type!r}")
    if not _BOUNDARY_CHARS.fullmatch(boundary):
        raise MultipartError(f"invalid multipart boundary: {boundary!r}")
    return boundary


# Axon servers send a part's Content-Location as the file's URL under the single-file endpoint
# (an absolute path, so that it resolves to the file whatever the batch's URL); older ones sent
# the requested path alone, which never starts with "/".
_FILES_PREFIX = "/files/"


def requested_path(location: str) -> str:
    """The path a batch part's raw ``Content-Location`` says was requested, decoded once.

    Both forms servers send are read: ``/files/dir/a%20b.bin`` and ``dir/a%20b.bin`` both give
    ``dir/a b.bin``. Anything else comes back decoded as it is, for the caller to refuse as a
    path it never asked for. Bad percent-encoding is a :class:`UnicodeDecodeError`.
    """
    return unquote(location.removeprefix(_FILES_PREFIX), errors="strict")


class ContentRange(NamedTuple):
    """A part's ``Content-Range: bytes first-last/complete_length`` (``last`` inclusive)."""

    first: int
    last: int
    complete_length: int | None

    @property
    def span(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True, slots=True)
class PartStart:
    """A part begins. ``headers`` are (name, value) pairs in arrival order."""

    index: int
    headers: tuple[tuple[str, str], ...]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of header ``name`` (case-insensitive)."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return default

    @property
    def content_type(self) -> str | None:
        return self.get("Content-Type")

    @property
    def content_length(self) -> int | None:
        value = self.get("Content-Length")
        return None if value is None else int(value)  # validated when the part was parsed

    @property
    def content_location(self) -> str | None:
        """The raw (percent-encoded) ``Content-Location``."""
        return self.get("Content-Location")

    @property
    def path(self) -> str | None:
        """The path as it was requested, read from ``Content-Location`` (see :func:`requested_path`)."""
        location = self.content_location
        return None if location is None else requested_path(location)

    @property
    def content_range(self) -> ContentRange | None:
        value = self.get("Content-Range")
        return None if value is None else parse_content_range(value)

    @property
    def filename(self) -> str | None:
        """The Content-Disposition file name, preferring ``filename*`` (RFC 6266) when present."""
        value = self.get("Content-Disposition")
        if value is None:
            return None
        message = Message()
        message["Content-Disposition"] = value
        plain = None
        for key, param in message.get_params(header="Content-Disposition", failobj=[]):
            if key != "filename":
                continue
            if isinstance(param, tuple):  # the RFC 2231 ``filename*=charset''...`` form
                return collapse_rfc2231_value(param)
            plain = plain if plain is not None else param
        return plain


@dataclass(frozen=True, slots=True)
class PartData:
    """A chunk of the current part's body: at most the bytes fed, plus a delimiter's length
    held back from the previous feed.

    ``data`` is ``bytes``, or from a parser made with ``views=True`` a read-only ``memoryview``
    of the bytes fed: no copy is made, and the view stays valid for ever, whatever is fed next
    (it never views a buffer the caller may reuse: a ``bytearray`` or ``memoryview`` fed is
    copied once first). A view keeps the whole chunk it came from alive: a reader that keeps a
    part should copy it (``bytes(view)``, or each view into one buffer as it comes).
    """

    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class PartEnd:
    """The current part ended, its length checked."""


class Part(NamedTuple):
    """A whole part in one event, from a parser made with ``whole_parts=True``: it stands for
    PartStart, PartData and PartEnd when the part's headers, its Content-Length of bytes and the
    delimiter after them arrived in the same feed (a part split across feeds comes as those three).
    ``path`` and ``content_range`` are ``start.path`` and ``start.content_range``, as the parser
    read them to check the part: a reader of many parts need not read the headers again.
    ``data`` is as :attr:`PartData.data` is. A named tuple, not a dataclass, and its
    :attr:`start` made only when asked: a batch of small files is one of these a file."""

    index: int
    headers: tuple[tuple[str, str], ...]
    data: bytes | memoryview
    path: str | None
    content_range: ContentRange | None

    @property
    def start(self) -> PartStart:
        return PartStart(self.index, self.headers)

    @property
    def content_length(self) -> int | None:
        return self.start.content_length


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The closing delimiter arrived; anything after it (the epilogue) is ignored."""


Event = PartStart | PartData | PartEnd | Part | StreamEnd


class State(enum.Enum):
    PREAMBLE = "before the first boundary"
    AFTER_DELIMITER = "right after a boundary"
    HEADERS = "inside the part headers"
    COUNTED_BODY = "inside a part with a Content-Length"
    DELIMITER_AFTER_COUNT = "where the boundary must follow the part's Content-Length"
    SCANNED_BODY = "inside a part without a Content-Length"
    DONE = "after the closing boundary"
    ERROR = "after an error"

    # Identity, as equality is: Enum's hash of the name is a Python call, and feed looks a step
    # up in _STEPS at each change of state (a few per part).
    __hash__ = object.__hash__


class MultipartParser:
    """Turns the bytes of one multipart body into events, in constant memory.

    ``boundary`` is the Content-Type's boundary parameter (see :func:`boundary_from_content_type`).
    ``max_header_bytes`` caps each part's header block, ``max_parts`` the number of parts.
    ``whole_parts``: a part that arrives whole within one feed comes as one :class:`Part`
    (for a reader of many small parts, which then handles one event per part instead of three).
    ``views``: part data comes as read-only ``memoryview``s of the bytes fed, not copied
    (:class:`PartData` says what that asks of the reader).
    """

    def __init__(
        self,
        boundary: str | bytes,
        *,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        max_parts: int = DEFAULT_MAX_PARTS,
        whole_parts: bool = False,
        views: bool = False,
    ) -> None:
        if isinstance(boundary, str):
            boundary = boundary.encode("ascii")
        if not boundary:
            raise ValueError("empty multipart boundary")
        self.max_header_bytes = max_header_bytes
        self.max_parts = max_parts
        self.whole_parts = whole_parts
        self.views = views
        # During a feed: what part data is sliced from (its buffer, or a view of it).
        self._data: bytes | memoryview = b""
        self._delimiter = b"\r\n--" + boundary
        self._state = State.PREAMBLE
        # A stream may open with "--boundary" and no CRLF before it; pretending one was there
        # lets the preamble be scanned for the same delimiter as every part body.
        self._pending = b"\r\n"
        self._part_index = -1
        self._part_path: str | None = None
        self._in_part = False
        self._remaining = 0  # bytes still due in a counted body
        self._received = 0  # bytes delivered in the current part
        self._expected: int | None = None  # length a scanned part must reach (from Content-Range)

    @classmethod
    def from_content_type(cls, content_type: str, **options: Any) -> MultipartParser:
        return cls(boundary_from_content_type(content_type), **options)

    def snapshot(self) -> dict[str, Any]:
        """The parser's whole state between two feeds, as plain values (``pending`` is bytes).

        With the count of bytes fed so far it is enough to go on parsing the same stream later,
        from another connection: a resumed download restores it with :meth:`restore` and feeds
        the rest. Its size is bounded like the parser's memory (the header limit).
        """
        if self._state is State.ERROR:
            raise MultipartError("a parser that failed cannot be saved")
        return {
            "state": self._state.name,
            "pending": bytes(self._pending),
            "part_index": self._part_index,
            "part_path": self._part_path,
            "in_part": self._in_part,
            "remaining": self._remaining,
            "received": self._received,
            "expected": self._expected,
        }

    @classmethod
    def restore(cls, boundary: str | bytes, snapshot: dict[str, Any], **limits: int) -> MultipartParser:
        """A parser in the state :meth:`snapshot` saved; a malformed snapshot is a ValueError."""
        parser = cls(boundary, **limits)
        try:
            state = State[snapshot["state"]]
            pending = snapshot["pending"]
            ints = [snapshot[k] for k in ("part_index", "remaining", "received")]
            expected, path, in_part = snapshot["expected"], snapshot["part_path"], snapshot["in_part"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a parser snapshot: {exc}") from None
        if (
            state is State.ERROR
            or not isinstance(pending, bytes)
            or len(pending) > parser.max_header_bytes + len(parser._delimiter)
            or not all(type(v) is int and v >= -1 for v in ints)
            or not (expected is None or (type(expected) is int and expected >= 0))
            or not (path is None or isinstance(path, str))
            or not isinstance(in_part, bool)
        ):
            raise ValueError("not a valid parser snapshot")
        parser._state, parser._pending = state, pending
        parser._part_index, parser._remaining, parser._received = ints
        parser._part_path, parser._in_part, parser._expected = path, in_part, expected
        return parser

    @property
    def state(self) -> State:
        return self._state

    @property
    def buffered_bytes(self) -> int:
        """Bytes held back between feeds; bounded by the header limit and the delimiter length."""
        return len(self._pending)

    @property
    def parts_started(self) -> int:
        return self._part_index + 1

    def feed(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Parse ``data``; an empty ``data`` means the input ended (same as :meth:`close`)."""
        if self._state is State.ERROR:
            raise MultipartError("the parser already failed; it cannot continue")
        if not data:
            return self.close()
        if self._state is State.DONE:
            return []  # epilogue
        # Always an immutable ``bytes``: views of it can never change under their holder.
        buf = self._pending + data if self._pending else bytes(data)
        self._pending = b""
        self._data = memoryview(buf) if self.views else buf
        events: list[Event] = []
        pos = 0
        try:
            while True:
                state = self._state
                new_pos = _STEPS[state](self, buf, pos, events)
                if new_pos == pos and self._state is state:
                    break  # this step needs more input than there is
                pos = new_pos
        except MultipartError:
            self._state = State.ERROR
            raise
        finally:
            self._data = b""
        self._pending = buf[pos:]  # empty once DONE: the epilogue step consumes everything
        return events

    def close(self) -> list[Event]:
        """Declare the end of input: raises unless the closing delimiter has arrived."""
        if self._state is State.DONE:
            return []
        if self._state is State.ERROR:
            raise MultipartError("the parser already failed; it cannot continue")
        state, self._state = self._state, State.ERROR
        if state is State.PREAMBLE:
            raise MultipartError("stream ended before the first multipart boundary")
        if state is State.COUNTED_BODY:
            declared = self._received + self._remaining
            detail = f"after {self._received} of its {declared} bytes"
        elif state is State.SCANNED_BODY:
            detail = f"after {self._received} bytes of the part"
        else:
            detail = state.value
        raise self._error(f"stream ended {detail}, before the closing boundary")

    # -- steps: each takes the buffer and a position, appends events, returns the new position.
    # Returning the same position without changing state means "wait for more input".

    def _step_scan(self, buf: bytes, pos: int, events: list[Event]) -> int:
        """Preamble or a part without Content-Length: pass data through up to the delimiter."""
        emit = self._state is State.SCANNED_BODY
        found = buf.find(self._delimiter, pos)
        if found >= 0:
            end = found
        else:
            # Hold back only a tail that could be the start of a delimiter split across feeds.
            tail_start = max(pos, len(buf) - len(self._delimiter) + 1)
            held = buf.find(b"\r", tail_start)
            end = held if held >= 0 else len(buf)
        if emit and end > pos:
            events.append(PartData(self._data[pos:end]))
            self._received += end - pos
        if found < 0:
            return end
        self._state = State.AFTER_DELIMITER
        return found + len(self._delimiter)

    def _step_counted(self, buf: bytes, pos: int, events: list[Event]) -> int:
        """A part with Content-Length: hand over the declared bytes without inspecting them."""
        count = min(self._remaining, len(buf) - pos)
        if count:
            events.append(PartData(self._data[pos : pos + count]))
            self._remaining -= count
            self._received += count
        if self._remaining == 0:
            self._state = State.DELIMITER_AFTER_COUNT
        return pos + count

    def _step_delimiter_after_count(self, buf: bytes, pos: int, events: list[Event]) -> int:
        seen = buf[pos : pos + len(self._delimiter)]
        if not self._delimiter.startswith(seen):
            raise self._error(
                f"the boundary does not follow its Content-Length of {self._received} bytes "
                "(the part is longer or shorter than it declared)"
            )
        if len(seen) < len(self._delimiter):
            return pos
        self._state = State.AFTER_DELIMITER
        return pos + len(self._delimiter)

    def _step_after_delimiter(self, buf: bytes, pos: int, events: list[Event]) -> int:
        """After ``CRLF--boundary``: ``--`` closes the stream, else padding and CRLF open a part."""
        if self.whole_parts and not self._in_part:
            pos = self._whole_axon_parts(buf, pos, events)
        if len(buf) - pos < 2:
            return pos
        if buf.startswith(b"--", pos):
            self._finish_part(events)
            events.append(StreamEnd())
            self._state = State.DONE
            return pos + 2
        line_end = buf.find(b"\r\n", pos)
        padding = buf[pos : len(buf) if line_end < 0 else line_end]
        if line_end < 0 and padding.endswith(b"\r"):
            padding = padding[:-1]  # the CR of a CRLF still to come
        if padding.strip(b" \t"):
            raise self._error(f"unexpected bytes after a boundary: {bytes(padding[:20])!r}")
        if line_end < 0:
            if len(padding) > self.max_header_bytes:
                raise self._error("too much padding after a boundary")
            return pos
        self._finish_part(events)
        if self._part_index + 1 >= self.max_parts:
            raise MultipartError(f"more than {self.max_parts} parts", part_index=self._part_index + 1)
        self._part_index += 1
        self._part_path = None
        self._state = State.HEADERS
        return line_end + 2

    def _whole_axon_parts(self, buf: bytes, pos: int, events: list[Event]) -> int:
        """The parts from ``pos`` on whose head is Axon's own (``_AXON_HEAD``) and that arrived
        whole, each one :class:`Part`, in one loop; the position after the last one's delimiter.
        It stops, for the general steps to go on, at the first part it cannot take whole: another
        head, a part cut by the feed's end, one past a limit or whose path does not decode (which
        the general steps then refuse with their own error)."""
        delimiter, size = self._delimiter, len(self._delimiter)
        match, data, index, last = _AXON_HEAD.match, self._data, self._part_index, self.max_parts - 1
        taken = None
        while index < last and (head := match(buf, pos)) is not None:
            body = head.end()
            if body - pos - 2 > self.max_header_bytes:
                break
            values = [value.decode("latin-1") for value in head.groups()]
            end = body + int(values[3])
            if buf[end : end + size] != delimiter or buf[end + size : end + size + 2] not in _AFTER_DELIMITER:
                break
            try:
                path = requested_path(values[2])
            except UnicodeDecodeError:
                break
            index += 1
            events.append(Part(index, tuple(zip(_AXON_NAMES, values)), data[body:end], path, None))
            taken = path, end - body
            pos = end + size
        if taken is not None:
            self._part_index, self._remaining = index, 0
            self._part_path, self._received = taken
        return pos

    def _step_epilogue(self, buf: bytes, pos: int, events: list[Event]) -> int:
        return len(buf)

    def _step_headers(self, buf: bytes, pos: int, events: list[Event]) -> int:
        if buf.startswith(b"\r\n", pos):
            block_end = pos  # a part with no headers at all
        else:
            block_end = buf.find(b"\r\n\r\n", pos)
            if block_end < 0:
                if len(buf) - pos > self.max_header_bytes:
                    raise self._header_limit_error()
                return pos
            block_end += 2
        if block_end + 2 - pos > self.max_header_bytes:
            raise self._header_limit_error()
        start = PartStart(self._part_index, self._parse_headers(buf[pos:block_end]))
        content_range = self._begin_part(start)
        body = block_end + 2
        if self.whole_parts and self._state is State.COUNTED_BODY:
            # The whole part is here if the delimiter follows its bytes, and then "--" or CRLF:
            # the next step surely completes in this feed, so the Part goes out where its PartEnd
            # would have (a feed that raises hands over no events either way).
            end = body + self._remaining
            after = buf[end : end + len(self._delimiter) + 2]
            if after[:-2] == self._delimiter and after[-2:] in _AFTER_DELIMITER:
                events.append(Part(start.index, start.headers, self._data[body:end], self._part_path, content_range))
                self._received, self._remaining, self._in_part = self._remaining, 0, False
                self._state = State.AFTER_DELIMITER
                return end + len(self._delimiter)
        events.append(start)
        return body

    # -- helpers

    def _parse_headers(self, block: bytes) -> tuple[tuple[str, str], ...]:
        """The block's header lines (each ending in CRLF) as (name, value) pairs."""
        text = block.decode("latin-1")
        if _FIELD_BLOCK.fullmatch(text) is None:
            raise self._header_error(text)
        # Checked: a name is a token (no colon), so the first colon ends it.
        fields = [line.partition(":") for line in text.split("\r\n")]
        fields.pop()  # the empty string after the last CRLF
        return tuple([(name, value.strip(" \t")) for name, _, value in fields])

    def _header_error(self, text: str) -> MultipartError:
        """What is wrong in a header block that ``_FIELD_BLOCK`` refused, line by line."""
        lines = text.split("\r\n")
        bare = text.replace("\r\n", "")
        if lines.pop() != "" or "\r" in bare or "\n" in bare:
            return self._error("bare CR or LF in the part headers")
        for line in lines:
            field = _FIELD_LINE.fullmatch(line)
            if field is None:
                if line[:1] in (" ", "\t"):
                    return self._error(f"control character or folded line in header line {line[:200]!r}")
                return self._error(f"malformed part headers: {line[:200]!r}")
            name, value = field.groups()
            if _BAD_VALUE_CHARS.search(value):
                return self._error(f"control character or folded line in header {name!r}")
        return self._error("malformed part headers")  # pragma: no cover - the block pattern is the lines'

    def _begin_part(self, start: PartStart) -> ContentRange | None:
        """Check the part's headers and set the state to read its body; its Content-Range."""
        # One pass over the headers for the three this checks (PartStart.get would be one each).
        location = range_value = None
        lengths = set()
        for key, value in start.headers:
            key = key.lower()
            if key == "content-length":
                lengths.add(value)
            elif key == "content-location" and location is None:
                location = value
            elif key == "content-range" and range_value is None:
                range_value = value
        if location is not None:
            try:
                self._part_path = requested_path(location)
            except UnicodeDecodeError:
                raise self._error(f"Content-Location is not percent-encoded UTF-8: {location!r}") from None
        if len(lengths) > 1:
            raise self._error(f"conflicting Content-Length headers: {sorted(lengths)}")
        length = None
        if lengths:
            (value,) = lengths
            if not (value.isascii() and value.isdigit()):
                raise self._error(f"invalid Content-Length: {value!r}")
            length = int(value)
        content_range = None
        if range_value is not None:
            try:
                content_range = parse_content_range(range_value)
            except ValueError as exc:
                raise self._error(str(exc)) from None
        if content_range is not None and length is not None and content_range.span != length:
            raise self._error(
                f"Content-Range covers {content_range.span} bytes but Content-Length is {length}"
            )
        self._in_part = True
        self._received = 0
        if length is not None:
            self._remaining = length
            self._state = State.COUNTED_BODY
        else:
            self._expected = None if content_range is None else content_range.span
            self._state = State.SCANNED_BODY
        return content_range

    def _finish_part(self, events: list[Event]) -> None:
        if not self._in_part:
            return
        if self._expected is not None and self._received != self._expected:
            raise self._error(f"received {self._received} bytes but Content-Range promised {self._expected}")
        self._in_part = False
        self._expected = None
        events.append(PartEnd())

    def _header_limit_error(self) -> MultipartError:
        return self._error(f"part headers exceed {self.max_header_bytes} bytes")

    def _error(self, message: str) -> MultipartError:
        index = self._part_index if self._part_index >= 0 else None
        return MultipartError(message, part_index=index, path=self._part_path)


def parse_content_range(value: str) -> ContentRange:
    """A ``Content-Range: bytes first-last/complete`` value (a part's, or a 206's); else ValueError."""
    match = _CONTENT_RANGE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"invalid Content-Range: {value!r}")
    first, last = int(match[1]), int(match[2])
    complete = None if match[3] == "*" else int(match[3])
    if last < first or (complete is not None and last >= complete):
        raise ValueError(f"invalid Content-Range: {value!r}")
    return ContentRange(first, last, complete)


_AFTER_DELIMITER = (b"\r\n", b"--")  # what follows a delimiter: a part's head, or the end

_STEPS = {
    State.PREAMBLE: MultipartParser._step_scan,
    State.SCANNED_BODY: MultipartParser._step_scan,
    State.COUNTED_BODY: MultipartParser._step_counted,
    State.DELIMITER_AFTER_COUNT: MultipartParser._step_delimiter_after_count,
    State.AFTER_DELIMITER: MultipartParser._step_after_delimiter,
    State.HEADERS: MultipartParser._step_headers,
    State.DONE: MultipartParser._step_epilogue,
}
