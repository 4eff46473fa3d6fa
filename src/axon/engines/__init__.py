"""The engines data pipelines scale out on, reading through ``axon://`` in batches.

Each module here needs its engine (an optional extra: ``torch``, ``ray``, ``dask``) and the
``fsspec`` extra; nothing in the library core imports them.
"""
