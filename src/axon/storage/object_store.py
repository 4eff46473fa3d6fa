"""The store behind an :class:`~.objects.ObjectSource`: reached by its URL and settings, asked at
start whether it takes them, and its refusals read as what they mean to a client.

A store that refuses the server's credentials, or has no such bucket, is a setting to fix, not
an outage: a source that builds its own store asks the store at once (:func:`check`,
in a process of its own, since obstore's runtime would not survive the fork) and raises
:class:`StoreMisconfigured` saying which; ``axon serve`` then exits with that message. Should the
store refuse later (keys rotated), a request gets a 502 naming the refusal, or a 403 when the
store denies access to that key, never the 503 of a store that did not answer.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from datetime import timedelta
from typing import Any

from obstore.store import from_url

from ..config import ObjectStoreEnvironment
from ..errors import Forbidden, HTTPError, ServiceUnavailable

log = logging.getLogger("axon.storage")


class StoreMisconfigured(ValueError):
    """The store answered, and refuses this server's credentials or has no such bucket: a
    setting to fix, not an outage (a ``ValueError``: ``axon serve`` exits with its message)."""


class NoCredentials(StoreMisconfigured):
    """Nothing in the environment says how to sign requests to an S3 store: a usage error
    (``axon serve`` exits 2), decided before any request, so that the cloud's instance metadata
    address is never asked unless the user said to ask it."""


def require_credentials(root: str, scheme: str, env: ObjectStoreEnvironment) -> None:
    """:class:`NoCredentials` unless ``env`` names how to authenticate to the S3 store at
    ``root``: keys, a web identity, the container's credentials, unsigned requests, or the
    instance's role, asked for by name. Left alone, object_store would fall back on the
    instance metadata service (169.254.169.254): on a machine outside a cloud, a wait and a
    warning; inside one, a role nobody chose. Stores of other schemes take theirs as they are."""
    if scheme not in ("s3", "s3a"):
        return
    if (env.access_key_id and env.secret_access_key) or env.skip_signature or env.web_identity \
            or env.container_credentials or env.instance_credentials:
        return
    half = "AWS_ACCESS_KEY_ID" if env.access_key_id else "AWS_SECRET_ACCESS_KEY" if env.secret_access_key else None
    said = f"{half} is set but not its pair" if half else "no credentials are set"
    raise NoCredentials(
        f"{root}: {said}. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for "
        "temporary keys), or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN; AWS_SKIP_SIGNATURE=true reads a "
        "public bucket unsigned; AXON_INSTANCE_CREDENTIALS=1 takes the cloud instance's role from its "
        "metadata service")


def connect(root: str, scheme: str, env: ObjectStoreEnvironment, timeout: float) -> Any:
    """obstore's store for the URL ``root``, whose scheme is ``scheme``."""
    config, client, retry = _settings(scheme, env, timeout)
    return from_url(root, config=config or None, client_options=client, retry_config=retry)


def _settings(
    scheme: str, env: ObjectStoreEnvironment, timeout: float,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """obstore's config, client options and retry config for a store at ``scheme``://."""
    config: dict[str, Any] = {}
    client: dict[str, Any] = {"timeout": f"{timeout}s", "connect_timeout": f"{min(timeout, 5.0)}s"}
    if scheme in ("s3", "s3a"):
        for name in ("endpoint", "access_key_id", "secret_access_key", "session_token", "region"):
            value = getattr(env, name)
            if value is not None:
                config[name] = value
        if env.skip_signature:
            config["skip_signature"] = True
        if env.allow_http or (env.endpoint or "").startswith("http://"):
            client["allow_http"] = True
    # A few quick retries, all within the timeout: a store that stopped answering is an
    # error within ``timeout`` seconds, not after object_store's default of three minutes.
    retry = {"max_retries": 2, "retry_timeout": timedelta(seconds=timeout)}
    return config, client, retry


def check(root: str, scheme: str, env: ObjectStoreEnvironment, timeout: float) -> None:
    """Ask the store for a key that is not there (a GET: its error names its cause):
    :class:`StoreMisconfigured` if the store refuses the credentials or has no such bucket.
    Asked in a child process: obstore's runtime, once started here, would hang in the
    workers ``axon serve`` forks. A store that does not answer is an outage, not a setting:
    a warning, and its requests are 503s until it answers."""
    config, client, retry = _settings(scheme, env, timeout)
    probe = {"url": root, "config": config, "client": client, "timeout": timeout,
             "key": ".axon-probe-" + os.urandom(8).hex()}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], input=json.dumps(probe), capture_output=True, text=True,
            timeout=timeout + 10,  # the credentials go on stdin: argv shows in ps
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
        log.warning("could not ask the object store for %s at start (%s)", root, exc)
        return
    if answer.get("ok"):
        return  # a key of that name exists: the store reads
    refusal = _refusal(answer["kind"], answer["text"], root)
    if refusal is None and answer["kind"] in ("NotFoundError", "FileNotFoundError"):
        return  # the key is not there, and the store said so: all is well
    where = f"{root}" + (f" at {env.endpoint}" if env.endpoint else "")
    if refusal is not None and refusal.status == 502:
        raise StoreMisconfigured(f"the object store for {where} {refusal.message.removeprefix('the object store ')}")
    if refusal is not None:  # AccessDenied: may read objects but not list (a missing key is then a 403)
        log.warning("the object store for %s denies access to a key that is not there: the credentials may "
                    "read but not list, or may not read; a refused key is a 403", where)
        return
    log.warning("the object store for %s did not answer at start (%s): requests get a 503 until it does",
                where, _first_line(answer["text"]))


def unavailable(exc: Exception, path: str) -> HTTPError:
    # The store's own words (its address, the bucket) are for the log, not for the client.
    log.warning("object store request failed for %r: %s", path, _first_line(str(exc)) or type(exc).__name__)
    return silent(path)


def silent(path: str) -> HTTPError:
    """The 503 of a store that did not answer for ``path``."""
    return ServiceUnavailable("the object store did not answer", code="store_unavailable", paths=[path],
                              headers=[("Retry-After", "1")])


def _first_line(text: str) -> str:
    """obstore's message without the Rust debug dump it appends (some 25 lines)."""
    return text.strip().split("\n", 1)[0][:500]


#: S3's error codes that say the credentials themselves are wrong (not that a key is denied).
_CREDENTIAL_CODES = frozenset({
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
    "InvalidClientTokenId", "AuthorizationHeaderMalformed", "AccountProblem",
})  # fmt: skip
_DENIED = ("PermissionDeniedError", "UnauthenticatedError")


def _s3_code(text: str) -> str | None:
    found = re.search(r"<Code>([A-Za-z0-9.]{1,64})</Code>", text)
    return found.group(1) if found else None


def _refusal(kind: str, text: str, root: str) -> HTTPError | None:
    """What a store's answer that is no outage means for the client, from the exception's
    class name and text (S3's error code is in it): None for anything else. Credentials it
    refuses and a missing bucket are the server's fault (502, naming which); a key the store
    denies (AccessDenied) is a 403."""
    code = _s3_code(text)
    if code == "NoSuchBucket":
        bucket = root.partition("://")[2].split("/", 1)[0]
        return HTTPError(f"the object store has no bucket {bucket!r}", status=502, code="store_no_bucket")
    if code in _CREDENTIAL_CODES or kind == "UnauthenticatedError":
        return HTTPError(f"the object store refuses the server's credentials ({code or 'unauthenticated'})",
                         status=502, code="store_credentials_refused")
    if kind in _DENIED or code == "AccessDenied":
        return Forbidden("the object store denies access to this key", code="store_access_denied")
    return None


def refused(exc: Exception, root: str, path: str) -> HTTPError | None:
    refusal = _refusal(type(exc).__name__, str(exc), root)
    if refusal is not None:
        refusal.paths = [path]
        log.warning("the object store refused %r: %s", path, _first_line(str(exc)))
    return refusal


#: Run by :func:`check` in a child process: one GET, its outcome as one JSON line.
_PROBE = """
import json, sys
from datetime import timedelta
import obstore
from obstore.store import from_url
p = json.load(sys.stdin)
retry = {"max_retries": 0, "retry_timeout": timedelta(seconds=p["timeout"])}
try:
    store = from_url(p["url"], config=p["config"] or None, client_options=p["client"], retry_config=retry)
    obstore.get(store, p["key"]).bytes()
    print(json.dumps({"ok": True}))
except Exception as exc:
    print(json.dumps({"kind": type(exc).__name__, "text": str(exc)[:4000]}))
"""
