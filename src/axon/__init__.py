"""Axon: serve files in batches over HTTP.

One request names many files; one ``multipart/mixed`` response carries them all, streamed at
constant memory. The same :class:`App` runs under WSGI, ASGI and Axon's own server.
"""

from .version import __version__
from .app import App, Request, Response
from .errors import HTTPError
from .storage.local import FileStore, OpenFile
from .limits import Limits
from .http.segments import FileSlice

__all__ = ["__version__", "App", "FileSlice", "FileStore", "HTTPError", "Limits", "OpenFile", "Request", "Response"]
