"""The sans-IO core of Axon's batch clients: ``axon fetch`` (:mod:`axon.client`) and ``axon://``
(:mod:`axon.fsspec`).

Plain values in, plain values out, no socket (as h11 keeps HTTP): :mod:`.request` builds a
batch request (method, target, headers, body); :mod:`.refusal` reads a refusal's status and JSON
error; :mod:`.parts` checks each part against what was asked; :mod:`.reader` runs an answer's
bytes through the streaming multipart parser and those checks; :mod:`.resume` decides what the
answer to a resumed batch means. The transports move the bytes: ``http.client`` for the blocking
ones (:mod:`.transport`: ``axon fetch``, the engines' tar shards), aiohttp for the async ones
(:mod:`.aio`, the one module here that needs the ``fsspec`` extra; nothing imports it at import time).

Below :mod:`axon.fsspec` and :mod:`axon.client` in the layers, so both can use it; the standard
library only, apart from :mod:`.aio`.
"""
