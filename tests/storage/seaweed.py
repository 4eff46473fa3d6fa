"""The SeaweedFS the storage tests (and other suites: the nodes behind nginx) start: see
:mod:`axon.bench.seaweed`, which the object benchmark shares.

    from seaweed import running            # tests/storage on sys.path (its conftest puts it)
    with running(tmp_path) as store: ...   # store.env(), store.url("prefix"), store.put(...)
"""

from axon.bench.seaweed import *  # noqa: F403
from axon.bench.seaweed import Seaweed, free_port, running, start, weed_binary  # noqa: F401
