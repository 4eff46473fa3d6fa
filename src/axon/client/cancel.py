"""Stopping blocking fetches from another thread, at once: ``Cancel``.

Ctrl-C reaches only the main thread, while ``axon fetch`` downloads in worker threads blocked in
``recv``. Setting a flag alone would stop them only when the server next sends something (or at
the timeout); so ``Cancel.set()`` also shuts down the sockets of the fetches running, which wakes
each read at once. The fetch then raises :class:`Cancelled` from a point where its download's
state is whole, so a resumable batch saves its journal exactly as when the network fails.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from .errors import FetchError

__all__ = ["Cancel", "Cancelled"]


class Cancelled(FetchError):
    """The fetch was stopped by :meth:`Cancel.set` (an interruption), not by the server or network."""


class Cancel:
    """Shared by the fetches to stop together; ``set()`` is safe from any thread, and final."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._sockets: set[socket.socket] = set()

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._lock:
            self._set = True
            running = list(self._sockets)
        for sock in running:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing to wake
                sock.shutdown(socket.SHUT_RDWR)

    def check(self) -> None:
        """Raise :class:`Cancelled` if :meth:`set` was called."""
        if self._set:
            raise Cancelled("interrupted")

    @contextlib.contextmanager
    def watching(self, sock: socket.socket) -> Iterator[None]:
        """While the block runs, :meth:`set` shuts ``sock`` down; raises at once if already set."""
        with self._lock:
            self.check()
            self._sockets.add(sock)
        try:
            yield
        finally:
            with self._lock:
                self._sockets.discard(sock)
