"""Axon's own HTTP/1.1 server: ``axon serve``.

``protocol`` parses (httptools) and answers in order; ``send`` writes responses (``writev`` of
coalesced parts, ``os.sendfile`` for large slices, bounded copies under TLS); ``worker`` runs one
event loop (uvloop when installed, see ``loops``); ``supervisor`` pre-forks workers on one
listening socket and restarts the ones that die; ``cli`` is the command line.

Nothing here is imported by the library core, and importing this package imports neither
httptools nor uvloop: ``axon serve`` needs httptools; uvloop is used when present.
"""

from .config import ServerConfig

__all__ = ["ServerConfig", "serve"]


def serve(app, config: ServerConfig | None = None) -> int:
    """Serve ``app`` (an :class:`axon.App`) as ``axon serve`` would, until SIGTERM or SIGINT."""
    from .supervisor import serve as _serve

    return _serve(app, config or ServerConfig())
