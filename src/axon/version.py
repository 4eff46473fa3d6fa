"""Axon's version, in a module of its own: the App names it (``GET /api/limits``) without
importing the package that imports the App."""

__version__ = "1.0.0.dev0"
