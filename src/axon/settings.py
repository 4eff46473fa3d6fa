"""What an App is built from: :class:`Settings`, one frozen value.

    app = App(settings=Settings.from_env())                   # what App() does
    app = App(settings=Settings(root="/srv/files", browse=True))

``Settings.from_env()`` reads the environment once (:func:`axon.config.environment`); every
field's default is what that leaves when nothing is set. ``App(...)``'s keyword arguments are
the same fields, and win over the settings given (or the environment's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .config import environment
from .limits import DEFAULT_LIMITS, Limits

__all__ = ["DEFAULT_CACHE_CONTROL", "Settings"]

#: Files and batches may change under the same URL: caches keep them but ask again each time,
#: which a strong ETag makes a cheap 304. Assets that never change under a URL can say
#: "public, max-age=31536000, immutable" instead (``App(cache_control=...)``).
DEFAULT_CACHE_CONTROL = "no-cache"


@dataclass(frozen=True)
class Settings:
    #: The directory served, or a store's URL (``s3://bucket/prefix``; ``AXON_ROOT``).
    root: str | os.PathLike[str] = "."
    limits: Limits = DEFAULT_LIMITS
    #: Serve dot-named files and directories (never by default).
    allow_hidden: bool = False
    #: Axon's own endpoints (health, limits, batches, files, and the listing if ``browse``).
    builtins: bool = True
    #: Threads of the pool where blocking handlers run under the async runtimes.
    threads: int = 32
    #: Turns signed requests on (:mod:`axon.signing`) and keys batch identities (``AXON_SECRET``);
    #: None or "" for none.
    secret: str | bytes | None = None
    #: Sent with every file and batch response, 304s included (RFC 9110 15.4.5;
    #: ``AXON_CACHE_CONTROL``); "" for none.
    cache_control: str = DEFAULT_CACHE_CONTROL
    #: List directories under /browse/ (``AXON_BROWSE``): off, as nginx's autoindex is, since a
    #: listing shows what a URL alone would not.
    browse: bool = False
    #: For nodes that serve copies of the same files behind one balancer: ETags and batches then
    #: agree on every node (``AXON_PORTABLE_IDENTITY``), keyed by ``identity_secret``, else
    #: ``secret``, which every node must share.
    portable_identity: bool = False
    #: Keys batch identities without turning signing on (``AXON_IDENTITY_SECRET``).
    identity_secret: str | bytes | None = None

    def __post_init__(self) -> None:
        if any(c in self.cache_control for c in "\r\n\x00"):
            raise ValueError("cache_control must not contain CR, LF or NUL")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings the environment gives (``os.environ`` unless given), read once."""
        env = environment(environ)
        return cls(
            root=env.root,
            secret=env.secret,
            cache_control=DEFAULT_CACHE_CONTROL if env.cache_control is None else env.cache_control,
            browse=env.browse,
            portable_identity=env.portable_identity,
            identity_secret=env.identity_secret,
        )

    @property
    def key_secret(self) -> str | bytes | None:
        """What batch identities are keyed with: the identity secret, else the signing secret."""
        return self.identity_secret or self.secret or None
