"""The root jail and header hygiene over real sockets, on every runtime.

Every hostile path must come back as a JSON 400, 403 or 404 and never carry the content of
``/etc/passwd`` (``root:``); none may hang the server (FIFO, ``/dev/zero``).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from e2e_wire import HOSTILE_NAME, UNICODE_NAME, batch_target, check_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(30)]  # every runtime over real sockets

BAD = (400, 403, 404)

# (id, query value exactly as sent, the path Axon sees after decoding it once, allowed statuses)
CORPUS = [
    ("dotdot", "../etc/passwd", "../etc/passwd", BAD),
    ("dotdot-deep", "../../../../etc/passwd", "../../../../etc/passwd", BAD),
    ("dotdot-encoded", "%2e%2e/%2e%2e/etc/passwd", "../../etc/passwd", BAD),
    ("dotdot-encoded-slash", "..%2F..%2Fetc%2Fpasswd", "../../etc/passwd", BAD),
    # decoded once this is the literal name "%2e%2e%2fetc%2fpasswd": must not be decoded again
    ("double-encoded", "%252e%252e%252fetc%252fpasswd", "%2e%2e%2fetc%2fpasswd", BAD),
    ("absolute", "/etc/passwd", "/etc/passwd", BAD),
    ("absolute-double-slash", "//etc/passwd", "//etc/passwd", BAD),
    ("inside-then-out", "examples/../../etc/passwd", "examples/../../etc/passwd", BAD),
    ("backslashes", "..%5C..%5Cetc%5Cpasswd", "..\\..\\etc\\passwd", BAD),
    ("windows-drive", "C:%5CWindows%5Cwin.ini", "C:\\Windows\\win.ini", BAD),
    ("drive-slash", "C:/x", "C:/x", BAD),
    ("nul", "examples/a.bin%00.txt", "examples/a.bin\x00.txt", BAD),
    ("symlink-out-file", "escape", "escape", (403,)),
    ("symlink-out-dir", "escdir/passwd", "escdir/passwd", (403,)),
    ("fifo", "examples/fifo", "examples/fifo", (403,)),
    ("dev-zero-link", "examples/zero.bin", "examples/zero.bin", (403,)),
    ("directory", "examples", "examples", (403,)),
    ("root-itself", ".", ".", BAD),
    ("hidden", ".secret", ".secret", (403,)),
    ("hidden-via-dotdot", "examples/../.secret", "examples/../.secret", (403,)),
    ("hidden-via-symlink", "link-to-dot", "link-to-dot", (403,)),
    ("hidden-via-symlinked-dir", "link-dir/x.txt", "link-dir/x.txt", (403,)),
]
IDS = [case[0] for case in CORPUS]


def check_refused(resp, statuses, path=None):
    assert b"root:" not in resp.body, f"/etc/passwd leaked!\n{resp.describe()}"
    err = resp.error(*statuses)
    if path is not None:
        assert path in err.get("paths", []), f"error does not name {path!r}: {err!r}"
    return err


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_traversal_in_query(server, case):
    _, raw, decoded, statuses = case
    resp = server.get(f"/api/stream-files?file1={raw}", timeout=10)
    check_refused(resp, statuses, decoded)


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_traversal_in_json(server, case):
    _, _, decoded, statuses = case
    resp = server.post_files([decoded], timeout=10)
    check_refused(resp, statuses, decoded)


@pytest.mark.parametrize("case", CORPUS, ids=IDS)
def test_traversal_among_good_files(server, case):
    """One bad path spoils the whole batch: a 4xx, never a 200 with the good files."""
    _, raw, decoded, statuses = case
    resp = server.get(f"/api/stream-files?a=examples/a.bin&b={raw}&c=examples/small.txt", timeout=10)
    err = check_refused(resp, statuses, decoded)
    assert "examples/a.bin" not in err.get("paths", [])


# Raw request targets for /files/<path>: sent byte for byte over a socket so no client library
# normalizes them. A runtime may normalize dot segments itself; then the request lands on
# another route and must still be a JSON 4xx.
FILES_CORPUS = [
    ("dotdot", "/files/../../etc/passwd"),
    ("dotdot-inside", "/files/examples/../../etc/passwd"),
    ("dotdot-encoded", "/files/%2e%2e/%2e%2e/etc/passwd"),
    ("dotdot-encoded-slash", "/files/..%2f..%2fetc%2fpasswd"),
    ("double-encoded", "/files/%252e%252e%252fetc%252fpasswd"),
    ("absolute", "/files//etc/passwd"),
    ("absolute-encoded", "/files/%2fetc%2fpasswd"),
    ("backslashes", "/files/..%5c..%5cetc%5cpasswd"),
    ("nul", "/files/examples/a.bin%00.txt"),
    ("symlink-out-file", "/files/escape"),
    ("symlink-out-dir", "/files/escdir/passwd"),
    ("fifo", "/files/examples/fifo"),
    ("dev-zero-link", "/files/examples/zero.bin"),
    ("directory", "/files/examples"),
    ("directory-slash", "/files/examples/"),
    ("hidden", "/files/.secret"),
    ("hidden-via-symlink", "/files/link-to-dot"),
    ("hidden-via-symlinked-dir", "/files/link-dir/x.txt"),
]


@pytest.mark.parametrize("target", [t for _, t in FILES_CORPUS], ids=[i for i, _ in FILES_CORPUS])
def test_traversal_in_files_path(server, target):
    resp = server.get(target, timeout=10)
    check_refused(resp, BAD)
    assert server.get("/api/health").status == 200


@pytest.mark.parametrize("target", ["/files/escape", "/files/examples/fifo", "/files/.secret"])
def test_files_refusals_are_403(server, target):
    check_refused(server.get(target, timeout=10), (403,))


HIDDEN_VIA_LINKS = ["link-to-dot", "link-dir/x.txt"]  # conftest: links to .secret and .hid


@pytest.mark.parametrize(
    "target",
    [
        *(f"/files/{path}" for path in HIDDEN_VIA_LINKS),
        batch_target(HIDDEN_VIA_LINKS),
        batch_target(["examples/small.txt", "link-to-dot"]),
        batch_target(["link-dir/x.txt", "examples/a.bin"]),
    ],
    ids=["file-link-to-dot", "file-link-dir", "batch-both", "batch-link-to-dot", "batch-link-dir"],
)
def test_hidden_via_symlinks_is_403(server, served_root, target):
    """A link with a visible name to a dot-file or dot-directory is refused as the dot-name
    itself would be, and not a byte of what it points to is sent."""
    resp = server.get(target, timeout=10)
    err = check_refused(resp, (403,))
    codes = [d["code"] for d in err["details"]] if "details" in err else [err["code"]]
    assert codes and set(codes) == {"hidden"}, err
    for secret in (served_root / ".secret", served_root / ".hid" / "x.txt"):
        assert secret.read_bytes() not in resp.body, resp.describe()


def test_symlink_inside_root_is_served(server, served_root):
    resp = server.get("/files/examples/link.bin")
    assert resp.status == 200, resp.describe()
    assert resp.body == (served_root / "examples/a.bin").read_bytes()


@pytest.mark.parametrize("name", [HOSTILE_NAME, UNICODE_NAME], ids=["quote-newline", "non-ascii"])
def test_hostile_filename_get(server, served_root, name):
    """check_batch asserts: one-line Content-Disposition, ASCII fallback without raw quote or
    CR/LF, ``filename*=UTF-8''`` percent-encoded, which the email package decodes to the real
    name, and a percent-encoded Content-Location."""
    paths = [f"examples/{name}", "examples/small.txt"]
    check_batch(server.get(batch_target(paths)), paths, served_root)


@pytest.mark.parametrize("name", [HOSTILE_NAME, UNICODE_NAME], ids=["quote-newline", "non-ascii"])
def test_hostile_filename_single_file(server, served_root, name):
    resp = server.get("/files/examples/" + quote(name, safe=""))
    assert resp.status == 200, resp.describe()
    assert resp.body == (served_root / "examples" / name).read_bytes()


def test_no_header_injection_from_request(server):
    """A requested path with CR/LF reaches no response header raw (read_response refuses
    bare CR/LF and folded lines); the JSON error carries it escaped."""
    evil = "examples/x\r\nX-Injected: 1\r\n\r\n<html>"
    for resp in (
        server.get(batch_target([evil])),
        server.post_files([evil]),
        server.get("/files/" + quote(evil, safe="/")),
    ):
        err = resp.error(400, 404)
        assert resp.header("x-injected") is None, resp.describe()
        if "paths" in err and resp.target.startswith("/api/"):
            assert err["paths"] == [evil]
