"""Which source serves a location (storage.sources), and the source a server shares open files
through."""

from __future__ import annotations

import pytest

from axon.storage.local import FileStore
from axon.storage.sources import is_store_url, open_source


@pytest.mark.parametrize("location, url", [
    ("s3://bucket/prefix", True), ("gs://b", True), ("az://c/d", True), ("S3+x.y-z://b", True),
    ("/srv/files", False), ("files", False), ("./s3://x", False), ("1s3://b", False), ("s3:/b", False),
])
def test_a_store_url_is_a_scheme_and_two_slashes(location, url):
    assert is_store_url(location) is url


def test_a_directory_is_a_file_store(tmp_path):
    store = open_source(tmp_path, portable_identity=True)
    assert isinstance(store, FileStore) and store.root == str(tmp_path.resolve()) and store.portable_identity
    assert isinstance(open_source(str(tmp_path)), FileStore)


def test_a_store_url_is_an_object_source():
    pytest.importorskip("obstore")
    from axon.storage.objects import ObjectSource

    with pytest.raises(ValueError, match="names a bucket"):  # opened as a store, not as a directory
        open_source("s3://")
    assert ObjectSource.blocking is False  # it raises WouldBlock on a loop instead
