"""The engines' fixture itself: the access log it reads back counts the requests sent."""

from __future__ import annotations

import fsspec


def test_one_batch_of_small_files_is_one_request(served):
    fs = fsspec.filesystem("axon", skip_instance_cache=True)
    paths = [f"{served.address}/small/{i:04}.bin" for i in range(20)]
    mark = served.mark()
    got = fs.cat(paths)
    for path in paths:
        assert got[path] == (served.root / path.split("/", 1)[1]).read_bytes()
    seen = served.requests_since(mark)
    batches = [r for r in seen if "stream-files" in r["path"]]
    assert len(batches) == 1, seen
