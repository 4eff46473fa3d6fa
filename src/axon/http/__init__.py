"""HTTP without IO: segments and slicing, ranges, conditional requests, multipart framing and
parsing, and a batch's identity from plain file facts.

Nothing here opens a file, touches a socket or reads the environment: it is fed facts and bytes
and returns values, so it is tested byte by byte. It imports nothing from Axon but ``errors``
and ``limits``; the import contract in ``pyproject.toml`` checks both.
"""
