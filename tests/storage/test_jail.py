"""axon.storage.jail: a requested path normalized, then opened beneath the root and nowhere else.

The rules on names are tested here, pure (:func:`normalize`), and as :class:`RootJail` applies
them through its public face, the local store (the whole corpus of paths and links, each walk
and openat2: tests/storage/test_local.py)."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from axon.errors import HTTPError
from axon.storage.jail import RootJail, normalize, os_error
from axon.storage.local import FileStore

SETTINGS = settings(max_examples=400, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- normalize: pure --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, parts",
    [
        ("a", ["a"]),
        ("a/b/c", ["a", "b", "c"]),
        ("a/./b//c", ["a", "b", "c"]),
        ("./a", ["a"]),
        ("a/", ["a"]),
        ("a/../b", ["b"]),
        ("a/b/../../c", ["c"]),
        ("a/b/..", ["a"]),
        ("...", ["..."]),  # three dots is a name
        ("..a", ["..a"]),
        ("a..", ["a.."]),
        ("%2e%2e", ["%2e%2e"]),  # decoded once, before: this is a literal name
        ("%2e%2e/%2e%2e/etc/passwd", ["%2e%2e", "%2e%2e", "etc", "passwd"]),
        ("ünï cödé/名前.txt", ["ünï cödé", "名前.txt"]),
        (" ", [" "]),
        ("ab:c", ["ab:c"]),  # a colon after the second character is no drive
        ("1:/x", ["1:", "x"]),  # nor is a digit before one
    ],
)
def test_normalize_accepts(requested, parts):
    assert normalize(requested) == parts


@pytest.mark.parametrize(
    "requested, status, code",
    [
        ("", 400, "bad_path"),
        ("\x00", 400, "bad_path"),
        ("a\x00b", 400, "bad_path"),
        ("a.txt\x00.png", 400, "bad_path"),
        ("a\\b", 400, "bad_path"),
        ("..\\..\\windows\\win.ini", 400, "bad_path"),
        ("\\\\server\\share", 400, "bad_path"),
        ("/etc/passwd", 400, "bad_path"),
        ("//etc/passwd", 400, "bad_path"),
        ("/", 400, "bad_path"),
        ("C:", 400, "bad_path"),
        ("C:/Windows/win.ini", 400, "bad_path"),
        ("c:x", 400, "bad_path"),
        ("./a:", 400, "bad_path"),  # a drive after a "./" is still a drive (hypothesis found it)
        ("x/../c:/y", 400, "bad_path"),
        ("..", 403, "outside_root"),
        ("../x", 403, "outside_root"),
        ("a/../../x", 403, "outside_root"),
        ("./../x", 403, "outside_root"),
        ("a/b/../../..", 403, "outside_root"),
        (".", 403, "not_a_file"),
        ("./", 403, "not_a_file"),
        ("a/..", 403, "not_a_file"),
        ("a/b/../..", 403, "not_a_file"),
    ],
)
def test_normalize_refuses(requested, status, code):
    with pytest.raises(HTTPError) as info:
        normalize(requested)
    assert (info.value.status, info.value.code) == (status, code)
    assert info.value.paths == [requested]


_PATH_ALPHABET = st.sampled_from(list("./\\%\x00ab:C") + ["..", "/", "/", ".", "%2e", "%2f", "\udcff", "é"])


@SETTINGS
@given(st.lists(_PATH_ALPHABET, max_size=12).map("".join))
def test_normalize_property(requested):
    try:
        parts = normalize(requested)
    except HTTPError as exc:
        assert exc.status in (400, 403)
        return
    assert parts
    for part in parts:
        assert part not in ("", ".", "..")
        assert "/" not in part and "\\" not in part and "\x00" not in part
    # Normalizing is idempotent, and never climbs: every part appears in the request.
    assert normalize("/".join(parts)) == parts
    assert not requested.startswith("/")


@pytest.mark.parametrize("err, status, code", [
    (errno.ENOENT, 404, "not_found"), (errno.ENOTDIR, 404, "not_found"), (errno.ENAMETOOLONG, 404, "not_found"),
    (errno.EACCES, 403, "permission_denied"), (errno.EPERM, 403, "permission_denied"),
    (errno.EMFILE, 503, None), (errno.ENFILE, 503, None), (errno.EIO, 404, "not_found"),
])  # fmt: skip
def test_an_open_failure_is_the_status_of_the_wire_contract(err, status, code):
    refused = os_error(OSError(err, os.strerror(err)), "a/b.txt")
    assert refused.status == status and refused.paths == ["a/b.txt"]
    assert code is None or refused.code == code


def test_the_jail_holds_its_root_even_when_it_is_renamed(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_bytes(b"A")
    (tmp_path / "a.txt").write_bytes(b"OUTSIDE")
    store = FileStore(root)
    assert isinstance(store, RootJail) and store.root == str(root)
    root.rename(tmp_path / "moved")
    (tmp_path / "root").mkdir()  # another directory now at the old name
    f = store.open("a.txt")
    try:
        assert os.pread(f.fd, 10, 0) == b"A"  # the directory it was given, not the path
    finally:
        f.close()
    with pytest.raises(HTTPError) as refused:
        store.open("../a.txt")
    assert refused.value.status == 403


def test_a_root_that_is_no_directory_is_refused(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    for bad in (tmp_path / "file", tmp_path / "missing"):
        with pytest.raises(ValueError, match="root is not a directory"):
            RootJail(bad)
