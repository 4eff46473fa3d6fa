"""The one place that picks the event loop and the parser (as uvicorn's ``loops/auto.py`` does).

``uvloop`` (libuv) when it is installed, else the standard library's loop; ``AXON_LOOP=asyncio``
forces the latter (for comparing, or to rule uvloop out when hunting a bug). ``httptools``
(llhttp, the parser of Node.js) is required: there is no pure-Python parser to fall back to.
"""

from __future__ import annotations

import asyncio

from ..config import environment


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: the loop :func:`new_event_loop` builds."""
    if environment().loop == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def new_event_loop() -> asyncio.AbstractEventLoop:
    if loop_name() == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def require_httptools() -> None:
    try:
        import httptools  # noqa: F401
    except ImportError:
        raise SystemExit(
            "axon serve needs httptools: pip install 'axon-stream[server]' (uvloop is optional)"
        ) from None
