"""The scenario matrix: what one benchmark run asks of a server, and how each kind of server is asked.

The article's T1-T8 are four payload sizes, each as one file and as two files of half the size,
to separate the cost per file from the cost per byte. B32 (32 x 4 KB) stresses the cost per file
alone. F8, F64 and F512 ask ``/files/`` for the file T1, T3 and T7 carry as a batch of one: a
single file should cost no more than the batch that carries it. The health and error baselines measure the request layer with no file I/O, and the JSON
echo of seed 004 measures what a user's own endpoint costs on top of the request layer.

Real traffic comes first. In the article's scenarios every request is byte-identical, which a
server may answer from memory; users do not send the same bytes twice. R1, R32 and R256 ask for
1, 32 or 256 files drawn at random, for every request, from a pool of 10,000 files of 4 KiB
(:func:`ensure_pool`); F1 asks ``/files/`` for one. A static server gets one random file per
request and n of its requests count as one batch. A *distinct* scenario (``T1~``, ``health~``,
...) is its base with a header whose value changes with every request: the same work, but no two
requests alike. wrk's Lua builds these requests (:mod:`axon.bench.lua`); here they are described.

The archive scenarios ask for B32 and T8 as zip and as tar (``B32.zip``, ``T8.tar``, ...) beside
the same batch as multipart, at the archive URLs a browser uses. A zip entry needs each file's
CRC-32, which the server keeps per file version once read: the plain zip scenarios measure it
warm (the probe before the measured phases has served the batch once). ``B32.zip.cold`` and
``T8.zip.cold`` measure it cold on every request: the target serves an app whose CRC cache
keeps nothing (:data:`axon.bench.echo_app.cold_app`), so each request reads its files (from
the page cache) for their CRCs, as the first request after a file changed does. A tar needs no
checksum of the contents, so it has no cold case.

Pure data and string building: nothing here opens a socket.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote, urlencode

from ..demo import SAMPLES, SMALL_FILES, make_samples

KB = 1024
# The seed-004 user object, byte for byte as its wrk script posts it.
ECHO_BODY = b'{"id": 1, "name": "user", "email": "user@email.com"}'
MISSING_FILE = "examples/missing.bin"
# The pool random scenarios draw from: POOL_FILES files of POOL_FILE_SIZE bytes, at most
# POOL_PER_DIR to a directory (a directory of 10,000 entries is not what a data set looks like).
POOL_FILES = 10_000
POOL_FILE_SIZE = 4 * KB
POOL_PER_DIR = 1_000
#: printf-style, for Python's ``%`` and Lua's string.format alike: (directory, file index).
POOL_FORMAT = "pool/%02d/%05d.bin"
#: A distinct scenario's name is its base's and this; its requests carry DISTINCT_HEADER.
DISTINCT = "~"
DISTINCT_HEADER = "X-Request-Id"


@dataclass(frozen=True)
class Scenario:
    name: str  # "T1", "B32", "B32.zip", "F64", "health", ...
    kind: str  # "batch" | "file" | "health" | "error" | "echo"
    file_count: int = 0
    file_size: int = 0  # bytes, each file
    format: str = "multipart"  # a batch's format: "multipart", "zip" or "tar"
    #: Served by an app that keeps no CRC-32, so every zip reads its files first.
    cold: bool = False
    #: > 0: every request names ``file_count`` files drawn at random from a pool of this many.
    pool: int = 0
    #: Every request carries a header whose value changes, so that no two are byte-identical.
    distinct: bool = False

    @property
    def payload(self) -> int:
        return self.file_count * self.file_size

    @property
    def files(self) -> list[str]:
        """The files one request names, relative to the served root, as the article named them."""
        if self.kind not in ("batch", "file"):
            return []
        if self.pool:  # drawn anew for every request; these are the probe's (the pool's first)
            return [pool_name(i) for i in range(self.file_count)]
        if self.file_count > 2:  # B32: distinct small files, so each part is its own open and stat
            return [f"examples/small/{i:02d}.bin" for i in range(self.file_count)]
        # T1-T8: the article requested the same file twice for its two-file cases.
        return [f"examples/{_sample_name(self.file_size)}"] * self.file_count

    @property
    def label(self) -> str:
        label = self._label()
        if self.pool:
            label += f" random of {self.pool:,}"
        return label + (", a new header each request" if self.distinct else "")

    def _label(self) -> str:
        if self.kind == "batch":
            label = f"{self.file_count}x{_size_label(self.file_size)}"
            if self.format != "multipart":
                label += f" {self.format}" + (", CRCs cold" if self.cold else "")
            return label
        if self.kind == "file":
            return f"/files/ {_size_label(self.file_size)}"
        return {"health": "GET /api/health", "error": "missing file (404)", "echo": "POST JSON echo"}[self.kind]

    @property
    def expect_status(self) -> int:
        return 404 if self.kind == "error" else 200


@dataclass(frozen=True)
class Dialect:
    """How a kind of server is asked for a scenario.

    ``axon`` is the wire contract (Axon and the original share it). ``static`` is a plain file
    server (nginx, the yardstick): it serves one file per request, so a batch of n files costs it
    n requests; we send it one of the batch's files and count n of its requests as one batch.
    """

    name: str
    batch_endpoint: bool = True
    echo: bool = True
    files_endpoint: bool = True  # GET /files/<path>: one file, as a static server serves it


AXON = Dialect("axon")
#: The original speaks Axon's batch API but has no /files/ endpoint.
ORIGINAL = Dialect("original", files_endpoint=False)
STATIC = Dialect("static", batch_endpoint=False, echo=False)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    target: str  # path and query, as sent on the request line
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    # How many of these requests make one scenario "batch" (n for a static server, else 1).
    per_batch: int = 1
    # Files drawn at random for each request; ``target`` is then the probe's, from the pool's start.
    draw: Draw | None = None
    # A header to send with a new value on every request ("" for none).
    distinct_header: str = ""

    @property
    def dynamic(self) -> bool:
        """Whether each request is built anew (wrk's Lua ``request()``), not sent as the same bytes."""
        return self.draw is not None or bool(self.distinct_header)


@dataclass(frozen=True)
class Draw:
    """``count`` distinct files drawn at random for each request from ``pool_name(0..pool-1)``,
    named in a batch's query (``batch``) or as one ``/files/`` path."""

    count: int
    pool: int
    batch: bool

    def __post_init__(self) -> None:
        if not 0 < self.count <= self.pool:
            raise ValueError(f"cannot draw {self.count} distinct files from a pool of {self.pool}")


def real() -> list[Scenario]:
    """The random-file scenarios, report first: batches of 1, 32 and 256 and one /files/ file."""
    out = [Scenario(f"R{n}", "batch", n, POOL_FILE_SIZE, pool=POOL_FILES) for n in (1, 32, 256)]
    out.append(Scenario("F1", "file", 1, POOL_FILE_SIZE, pool=POOL_FILES))
    return out


def as_distinct(scenario: Scenario) -> Scenario:
    """``scenario`` with a header that changes every request (random ones are distinct already)."""
    if scenario.pool or scenario.distinct:
        return scenario
    return replace(scenario, name=scenario.name + DISTINCT, distinct=True)


def matrix() -> list[Scenario]:
    """Every scenario, in report order: T1-T8, B32, the single files, then the baselines."""
    pairs = [8, 64, 256, 512]  # total payload in KB, each as 1 file and as 2 halves
    out = []
    for i, total in enumerate(pairs):
        out.append(Scenario(f"T{2 * i + 1}", "batch", 1, total * KB))
        out.append(Scenario(f"T{2 * i + 2}", "batch", 2, total * KB // 2))
    out.append(Scenario("B32", "batch", SMALL_FILES, 4 * KB))
    for size in (8, 64, 512):  # the files of T1, T3 and T7
        out.append(Scenario(f"F{size}", "file", 1, size * KB))
    out.append(Scenario("health", "health"))
    out.append(Scenario("error", "error"))
    out.append(Scenario("echo", "echo"))
    return out


def archives() -> list[Scenario]:
    """B32 and T8 as zip (CRCs known, then cold) and as tar, each after its multipart original."""
    out = []
    for base in (s for s in matrix() if s.name in ("B32", "T8")):
        out.append(replace(base, name=f"{base.name}.zip", format="zip"))
        out.append(replace(base, name=f"{base.name}.zip.cold", format="zip", cold=True))
        out.append(replace(base, name=f"{base.name}.tar", format="tar"))
    return out


def every() -> list[Scenario]:
    """Every scenario there is, in report order: real traffic first, then the matrix with each
    archive after the batch it frames."""
    out = real()
    extra = archives()
    for s in matrix():
        out.append(s)
        out += [a for a in extra if a.name.split(".")[0] == s.name]
    return out


def catalogue() -> list[Scenario]:
    """Every scenario and every distinct variant, in report order: real traffic (the random
    files, then the distinct variants), then repeated requests."""
    repeated = [s for s in every() if not s.pool]
    return real() + [as_distinct(s) for s in repeated] + repeated


GROUPS = {
    "all": [s.name for s in real() + matrix()],
    "real": [s.name for s in real()],
    # The requests that never repeat: the same work as the base scenario, headers aside.
    "distinct": [n + DISTINCT for n in ("T1", "T3", "B32", "health")],
    "article": [f"T{i}" for i in range(1, 9)],
    "baselines": ["health", "error", "echo"],
    # Three formats side by side: each batch, then its zip (warm, cold) and tar.
    "archive": [s.name for s in every() if s.name.split(".")[0] in ("B32", "T8")],
    "files": ["F8", "F64", "F512"],
}


def select(spec: str) -> list[Scenario]:
    """Scenarios named by a comma list of names and group names (``real``, ``distinct``,
    ``article``, ``baselines``, ``archive``, ``all``: real traffic, the article's matrix and the
    baselines, without the archives). A name ending in ``~`` is its distinct variant."""
    known = catalogue()
    by_name = {s.name.lower(): s for s in known}
    wanted: list[str] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        names = GROUPS.get(item.lower(), [item])
        for name in names:
            if name.lower() not in by_name:
                raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(s.name for s in every())} "
                                 f"(each also with a trailing {DISTINCT}) or {', '.join(GROUPS)}")
            if by_name[name.lower()].name not in wanted:
                wanted.append(by_name[name.lower()].name)
    order = [s.name for s in known]
    return [by_name[n.lower()] for n in sorted(wanted, key=order.index)]


def find(name: str) -> Scenario:
    """The scenario (or distinct variant) called ``name``, exactly."""
    for scenario in catalogue():
        if scenario.name == name:
            return scenario
    raise KeyError(name)


def request_for(scenario: Scenario, dialect: Dialect) -> HttpRequest | None:
    """The request that plays ``scenario`` against a server speaking ``dialect``, or None when that
    server has no equivalent (a static server cannot echo JSON)."""
    request = _fixed_request(scenario, dialect)
    if request is None:
        return None
    if scenario.pool:
        batch = scenario.kind == "batch" and dialect.batch_endpoint  # else one file a request
        request = replace(request, draw=Draw(scenario.file_count if batch else 1, scenario.pool, batch))
    if scenario.distinct:
        request = replace(request, distinct_header=DISTINCT_HEADER)
    return request


def _fixed_request(scenario: Scenario, dialect: Dialect) -> HttpRequest | None:
    if scenario.kind == "health":
        return HttpRequest("GET", "/api/health")
    if scenario.kind == "echo":
        if not dialect.echo:
            return None
        return HttpRequest("POST", "/api/echo", ECHO_BODY, (("Content-Type", "application/json"),))
    if scenario.kind == "file":
        if not dialect.files_endpoint:
            return None
        return HttpRequest("GET", "/files/" + quote(scenario.files[0]))
    files = scenario.files if scenario.kind == "batch" else [MISSING_FILE]
    if not dialect.batch_endpoint and scenario.format != "multipart":
        return None  # a static server has no archive of several files to compare with
    if not dialect.batch_endpoint:
        # All files of a T-scenario batch have one size, so any one of them is as costly to serve.
        return HttpRequest("GET", "/files/" + quote(files[0]), per_batch=len(files))
    query = urlencode([(f"file{i}", name) for i, name in enumerate(files, 1)], safe="/")
    # An archive at its own URL, as a browser's link or form asks for it (no Accept needed).
    suffix = "" if scenario.format == "multipart" else f".{scenario.format}"
    return HttpRequest("GET", f"/api/stream-files{suffix}?{query}")


def ensure_files(files_dir: str | Path, pool: bool = False) -> Path:
    """Create the sample files under ``files_dir/examples`` (those missing or of the wrong size),
    and with ``pool`` the random scenarios' pool under ``files_dir/pool``.

    The same files ``axon demo`` makes, so the article's URLs (``file1=examples/8kb.bin``) work on
    every target. Returns the absolute root to serve.
    """
    root = Path(files_dir).expanduser().resolve()
    make_samples(root)
    if pool:
        ensure_pool(root)
    return root


def pool_name(index: int) -> str:
    """The pool's file number ``index``, relative to the served root."""
    return POOL_FORMAT % (index // POOL_PER_DIR, index)


def ensure_pool(root: str | Path, count: int = POOL_FILES, size: int = POOL_FILE_SIZE) -> int:
    """Write the pool under ``root`` (only files missing or of the wrong size); returns how many
    were written. Each file's bytes are random, and seeded by its name: distinct from the others,
    and the same on every machine and every run."""
    root = Path(root)
    made = 0
    for i in range(count):
        path = root / pool_name(i)
        try:
            if path.stat().st_size == size:
                continue
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(random.Random(pool_name(i)).randbytes(size))
        made += 1
    return made


def _sample_name(size: int) -> str:
    for name, sample_size in SAMPLES.items():
        if sample_size == size:
            return name
    raise ValueError(f"no sample file of {size} bytes")


def _size_label(size: int) -> str:
    return f"{size // KB}KB" if size % KB == 0 else f"{size}B"
