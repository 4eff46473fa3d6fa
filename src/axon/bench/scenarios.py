"""The scenario matrix: what one benchmark run asks of a server, and how each kind of server is asked.

The article's T1-T8 are four payload sizes, each as one file and as two files of half the size,
to separate the cost per file from the cost per byte. B32 (32 x 4 KB) stresses the cost per file
alone. F8, F64 and F512 ask ``/files/`` for the file T1, T3 and T7 carry as a batch of one: a
single file should cost no more than the batch that carries it. The health and error baselines measure the request layer with no file I/O, and the JSON
echo of seed 004 measures what a user's own endpoint costs on top of the request layer.

Pure data and string building: nothing here opens a socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from ..demo import SAMPLES, SMALL_FILES, make_samples

KB = 1024
# The seed-004 user object, byte for byte as its wrk script posts it.
ECHO_BODY = b'{"id": 1, "name": "user", "email": "user@email.com"}'
MISSING_FILE = "examples/missing.bin"


@dataclass(frozen=True)
class Scenario:
    name: str  # "T1", "B32", "F64", "health", ...
    kind: str  # "batch" | "file" | "health" | "error" | "echo"
    file_count: int = 0
    file_size: int = 0  # bytes, each file

    @property
    def payload(self) -> int:
        return self.file_count * self.file_size

    @property
    def files(self) -> list[str]:
        """The files one request names, relative to the served root, as the article named them."""
        if self.kind not in ("batch", "file"):
            return []
        if self.file_count > 2:  # B32: distinct small files, so each part is its own open and stat
            return [f"examples/small/{i:02d}.bin" for i in range(self.file_count)]
        # T1-T8: the article requested the same file twice for its two-file cases.
        return [f"examples/{_sample_name(self.file_size)}"] * self.file_count

    @property
    def label(self) -> str:
        if self.kind == "batch":
            return f"{self.file_count}x{_size_label(self.file_size)}"
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


GROUPS = {
    "all": [s.name for s in matrix()],
    "article": [f"T{i}" for i in range(1, 9)],
    "baselines": ["health", "error", "echo"],
    "files": ["F8", "F64", "F512"],
}


def select(spec: str) -> list[Scenario]:
    """Scenarios named by a comma list of names and group names (``article``, ``baselines``, ``all``)."""
    by_name = {s.name.lower(): s for s in matrix()}
    wanted: list[str] = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        names = GROUPS.get(item.lower(), [item])
        for name in names:
            if name.lower() not in by_name:
                raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(s.name for s in matrix())} or {', '.join(GROUPS)}")
            if name.lower() not in (w.lower() for w in wanted):
                wanted.append(by_name[name.lower()].name)
    order = [s.name for s in matrix()]
    return [by_name[n.lower()] for n in sorted(wanted, key=order.index)]


def request_for(scenario: Scenario, dialect: Dialect) -> HttpRequest | None:
    """The request that plays ``scenario`` against a server speaking ``dialect``, or None when that
    server has no equivalent (a static server cannot echo JSON)."""
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
    if not dialect.batch_endpoint:
        # All files of a T-scenario batch have one size, so any one of them is as costly to serve.
        return HttpRequest("GET", "/files/" + quote(files[0]), per_batch=len(files))
    query = urlencode([(f"file{i}", name) for i, name in enumerate(files, 1)], safe="/")
    return HttpRequest("GET", f"/api/stream-files?{query}")


def ensure_files(files_dir: str | Path) -> Path:
    """Create the sample files under ``files_dir/examples`` (those missing or of the wrong size).

    The same files ``axon demo`` makes, so the article's URLs (``file1=examples/8kb.bin``) work on
    every target. Returns the absolute root to serve.
    """
    root = Path(files_dir).expanduser().resolve()
    make_samples(root)
    return root


def _sample_name(size: int) -> str:
    for name, sample_size in SAMPLES.items():
        if sample_size == size:
            return name
    raise ValueError(f"no sample file of {size} bytes")


def _size_label(size: int) -> str:
    return f"{size // KB}KB" if size % KB == 0 else f"{size}B"
