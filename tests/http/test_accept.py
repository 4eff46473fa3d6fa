"""Accept negotiation: q-values, specificity, ties to the first offered, none acceptable."""

from __future__ import annotations

import pytest

from axon.http.accept import negotiate

OFFERED = ("multipart/mixed", "application/zip", "application/x-tar")


@pytest.mark.parametrize(
    "header, chosen",
    [
        (None, "multipart/mixed"),
        ("", "multipart/mixed"),
        ("*/*", "multipart/mixed"),
        ("multipart/mixed, application/json", "multipart/mixed"),  # axon fetch
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "multipart/mixed"),  # a browser
        ("application/zip", "application/zip"),
        ("APPLICATION/ZIP", "application/zip"),
        ("application/x-tar", "application/x-tar"),
        ("application/*", "application/zip"),
        ("application/zip;q=0.4, application/x-tar;q=0.5", "application/x-tar"),
        ("*/*;q=0.1, application/zip", "application/zip"),
        ("multipart/mixed;q=0, */*", "application/zip"),
        ("application/*;q=0, application/x-tar", "application/x-tar"),  # the exact range wins
        ("multipart/mixed; boundary=x", "multipart/mixed"),
        ("application/zip;q=bad", "application/zip"),
        ("text/html", None),
        ("application/json", None),
        ("*/*;q=0", None),
        ("application/zip;q=0", None),
    ],
)
def test_negotiate(header, chosen):
    assert negotiate(header, OFFERED) == chosen
