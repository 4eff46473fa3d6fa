"""FileStore, the root jail: the bad-input corpus, symlinks in and out, and property tests.

Every refusal must be an HTTPError (400 bad path, 403 outside / hidden / not a file, 404 missing),
every success an OpenFile whose descriptor really is inside the root, and nothing outside the root
may ever be opened, not even a directory on the way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from axon.storage import jail as resolving
from axon.errors import HTTPError
from axon.storage.local import FileStore, OpenFile, normalize

SETTINGS = settings(max_examples=400, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- a tree with symlinks pointing in, out, around and nowhere -------------------------------------


@pytest.fixture(scope="module")
def jail(tmp_path_factory) -> Path:
    """``base/root`` (served) next to ``base/outside`` and ``base/rootx`` (never to be opened)."""
    base = Path(os.path.realpath(tmp_path_factory.mktemp("jail")))  # absolute links name the real path
    root = base / "root"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"A" * 10)
    (root / "sub" / "c.txt").write_bytes(b"C" * 3)
    (root / "sub" / "deeper" / "d.txt").write_bytes(b"D")
    (root / ".hidden").write_bytes(b"H")
    (root / "sub" / ".secret").write_bytes(b"S")
    (root / ".hid").mkdir()
    (root / ".hid" / "x.txt").write_bytes(b"HX")
    (root / "%2e%2e").write_bytes(b"literal")  # a file whose name is the encoded form of ".."
    (root / "ünï cödé.txt").write_bytes(b"U")
    os.mkfifo(root / "fifo")
    (base / "outside" / "dir").mkdir(parents=True)
    (base / "outside" / "secret.txt").write_bytes(b"SECRET")
    (base / "outside" / "dir" / "x.txt").write_bytes(b"X")
    (base / "outside" / "back").symlink_to(root / "a.txt")  # outside, pointing back in
    (base / "rootx").mkdir()  # shares the root's name as a prefix: "/…/root" vs "/…/rootx"
    (base / "rootx" / "secret.txt").write_bytes(b"PREFIX")

    links = {
        "out_abs": base / "outside" / "secret.txt",
        "out_rel": "../outside/secret.txt",
        "outdir_abs": base / "outside",
        "outdir_rel": "../outside",
        "out_back": "../outside/back",
        "prefix": base / "rootx" / "secret.txt",
        "prefixdir": "../rootx",
        "etc": "/etc",
        "zero": "/dev/zero",
        "in_file": "a.txt",
        "in_abs": root / "a.txt",
        "in_dir": "sub",
        "in_dir_abs": root / "sub",
        "rootlink": root,
        "dotdot": "..",
        "dot": ".",
        "chain1": "chain2",
        "chain2": "chain3",
        "chain3": "in_file",
        "loop1": "loop2",
        "loop2": "loop1",
        "self": "self",
        "dangling": "nope.txt",
        "to_hidden": ".hidden",
        "to_hidden_abs": root / ".hidden",
        "hid_dir": ".hid",
        "hid_dir_abs": root / ".hid",
        "hchain1": "hchain2",
        "hchain2": "to_hidden",
        "hid_via": "hid_dir/x.txt",
        "through_hid": ".hid/../a.txt",
        "to_dot_link": ".dot_link",
        ".dot_link": "a.txt",
        "sub/to_secret": ".secret",
        "sub/up_hidden": "../.hidden",
        "sub/up_hid_dir": "../.hid",
        "sub/up": "../a.txt",
        "sub/up_dir": "..",
        "sub/esc": "../../outside/secret.txt",
        "sub/esc_abs_dotdot": f"{root}/sub/../../outside/secret.txt",
        "sub/deeper/up2": "../../a.txt",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    return root


# -- both ways of opening: openat2 (RESOLVE_BENEATH) and the portable walk ------------------------

MODES = ["openat2", "walk"]


def make_store(root, mode: str, **kwargs) -> FileStore:
    """A FileStore that opens with openat2 or, with ``mode="walk"``, by the portable walk only."""
    if mode == "walk":
        saved, resolving._OPENAT2 = resolving._OPENAT2, None
        try:
            return FileStore(root, **kwargs)
        finally:
            resolving._OPENAT2 = saved
    store = FileStore(root, **kwargs)
    if store._openat2 is None:
        pytest.skip("openat2 is not available here")
    return store


_STORES: dict = {}  # (root, mode, allow_hidden) -> FileStore, for the jail tests


def _cached_store(root, mode: str, allow_hidden: bool) -> FileStore:
    key = (str(root), mode, allow_hidden)
    if key not in _STORES:
        _STORES[key] = make_store(root, mode, allow_hidden=allow_hidden)
    return _STORES[key]


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def store(root, mode) -> FileStore:
    return make_store(root, mode)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


@contextlib.contextmanager
def record_opens(store: FileStore):
    """Record the real path of every descriptor opened (``os.open`` or openat2) while active."""
    real_open, real_openat2 = os.open, store._openat2
    opened: list[str] = []

    def recording_open(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        return fd

    def recording_openat2(dir_fd, path):
        fd = real_openat2(dir_fd, path)
        if fd >= 0:
            opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        return fd

    os.open = recording_open
    if real_openat2 is not None:
        store._openat2 = recording_openat2
    try:
        yield opened
    finally:
        os.open = real_open
        store._openat2 = real_openat2


@contextlib.contextmanager
def opens_stay_inside(store: FileStore, root: str, requested: str, open_fds):
    """Around ``store.open(requested)``: nothing outside ``root`` is opened, no descriptor is left."""
    before = open_fds()
    with record_opens(store) as opened:
        yield
    outside = [p for p in opened if not _inside(p, root)]
    assert not outside, f"{requested!r} opened outside the root: {outside}"
    assert open_fds() <= before


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


# -- FileStore.open: the corpus ---------------------------------------------------------------

OK = "ok"

#: Requested paths without a dot-name that reach one through a symlink, and what they hold.
HIDDEN_VIA_LINKS = [
    ("to_hidden", b"H"),  # a link to a dot-file
    ("to_hidden_abs", b"H"),  # the same, by an absolute target inside the root
    ("hid_dir/x.txt", b"HX"),  # through a link to a dot-directory
    ("hid_dir_abs/x.txt", b"HX"),
    ("hchain1", b"H"),  # a chain of links ending at a dot-file
    ("hid_via", b"HX"),  # a link through a link to a dot-directory
    ("through_hid", b"A" * 10),  # a target whose ".." passes through a dot-directory
    ("to_dot_link", b"A" * 10),  # through a dot-named link to a visible file
    ("sub/to_secret", b"S"),
    ("sub/up_hidden", b"H"),  # a target that climbs to a dot-file
    ("sub/up_hid_dir/x.txt", b"HX"),
    ("in_dir/to_secret", b"S"),  # a link to a directory, then a link to a dot-file
    ("rootlink/to_hidden", b"H"),
]

CORPUS = [
    # plain files, and paths that stay inside
    ("a.txt", OK, b"A" * 10),
    ("sub/c.txt", OK, b"CCC"),
    ("./a.txt", OK, b"A" * 10),
    ("sub//c.txt", OK, b"CCC"),
    ("sub/./c.txt", OK, b"CCC"),
    ("sub/../a.txt", OK, b"A" * 10),
    ("sub/deeper/../c.txt", OK, b"CCC"),
    ("ünï cödé.txt", OK, b"U"),
    # encoded and double-encoded traversal: the store gets decoded strings, so these are names
    ("%2e%2e", OK, b"literal"),
    ("%2e%2e/outside/secret.txt", 404, "not_found"),
    ("%2e%2e%2foutside%2fsecret.txt", 404, "not_found"),
    ("..%2foutside%2fsecret.txt", 403, "hidden"),  # one name, starting with a dot
    ("%252e%252e/%252e%252e/etc/passwd", 404, "not_found"),
    ("..%5coutside%5csecret.txt", 403, "hidden"),
    ("x%2f..%2f..%2foutside%2fsecret.txt", 404, "not_found"),
    ("a.txt%00.png", 404, "not_found"),
    # climbing out
    ("..", 403, "outside_root"),
    ("../outside/secret.txt", 403, "outside_root"),
    ("sub/../../outside/secret.txt", 403, "outside_root"),
    ("../root/a.txt", 403, "outside_root"),
    # backslashes, NUL, absolute, drives
    ("..\\outside\\secret.txt", 400, "bad_path"),
    ("sub\\c.txt", 400, "bad_path"),
    ("a.txt\x00", 400, "bad_path"),
    ("a.txt\x00.png", 400, "bad_path"),
    ("/etc/passwd", 400, "bad_path"),
    ("//etc/passwd", 400, "bad_path"),
    ("///a.txt", 400, "bad_path"),
    ("C:/Windows/win.ini", 400, "bad_path"),
    ("c:\\boot.ini", 400, "bad_path"),
    ("", 400, "bad_path"),
    # not regular files
    (".", 403, "not_a_file"),
    ("sub", 403, "not_a_file"),
    ("sub/", 403, "not_a_file"),
    ("in_dir", 403, "not_a_file"),
    ("fifo", 403, "not_a_file"),
    ("rootlink", 403, "not_a_file"),
    ("dot", 403, "not_a_file"),
    # symlinks out of the root: to a file and to a directory, absolute and relative targets
    ("out_abs", 403, "outside_root"),
    ("out_rel", 403, "outside_root"),
    ("outdir_abs", 403, "outside_root"),
    ("outdir_abs/secret.txt", 403, "outside_root"),
    ("outdir_abs/dir/x.txt", 403, "outside_root"),
    ("outdir_rel/secret.txt", 403, "outside_root"),
    ("out_back", 403, "outside_root"),  # out and back in is still out
    ("prefix", 403, "outside_root"),  # /…/rootx is not inside /…/root
    ("prefixdir/secret.txt", 403, "outside_root"),
    ("etc/passwd", 403, "outside_root"),
    ("zero", 403, "outside_root"),
    ("dotdot", 403, "outside_root"),
    ("dotdot/root/a.txt", 403, "outside_root"),
    ("sub/esc", 403, "outside_root"),
    ("sub/esc_abs_dotdot", 403, "outside_root"),
    # symlinks inside the root pointing inside: allowed
    ("in_file", OK, b"A" * 10),
    ("in_abs", OK, b"A" * 10),
    ("in_dir/c.txt", OK, b"CCC"),
    ("in_dir_abs/c.txt", OK, b"CCC"),
    ("in_dir/deeper/d.txt", OK, b"D"),
    ("rootlink/a.txt", OK, b"A" * 10),
    ("rootlink/in_dir/c.txt", OK, b"CCC"),
    ("dot/a.txt", OK, b"A" * 10),
    ("sub/up", OK, b"A" * 10),
    ("sub/up_dir/a.txt", OK, b"A" * 10),
    ("sub/deeper/up2", OK, b"A" * 10),
    ("in_dir/up", OK, b"A" * 10),
    ("chain1", OK, b"A" * 10),
    # loops
    ("loop1", 403, "symlink_loop"),
    ("loop1/x", 403, "symlink_loop"),
    ("self", 403, "symlink_loop"),
    # missing
    ("nope.txt", 404, "not_found"),
    ("dangling", 404, "not_found"),
    ("a.txt/x", 404, "not_found"),
    ("a.txt/", 404, "not_found"),  # a trailing slash names a directory: no file is there
    ("a.txt/.", 404, "not_found"),
    ("sub/c.json/", 404, "not_found"),
    ("sub/nope/x", 404, "not_found"),
    ("x" * 300, 404, "not_found"),
    ("a/" * 2000 + "b", 404, "not_found"),
    # hidden
    (".hidden", 403, "hidden"),
    ("sub/.secret", 403, "hidden"),
    (".hidden/../a.txt", OK, b"A" * 10),  # normalized away before the check
    # hidden through symlinks: a dot-name met anywhere on the way, in a link's target too
    *[(requested, 403, "hidden") for requested, _ in HIDDEN_VIA_LINKS],
    ("hid_dir", 403, "hidden"),  # not "not a regular file": what it is stays hidden
    ("hid_dir/nope.txt", 403, "hidden"),  # nor whether it exists
]


@pytest.mark.parametrize("requested, expected, detail", CORPUS, ids=[ascii(c[0])[:40] for c in CORPUS])
def test_open_corpus(jail, mode, requested, expected, detail, open_fds):
    store = _cached_store(jail, mode, False)
    root = str(jail)
    with opens_stay_inside(store, root, requested, open_fds):
        try:
            f = store.open(requested)
        except HTTPError as exc:
            assert expected != OK, f"{requested!r} refused: {exc.status} {exc.code} {exc.message}"
            assert (exc.status, exc.code) == (expected, detail)
            assert exc.paths == [requested]
        else:
            try:
                assert expected == OK, f"{requested!r} opened {_fd_path(f.fd)}"
                assert _inside(_fd_path(f.fd), root)
                assert os.pread(f.fd, f.size + 1, 0) == detail
                assert f.size == len(detail)
                assert f.path == requested
            finally:
                f.close()


def test_open_file_fields(root, store):
    f = store.open("sub/./c.json")
    try:
        st_ = os.stat(root / "sub" / "c.json")
        assert isinstance(f, OpenFile)
        assert f.path == "sub/./c.json"
        assert f.name == "sub/c.json"
        assert (f.size, f.mtime_ns, f.inode, f.device) == (st_.st_size, st_.st_mtime_ns, st_.st_ino, st_.st_dev)
        assert f.content_type == "application/json; charset=utf-8"
        assert _fd_path(f.fd) == str(root / "sub" / "c.json")
        assert os.get_inheritable(f.fd) is False  # O_CLOEXEC
    finally:
        f.close()
    f.close()  # a second close is harmless


def test_hidden_files_allowed_when_asked(root, mode):
    store = make_store(root, mode, allow_hidden=True)
    for path, data in ((".hidden", b"hidden\n"), ("sub/.secret", b"secret\n")):
        f = store.open(path)
        try:
            assert os.pread(f.fd, 100, 0) == data
        finally:
            f.close()
    with pytest.raises(HTTPError) as info:  # allow_hidden does not loosen anything else
        store.open("../outside.txt")
    assert info.value.status == 403


@pytest.mark.parametrize("requested, data", HIDDEN_VIA_LINKS, ids=[r for r, _ in HIDDEN_VIA_LINKS])
def test_hidden_via_links_served_when_allowed(jail, mode, requested, data, open_fds):
    store = _cached_store(jail, mode, True)
    with opens_stay_inside(store, str(jail), requested, open_fds):
        f = store.open(requested)
        try:
            assert os.pread(f.fd, f.size + 1, 0) == data
        finally:
            f.close()


@pytest.mark.timeout(10)
def test_fifo_does_not_hang(root, store, open_fds):
    os.mkfifo(root / "pipe")  # no writer: a blocking open would wait forever
    before = open_fds()
    with pytest.raises(HTTPError) as info:
        store.open("pipe")
    assert (info.value.status, info.value.code) == (403, "not_a_file")
    assert open_fds() <= before


def test_device_node_refused(root, store):
    try:
        os.mknod(root / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    with pytest.raises(HTTPError) as info:
        store.open("zero")
    assert (info.value.status, info.value.code) == (403, "not_a_file")


def test_socket_refused(root, store):
    import socket

    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "sock"))
        with pytest.raises(HTTPError) as info:
            store.open("sock")
        assert info.value.status in (403, 404)  # open() on a socket fails with ENXIO
    finally:
        sock.close()


def test_symlink_chain_limit(root, store):
    (root / "l0").symlink_to("a.txt")
    for i in range(1, 41):
        (root / f"l{i}").symlink_to(f"l{i - 1}")
    f = store.open("l39")  # 40 links, the kernel's own limit
    f.close()
    with pytest.raises(HTTPError) as info:
        store.open("l40")  # 41
    assert (info.value.status, info.value.code) == (403, "symlink_loop")


def test_hostile_names_open(root, store):
    for name in ['quo"te.txt', "cr\rlf\n.txt", "semi;colon=x.txt", "tab\t.txt", "名前 😀.txt", "a'b.txt"]:
        (root / name).write_bytes(name.encode())
        f = store.open(name)
        try:
            assert os.pread(f.fd, 100, 0) == name.encode()
            assert f.name == name
        finally:
            f.close()


def test_root_is_resolved(tmp_path, root, mode):
    link = tmp_path / "link_to_root"
    link.symlink_to(root)
    store = make_store(link, mode)
    assert store.root == str(root)
    f = store.open("a.txt")
    f.close()


def test_root_must_be_a_directory(tmp_path):
    with pytest.raises(ValueError):
        FileStore(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ValueError):
        FileStore(tmp_path / "file")


@pytest.mark.parametrize(
    "err, status, code",
    [
        (errno.EACCES, 403, "permission_denied"),
        (errno.EPERM, 403, "permission_denied"),
        (errno.EMFILE, 503, "unavailable"),
        (errno.ENFILE, 503, "unavailable"),
        (errno.ENOENT, 404, "not_found"),
        (errno.EIO, 404, "not_found"),
    ],
)
def test_open_errors_map_to_statuses(root, monkeypatch, err, status, code, open_fds):
    store = make_store(root, "walk")
    real_open = os.open

    def failing_open(path, flags, mode=0o777, *, dir_fd=None):
        if path == "a.txt":
            raise OSError(err, os.strerror(err))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    before = open_fds()
    monkeypatch.setattr(os, "open", failing_open)
    with pytest.raises(HTTPError) as info:
        store.open("a.txt")
    monkeypatch.undo()
    assert (info.value.status, info.value.code) == (status, code)
    assert open_fds() <= before


_OPEN_LOCKED = """
import sys
from axon.errors import HTTPError
from axon.storage.local import FileStore
try:
    FileStore(sys.argv[1]).open("locked.txt")
    print("opened")
except HTTPError as exc:
    print(exc.status, exc.code)
"""


@pytest.mark.parametrize("walk", ["", "1"], ids=["openat2", "walk"])
def test_unreadable_file_is_403(root, walk):
    (root / "locked.txt").write_bytes(b"x")
    os.chmod(root / "locked.txt", 0)
    command = [sys.executable, "-c", _OPEN_LOCKED, str(root)]
    if os.geteuid() == 0:  # root reads any file: ask as root without the capabilities that allow it
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    env = {**os.environ, "AXON_NO_OPENAT2": walk}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["403", "permission_denied"], done.stderr


@pytest.mark.parametrize(
    "name, expected",
    [
        ("a.txt", "text/plain; charset=utf-8"),
        ("A.TXT", "text/plain; charset=utf-8"),
        ("x.html", "text/html; charset=utf-8"),
        ("x.json", "application/json; charset=utf-8"),
        ("x.png", "image/png"),
        ("x.bin", "application/octet-stream"),
        ("x.tar.gz", "application/octet-stream"),  # served as the bytes it is
        ("x.unknownext", "application/octet-stream"),
        ("noext", "application/octet-stream"),
        ("dir.d/noext", "application/octet-stream"),
        ("x.", "application/octet-stream"),
    ],
)
def test_content_type(store, name, expected):
    assert store.content_type(name) == expected
    assert store.content_type(name) == expected  # cached


# -- surrogates: a JSON body can carry any code point -----------------------------------------


@pytest.mark.parametrize("requested", ["\ud800", "sub/\udfff.txt"])
def test_unencodable_path_is_a_client_error(store, requested):
    with pytest.raises(HTTPError) as info:
        store.open(requested)
    assert info.value.status in (400, 404)


# -- properties --------------------------------------------------------------------------------

_TOKENS = [
    "a.txt", "sub", "c.txt", "deeper", "d.txt", "up", "up_dir", "up2", "esc", "esc_abs_dotdot",
    "out_abs", "out_rel", "outdir_abs", "outdir_rel", "out_back", "secret.txt", "dir", "x.txt", "back",
    "prefix", "prefixdir", "etc", "passwd", "zero", "in_file", "in_abs", "in_dir", "in_dir_abs",
    "rootlink", "dotdot", "dot", "chain1", "loop1", "self", "dangling", "to_hidden", ".hidden",
    ".secret", "%2e%2e", "fifo", "outside", "root", "rootx",
    "..", "..", ".", "/", "/", "/", "//", "\\", "%", "%2e", "%2f", "%00", "\x00", "C:", "a", "b", "é",
]
_PATHS = st.lists(
    st.one_of(st.sampled_from(_TOKENS), st.text(alphabet="./\\%\x00abAB", min_size=1, max_size=3)),
    max_size=10,
).map("".join)


@SETTINGS
@given(requested=_PATHS, allow_hidden=st.booleans(), mode=st.sampled_from(MODES))
@example(requested="in_dir/up", allow_hidden=False, mode="walk")
@example(requested="outdir_rel/back", allow_hidden=True, mode="walk")
@example(requested="sub/up_dir/sub/esc", allow_hidden=False, mode="walk")
@example(requested="sub/up_dir/sub/esc", allow_hidden=False, mode="openat2")
@example(requested="to_hidden", allow_hidden=False, mode="openat2")
@example(requested="to_hidden", allow_hidden=False, mode="walk")
def test_open_property(jail, open_fds, requested, allow_hidden, mode):
    """Any string: a 400/403/404, or a regular file inside the root; nothing outside is opened."""
    store = _cached_store(jail, mode, allow_hidden)
    root = str(jail)
    with opens_stay_inside(store, root, requested, open_fds):
        try:
            f = store.open(requested)
        except HTTPError as exc:
            assert exc.status in (400, 403, 404), (exc.status, exc.code)
        else:
            try:
                real = _fd_path(f.fd)
                assert _inside(real, root), real
                assert stat.S_ISREG(os.fstat(f.fd).st_mode)
                assert f.size == os.fstat(f.fd).st_size
                if not allow_hidden:  # what was opened, not what was asked for
                    assert not any(p.startswith(".") for p in os.path.relpath(real, root).split("/")), real
            finally:
                f.close()


# Random trees: files, directories and symlinks with visible and dot-names, next to files with the
# same names outside the root. A link's target is relative, or absolute (a leading "/" stands for
# the root's real path), made of the same names and "..", so links name links (chains, loops) and
# climb through directories, hidden or not, and out of the root.
_NAMES = ["a", "b", ".h", ".g"]


@st.composite
def _trees(draw) -> dict[str, tuple[str, str | None]]:
    """``{path: (kind, link target or None)}``, parents before children."""
    tree: dict[str, tuple[str, str | None]] = {}
    dirs = [""]
    for _ in range(draw(st.integers(1, 12))):
        parent = draw(st.sampled_from(dirs))
        path = parent + draw(st.sampled_from(_NAMES))
        if path in tree:
            continue
        kind = draw(st.sampled_from(["file", "dir", "link", "link"]))
        target = None
        if kind == "dir":
            dirs.append(path + "/")
        elif kind == "link":
            parts = draw(st.lists(st.sampled_from([*_NAMES, "..", "."]), max_size=3))
            parts.append(draw(st.sampled_from([*_NAMES, "..", "."])))
            # A trailing "/" or "/." names a directory: "file/." is ENOTDIR to the kernel, and
            # the walk must agree.
            target = "/" * draw(st.booleans()) + "/".join(parts) + "/" * draw(st.booleans())
        tree[path] = (kind, target)
    return tree


_REQUESTS = st.lists(st.sampled_from([*_NAMES, "a", "b", ".."]), min_size=1, max_size=4).map("/".join)


def _build(base: Path, tree: dict[str, tuple[str, str | None]]) -> Path:
    root = base / "root"
    root.mkdir()
    for name in _NAMES:  # what a link climbing out of the root would find
        (base / name).write_bytes(b"outside " + name.encode())
    for path, (kind, target) in tree.items():
        if kind == "file":
            (root / path).write_bytes(path.encode())
        elif kind == "dir":
            (root / path).mkdir()
        else:
            os.symlink(f"{root}{target}" if target.startswith("/") else target, root / path)
    return root


def _regular_files(root: Path) -> dict[tuple[int, int], str]:
    """(st_dev, st_ino) -> path relative to the root, of every regular file in the real tree."""
    found = {}
    for where, _, names in os.walk(root):  # never follows a link
        for name in names:
            st_ = os.lstat(os.path.join(where, name))
            if stat.S_ISREG(st_.st_mode):
                found[(st_.st_dev, st_.st_ino)] = os.path.relpath(os.path.join(where, name), root)
    return found


@contextlib.contextmanager
def links_read():
    """Record the target of every symlink the portable walk reads (relative to a directory)."""
    real_readlink, targets = os.readlink, []

    def recording_readlink(path, *, dir_fd=None):
        target = real_readlink(path, dir_fd=dir_fd)
        if dir_fd is not None:  # not record_opens asking /proc what a descriptor is
            targets.append(target)
        return target

    os.readlink = recording_readlink
    try:
        yield targets
    finally:
        os.readlink = real_readlink


def _names_hidden(target: str, root: Path) -> bool:
    """Whether a link's target names a dot-component, as the walk takes it: an absolute one
    relative to the root, unless it points outside (refused as that first)."""
    if target.startswith("/"):
        target = os.path.relpath(target, root)
        if target == ".." or target.startswith("../"):
            return False
    return any(p.startswith(".") and p not in (".", "..") for p in target.split("/"))


def _outcome(store: FileStore, requested: str, root: Path, open_fds):
    """``("ok", (st_dev, st_ino))`` of what ``store.open`` opened, or ``("refused", code)``."""
    with opens_stay_inside(store, str(root), requested, open_fds):
        try:
            f = store.open(requested)
        except HTTPError as exc:
            assert exc.status in (400, 403, 404), (exc.status, exc.code)
            return "refused", exc.code
        try:
            st_ = os.fstat(f.fd)
            return "ok", (st_.st_dev, st_.st_ino)
        finally:
            f.close()


@pytest.mark.slow  # hypothesis: many trees of links
@SETTINGS
@given(tree=_trees(), requests=st.lists(_REQUESTS, min_size=1, max_size=8))
@example(tree={".h": ("file", None), "a": ("link", ".h")}, requests=["a"])
@example(tree={".h": ("dir", None), ".h/a": ("file", None), "a": ("link", ".h")}, requests=["a/a"])
@example(tree={".h": ("file", None), "a": ("link", "/.h")}, requests=["a"])
@example(tree={".h": ("file", None), "a": ("link", "b"), "b": ("link", ".h")}, requests=["a"])
@example(tree={".h": ("dir", None), "b": ("file", None), "a": ("link", ".h/../b")}, requests=["a"])
@example(tree={"b": ("file", None), "a": ("link", "b/.")}, requests=["a"])
@example(tree={"b": ("file", None), "a": ("link", "/b/")}, requests=["a"])
def test_what_is_opened_is_never_hidden(tree, requests, open_fds):
    """Whatever the links, a file served without allow_hidden has no dot-name on its real path;
    it is refused as hidden exactly when the request or a link met on the way names a dot-name,
    and otherwise fares exactly as with allow_hidden. Both modes agree."""
    with tempfile.TemporaryDirectory() as tmp:
        root = _build(Path(os.path.realpath(tmp)), tree)
        files_in_tree = _regular_files(root)
        stores = {(mode, hidden): make_store(root, mode, allow_hidden=hidden)
                  for mode in MODES for hidden in (False, True)}
        for requested in requests:
            got = {}
            for (mode, hidden), store in stores.items():
                with links_read() as targets:
                    got[mode, hidden] = _outcome(store, requested, root, open_fds)
                if (mode, hidden) == ("walk", True):
                    met = targets  # every link on the way, the walk stopping at no dot-name
            for (mode, hidden), (kind, what) in got.items():
                if kind == "ok":  # what was actually opened: a file of the tree, found by identity
                    assert what in files_in_tree, f"{requested!r} opened a file outside the root"
                    real = files_in_tree[what]
                    assert hidden or not any(p.startswith(".") for p in real.split("/")), (requested, real, mode)
            for hidden in (False, True):
                assert got["openat2", hidden] == got["walk", hidden], (requested, hidden, got)
            try:
                asked = normalize(requested)
            except HTTPError:
                asked = []
            if any(p.startswith(".") for p in asked) or any(_names_hidden(t, root) for t in met):
                assert got["walk", False] == ("refused", "hidden"), (requested, met, got)
            else:
                assert got["walk", False] == got["walk", True], (requested, met, got)


_OUT_OF_DESCRIPTORS = """
import resource, sys
from axon.errors import HTTPError
from axon.storage.local import FileStore
store = FileStore(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
held = []
try:
    while True:
        held.append(open("/dev/null"))
except OSError:
    pass
try:
    store.open("a.txt")
    print("opened")
except HTTPError as exc:
    print(exc.status, exc.code)
"""


@pytest.mark.parametrize("walk", ["", "1"], ids=["openat2", "walk"])
def test_out_of_descriptors_is_503(root, walk):
    command = ["prlimit", "--nofile=64:64", sys.executable, "-c", _OUT_OF_DESCRIPTORS, str(root)]
    env = {**os.environ, "AXON_NO_OPENAT2": walk}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.split() == ["503", "unavailable"], done.stderr


def test_records_storage_builds_are_built_in_their_fields_order(root, store):
    """A trusted file's kept signature and a file's segments are built as tuples, by position
    (hot paths): each value lands in the field of its name."""
    from axon.http.batch_identity import KeptSignature, Signature
    from axon.http.segments import FileSlice
    from axon.storage.local import TrustedFile

    trusted = TrustedFile("asked/a.txt", (11, 12, 13, 14, 15, 16), b"x" * 13, "a.txt", "text/plain")
    assert (trusted.crc, trusted.version) == (16, (11, 12, 13, 14, 15, 16))  # the token ends with the bytes' CRC-32
    kept = trusted.signature
    assert type(kept) is KeptSignature and kept._asdict() == Signature(
        path="asked/a.txt", content_type="text/plain", device=11, inode=12, size=13, mtime_ns=14, ctime_ns=15,
        name="a.txt", span=None,
    )._asdict()
    f = store.open("a.txt")
    try:
        assert f.segment(2, 7)._asdict() == FileSlice(fd=f.fd, offset=2, count=5)._asdict()
    finally:
        f.close()
