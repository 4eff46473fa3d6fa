"""The WSGI adapter called in-process, for the choices it makes that a server hides: when it
hands a file to ``wsgi.file_wrapper``, and that ``close()`` frees descriptors mid-stream. The
wire contract is tested over real sockets under gunicorn, uWSGI and waitress in tests/e2e."""

from __future__ import annotations

import email.utils
import gc
import io
import os
import time
from wsgiref.util import FileWrapper, setup_testing_defaults

import pytest

from axon import App, Limits
from axon.storage import FILE_CACHE_SIZE
from axon.storage.local import FileStore
from axon.storage.sources import share_open_files
from axon.wsgi import create_app


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.bin").write_bytes(os.urandom(200_000))
    return tmp_path


def environ(path, query="", method="GET", body=b"", **extra):
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "wsgi.input": io.BytesIO(body)}
    if body:
        env["CONTENT_LENGTH"] = str(len(body))
    env.update(extra)
    setup_testing_defaults(env)
    return env


def call(app, env):
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, dict(headers)

    return seen, app(env, start_response)


def open_fds():
    gc.collect()  # a FileStore left by an earlier test closes its root descriptor when collected
    return len(os.listdir("/proc/self/fd"))


def test_whole_single_file_goes_to_file_wrapper(files):
    seen, body = call(create_app(files), environ("/files/a.bin", **{"wsgi.file_wrapper": FileWrapper}))
    assert isinstance(body, FileWrapper)
    assert b"".join(body) == (files / "a.bin").read_bytes()
    body.close()


def test_ranges_and_batches_do_not_use_file_wrapper(files):
    app = create_app(files)
    env = environ("/files/a.bin", HTTP_RANGE="bytes=10-19", **{"wsgi.file_wrapper": FileWrapper})
    seen, body = call(app, env)
    assert seen["status"].startswith("206") and not isinstance(body, FileWrapper)
    assert b"".join(body) == (files / "a.bin").read_bytes()[10:20]
    body.close()


def test_close_mid_stream_releases_descriptors(files):
    app = create_app(files, limits=Limits(chunk_size=4096))
    before = open_fds()
    seen, body = call(app, environ("/api/stream-files", "f=a.bin&g=a.bin"))
    first = next(iter(body))
    assert len(first) == 4096
    body.close()  # what a server does when the client goes away
    assert open_fds() <= before  # another test's thread may close one of its own meanwhile


def test_body_over_limit_is_413_without_reading(files):
    app = create_app(files, limits=Limits(max_body_bytes=16))
    seen, body = call(app, environ("/api/stream-files", method="POST", body=b'{"files": ["a.bin", "a.bin"]}'))
    assert seen["status"].startswith("413")
    assert b"body_too_large" in b"".join(body)


def test_path_that_is_not_utf8_is_400(files):
    seen, body = call(create_app(files), environ("/files/\xff.bin"))
    assert seen["status"].startswith("400")
    assert b"bad_path" in b"".join(body)


def test_file_wrapper_close_raises_when_the_file_shrank(files):
    # Servers sendfile a wrapped file and stop quietly at end of file; closing must tell them
    # the body fell short so they drop the connection instead of keeping it alive.
    from axon.errors import FileChanged

    seen, body = call(create_app(files), environ("/files/a.bin", **{"wsgi.file_wrapper": FileWrapper}))
    os.truncate(files / "a.bin", 1000)
    assert len(b"".join(body)) == 1000
    with pytest.raises(FileChanged):
        body.close()


def test_file_wrapper_close_is_quiet_when_the_file_is_whole(files):
    seen, body = call(create_app(files), environ("/files/a.bin", **{"wsgi.file_wrapper": FileWrapper}))
    before = open_fds()
    b"".join(body)
    body.close()
    assert open_fds() == before - 1  # the wrapped descriptor, and nothing else


def test_negative_content_length_is_400(files):
    env = environ("/api/stream-files", method="POST", body=b'{"files": ["a.bin"]}')
    env["CONTENT_LENGTH"] = "-5"  # read(-5) would read the whole stream, past any limit
    seen, body = call(create_app(files), env)
    assert seen["status"].startswith("400")


def test_a_shared_descriptor_is_never_handed_to_file_wrapper(files):
    # An App whose store shares descriptors (because Axon's own server serves it too, in this
    # process) must not give one away: the server closes what file_wrapper gets.
    shared = share_open_files(FileStore(files), FILE_CACHE_SIZE)
    app = create_app(app=App(files, store=shared))
    try:
        for _ in range(2):
            seen, body = call(app, environ("/files/a.bin", **{"wsgi.file_wrapper": FileWrapper}))
            assert not isinstance(body, FileWrapper)
            assert b"".join(body) == (files / "a.bin").read_bytes()
            body.close()
    finally:
        shared.close()


def test_every_response_has_a_date(files):
    """uWSGI's HTTP socket adds no Date; RFC 9110 6.6.1 wants one beside Last-Modified."""
    for path in ("/files/a.bin", "/files/missing", "/api/health"):
        seen, body = call(create_app(files), environ(path))
        when = email.utils.parsedate_to_datetime(seen["headers"]["Date"]).timestamp()
        assert abs(when - time.time()) < 5
        getattr(body, "close", lambda: None)()
