"""The environment, read in one place.

Every ``AXON_*`` variable Axon honours (and the ``AWS_*`` ones an object store takes) is read
here and nowhere else: the library's modules take parameters, and where a parameter is left out (``App()`` under gunicorn, ``axon.wsgi:application``)
its default comes from :func:`environment`. ``axon serve``'s flags default to the same variables
(:func:`variable`), so a flag and its variable always mean the same thing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def variable(name: str, default: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """``AXON_...`` as set, or ``default`` when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(name)
    return default if value is None or value == "" else value


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``AXON_...`` is set to a true word (1, true, yes, on); unset or a false word (0,
    false, no, off, empty) is False; any other word is a ValueError naming the variable, not a
    silent "off" (``AXON_BROWSE=maybe`` is a typo to report)."""
    word = str((os.environ if environ is None else environ).get(name, "")).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"{name} must be 1, true, yes or on (or 0, false, no, off), not {word!r}")


def must_be(value: float, *, positive: bool = False) -> str | None:
    """None if ``value`` is a finite number, 0 or more (more than 0 if ``positive``; NaN is
    neither); else what it must be, for an error to say. The one test of every such setting,
    whether an environment variable, a flag or an argument gives it."""
    if 0 <= value < float("inf") and not (positive and value == 0):
        return None
    return "more than 0" if positive else "0 or more"


def number(name: str, default: float, environ: Mapping[str, str] | None = None, *, positive: bool = False,
           whole: bool = False) -> float:
    """``AXON_...`` as a number, 0 or more (more than 0 if ``positive``; a whole one if
    ``whole``), or ``default`` when unset or empty; a ValueError naming the variable otherwise."""
    text = variable(name, None, environ)
    if text is None:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        raise ValueError(f"{name} must be a {'whole ' if whole else ''}number, not {text!r}") from None
    must = must_be(value, positive=positive)
    if must is not None:
        raise ValueError(f"{name} must be {must}, not {text!r}")
    return value


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: The objects' disk tier's bound when only its directory is given (``AXON_OBJECT_DISK_SIZE``).
OBJECT_DISK_SIZE = 10 << 30


def parse_size(text: str, name: str = "a size") -> int:
    """Bytes from ``512M``, ``10G``, ``1.5T``, ``4096`` (K, M, G, T are powers of 1024; a
    trailing ``B`` or ``iB`` is allowed); a ValueError naming ``name`` otherwise."""
    word = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = word[-1:] if word[-1:] in _SIZE_UNITS else ""
    try:
        value = float(word[: len(word) - len(unit)])
    except ValueError:
        raise ValueError(f"{name} is a number of bytes with K, M, G or T after it (e.g. 10G), not {text!r}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{name} must be more than 0, not {text!r}")
    return int(value * _SIZE_UNITS[unit])


def _size(name: str, default: int, environ: Mapping[str, str]) -> int:
    text = variable(name, None, environ)
    return default if text is None else parse_size(text, name)


@dataclass(frozen=True)
class Environment:
    """What the environment says, for the library's defaults."""

    #: The directory served (``AXON_ROOT``).
    root: str = "."
    #: Signs requests and keys batch identities (``AXON_SECRET``); None for none.
    secret: str | None = None
    #: Cache-Control of files and batches (``AXON_CACHE_CONTROL``); None when unset, "" for none.
    cache_control: str | None = None
    #: Resolve paths with Linux's openat2 where it works (``AXON_NO_OPENAT2=1`` forces the
    #: portable walk: the tests run both).
    openat2: bool = True
    #: Where ``axon serve``'s workers keep their metrics (``AXON_METRICS_DIR``).
    metrics_dir: str | None = None
    #: The native server's event loop: "auto" (uvloop if installed) or "asyncio" (``AXON_LOOP``).
    loop: str = "auto"
    #: Send file slices with ``sendfile`` where possible (``AXON_NO_SENDFILE=1`` turns it off).
    sendfile: bool = True
    #: List directories under ``/browse/`` (``AXON_BROWSE=1``; ``axon serve --browse``).
    browse: bool = False
    #: Seconds an object store may take to answer one request (``AXON_STORE_TIMEOUT``).
    store_timeout: float = 30.0
    #: MiB each process may keep small objects' bytes in, by key and ETag (``AXON_OBJECT_CACHE``;
    #: ``axon serve --object-cache``); 0 for none.
    object_cache_mib: int = 64
    #: Name a batch's objects by listing them (``AXON_NO_OBJECT_LISTING=1`` opens each key:
    #: for a store whose listings lag its writes).
    object_listing: bool = True
    #: Seconds a listing's entries stand for the store's current versions of objects whose bytes
    #: are kept, so that a batch of them lists nothing (``AXON_OBJECT_LISTING_VALID``;
    #: ``axon serve --object-listing-valid``); 0: every batch lists.
    object_listing_valid: float = 0.0
    #: A directory where objects are kept as files, shared by the workers of a node
    #: (``AXON_OBJECT_DISK_CACHE``; ``axon serve --object-disk-cache``); None for none.
    object_disk_cache: str | None = None
    #: Bytes on disk that directory may take (``AXON_OBJECT_DISK_SIZE``, e.g. ``50G``).
    object_disk_size: int = OBJECT_DISK_SIZE
    #: Keys batch identities without turning signing on (``AXON_IDENTITY_SECRET``): the secret
    #: every node serving the same content shares. None: ``secret``'s, else the host's own key.
    identity_secret: str | None = None
    #: Name files by what every host serving copies of them sees alike (path, size, mtime),
    #: not by inode, device and ctime (``AXON_PORTABLE_IDENTITY=1``; ``--portable-identity``).
    portable_identity: bool = False
    #: Run Axon's own code as Python only: its optional compiled module (the server's reader of
    #: simple request heads, :mod:`axon.server.simplehead`) unused (``AXON_PURE_PYTHON=1``; the
    #: tests run both).
    pure_python: bool = False
    #: Let the compiled module answer a fixed answer or a trusted file's remembered head itself
    #: (:func:`axon.server.simplehead.answerer`); ``AXON_NO_COMPILED_ANSWER=1`` leaves every
    #: answer to Python while the compiled reader still reads heads.
    compiled_answer: bool = True
    #: Time each worker's event loop for ``axon_event_loop_lag_seconds`` (``AXON_NO_LOOP_LAG=1``
    #: turns the timer off: ``scripts/instructions.py`` does, since under callgrind its fires,
    #: paced by the wall clock, would count as the requests' instructions).
    loop_lag: bool = True
    #: Seconds of batch work one turn of an event loop may run (:mod:`axon.pace`;
    #: ``AXON_TURN_BUDGET``): ``scripts/instructions.py`` raises it by what callgrind slows the
    #: clock, so that a request takes the turns it would take outside callgrind.
    turn_budget: float = 0.001


def environment(environ: Mapping[str, str] | None = None) -> Environment:
    """The environment's settings (``os.environ`` unless given)."""
    env = os.environ if environ is None else environ
    return Environment(
        root=variable("AXON_ROOT", ".", env) or ".",
        secret=variable("AXON_SECRET", None, env),
        cache_control=env.get("AXON_CACHE_CONTROL"),
        openat2=not env.get("AXON_NO_OPENAT2"),
        metrics_dir=variable("AXON_METRICS_DIR", None, env),
        loop=(variable("AXON_LOOP", "auto", env) or "auto").lower(),
        sendfile=not flag("AXON_NO_SENDFILE", env),
        browse=flag("AXON_BROWSE", env),
        store_timeout=number("AXON_STORE_TIMEOUT", 30.0, env, positive=True),
        object_cache_mib=int(number("AXON_OBJECT_CACHE", 64, env, whole=True)),
        object_listing=not flag("AXON_NO_OBJECT_LISTING", env),
        object_listing_valid=number("AXON_OBJECT_LISTING_VALID", 0.0, env),
        object_disk_cache=variable("AXON_OBJECT_DISK_CACHE", None, env),
        object_disk_size=_size("AXON_OBJECT_DISK_SIZE", OBJECT_DISK_SIZE, env),
        identity_secret=variable("AXON_IDENTITY_SECRET", None, env),
        portable_identity=flag("AXON_PORTABLE_IDENTITY", env),
        pure_python=flag("AXON_PURE_PYTHON", env),
        compiled_answer=not flag("AXON_NO_COMPILED_ANSWER", env),
        loop_lag=not flag("AXON_NO_LOOP_LAG", env),
        turn_budget=number("AXON_TURN_BUDGET", 0.001, env, positive=True),
    )


@dataclass(frozen=True)
class ObjectStoreEnvironment:
    """What the standard ``AWS_*`` variables say, for an object-store source
    (:mod:`axon.storage.objects`); None where unset (the store's own default then holds)."""

    #: ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``: a self-hosted store (SeaweedFS, MinIO).
    endpoint: str | None = None
    access_key_id: str | None = None  # AWS_ACCESS_KEY_ID
    secret_access_key: str | None = None  # AWS_SECRET_ACCESS_KEY
    session_token: str | None = None  # AWS_SESSION_TOKEN
    #: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``.
    region: str | None = None
    #: Plain ``http://`` endpoints allowed (``AWS_ALLOW_HTTP=true``): a store on loopback.
    allow_http: bool = False
    #: Requests unsigned, no credentials looked for (``AWS_SKIP_SIGNATURE=true``): a public bucket.
    skip_signature: bool = False
    #: A role assumed with a web identity token (``AWS_WEB_IDENTITY_TOKEN_FILE`` and ``AWS_ROLE_ARN``).
    web_identity: bool = False
    #: The container's credentials (``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`` or ``_FULL_URI``: ECS, EKS).
    container_credentials: bool = False
    #: The role of the cloud instance, from its metadata service (``AXON_INSTANCE_CREDENTIALS=1``):
    #: asked only when the user says so, never as a fallback for credentials left unset.
    instance_credentials: bool = False


def object_store_environment(environ: Mapping[str, str] | None = None) -> ObjectStoreEnvironment:
    """The ``AWS_*`` settings (``os.environ`` unless given)."""
    env = os.environ if environ is None else environ
    return ObjectStoreEnvironment(
        endpoint=variable("AWS_ENDPOINT_URL_S3", None, env) or variable("AWS_ENDPOINT_URL", None, env),
        access_key_id=variable("AWS_ACCESS_KEY_ID", None, env),
        secret_access_key=variable("AWS_SECRET_ACCESS_KEY", None, env),
        session_token=variable("AWS_SESSION_TOKEN", None, env),
        region=variable("AWS_REGION", None, env) or variable("AWS_DEFAULT_REGION", None, env),
        allow_http=flag("AWS_ALLOW_HTTP", env),
        skip_signature=flag("AWS_SKIP_SIGNATURE", env),
        web_identity=bool(variable("AWS_WEB_IDENTITY_TOKEN_FILE", None, env) and variable("AWS_ROLE_ARN", None, env)),
        container_credentials=bool(variable("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", None, env)
                                   or variable("AWS_CONTAINER_CREDENTIALS_FULL_URI", None, env)),
        instance_credentials=flag("AXON_INSTANCE_CREDENTIALS", env),
    )
