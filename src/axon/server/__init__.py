"""Axon's own HTTP/1.1 server: ``axon serve``.

``protocol`` is one connection: it parses (httptools, with ``simplehead``'s optional compiled
reader of simple heads in front, which also sends the answers the worker's tables already hold
for a trusted file or a fixed answer), keeps the clocks and answers in order;
``exchange`` is one request on it; ``writer`` writes responses (``writev`` of coalesced parts,
``os.sendfile`` for large slices, bounded copies under TLS); ``served`` declares what the server
uses of an App; ``worker`` runs one event loop (uvloop when installed, see ``loops``);
``supervisor`` pre-forks workers on one listening socket and restarts the ones that die; ``cli``
is the command line.

Nothing here is imported by the library core, and importing this package imports neither
httptools nor uvloop: ``axon serve`` needs httptools; uvloop is used when present.
"""

from .config import ServerConfig

__all__ = ["ServerConfig", "serve"]


def serve(app, config: ServerConfig | None = None) -> int:
    """Serve ``app`` (an :class:`axon.App`) as ``axon serve`` would, until SIGTERM or SIGINT."""
    from .supervisor import serve as _serve

    return _serve(app, config or ServerConfig())
