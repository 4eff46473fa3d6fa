"""Signed requests (opt-in): HMAC-SHA256 signed URLs with an expiry, and bearer tokens.

With a secret configured (``App(secret=...)``, ``AXON_SECRET``, ``axon serve --secret``), every
request but ``/api/health`` and ``/api/limits`` must carry one of:

* a **signed URL**: ``?...&expires=<unix seconds>&signature=<mac>``. The MAC covers the method
  (HEAD counts as GET), the path as the server decodes it, every query parameter but
  ``signature`` in order (``expires`` included, so it cannot be moved), and the SHA-256 of the
  request body: a ``POST /api/stream-files`` names its files in the body, so a URL that did not
  bind the body would let anyone holding it fetch any list. A signature replayed on another
  path, query, method or body does not verify.
* a **bearer token**: ``Authorization: Bearer axon1.<expires>.<mac>``, minted from the same
  secret (``axon sign --token``). It grants every endpoint until it expires; tokens are
  stateless, so rotating the secret is how to revoke them (and every signed URL) early.

The MACs are ``<urlsafe base64, no padding>`` of HMAC-SHA256 under keys derived from the secret,
one per use, so that no value of one kind (nor a batch ETag, which is keyed from the secret too)
can ever pass as another. Comparison is constant-time (``hmac.compare_digest``). A request with
no credentials is a 401 with ``WWW-Authenticate: Bearer``; a forged, expired or replayed one is
a 403. Checking happens before routing, so a refused request opens no file and does not learn
which endpoints exist. ``expires`` and ``signature`` are reserved query names while signing is
on: they never reach a handler (the batch endpoint would take them for file names).

Only the standard library; no I/O. The client imports it to sign its own requests.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Protocol
from urllib.parse import parse_qsl, quote, unquote

from .errors import Forbidden, Unauthorized

__all__ = ["RESERVED", "Verifier", "mint_token", "sign_url", "verify"]

RESERVED = ("expires", "signature")
_TOKEN_PREFIX = "axon1"
_MAC_BYTES = 32
# One key per use, derived from the secret (batch identities have their own: batch_identity).
_URL_PURPOSE = b"axon/signed-url/v1"
_TOKEN_PURPOSE = b"axon/bearer-token/v1"
_BODILESS_SHA256 = hashlib.sha256(b"").hexdigest()


class SignedRequest(Protocol):
    """What verification reads of a request (``axon.app.Request`` has all of it)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def query(self) -> list[tuple[str, str]]: ...


def _secret_bytes(secret: str | bytes) -> bytes:
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if not raw:
        raise ValueError("an empty secret signs nothing")
    return raw


def _subkey(secret: str | bytes, purpose: bytes) -> bytes:
    return hmac.new(_secret_bytes(secret), purpose, hashlib.sha256).digest()


def _url_message(method: str, path: str, pairs: list[tuple[str, str]], body: bytes) -> bytes:
    method = "GET" if method.upper() == "HEAD" else method.upper()
    # Pairs re-encoded one fixed way: "+" or "%20", "/" or "%2F", the server decodes the same.
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)
    body_hash = hashlib.sha256(body).hexdigest() if body else _BODILESS_SHA256
    return "\n".join(("axon-url-v1", method, path, query, body_hash)).encode("utf-8", "surrogateescape")


def _mac(key: bytes, message: bytes) -> str:
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == _MAC_BYTES else None


def sign_url(
    path_and_query: str,
    secret: str | bytes,
    expires_at: int,
    *,
    method: str = "GET",
    body: bytes = b"",
) -> str:
    """``path_and_query`` (percent-encoded, as sent on the wire) with ``expires`` and
    ``signature`` appended. A full URL works too: only its path and query are signed."""
    prefix, target = "", path_and_query
    scheme_end = target.find("://")
    if scheme_end >= 0:
        slash = target.find("/", scheme_end + 3)
        prefix, target = (target, "/") if slash < 0 else (target[:slash], target[slash:])
    path, _, query = target.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True, errors="strict")
    if any(k in RESERVED for k, _ in pairs):
        raise ValueError(f"the query already holds a reserved parameter ({', '.join(RESERVED)})")
    expires = str(int(expires_at))
    signed = [*pairs, ("expires", expires)]
    message = _url_message(method, unquote(path, errors="strict"), signed, body)
    signature = _mac(_subkey(secret, _URL_PURPOSE), message)
    return f"{prefix}{target}{'&' if query else '?'}expires={expires}&signature={signature}"


def mint_token(secret: str | bytes, expires_at: int) -> str:
    """A bearer token valid for every endpoint until ``expires_at`` (unix seconds)."""
    expires = str(int(expires_at))
    return f"{_TOKEN_PREFIX}.{expires}.{_mac(_subkey(secret, _TOKEN_PURPOSE), _token_message(expires))}"


def _token_message(expires: str) -> bytes:
    return f"axon-token-v1\n{expires}".encode("ascii")


class Verifier:
    """Checks requests against one secret (its derived keys computed once)."""

    def __init__(self, secret: str | bytes) -> None:
        self._url_key = _subkey(secret, _URL_PURPOSE)
        self._token_key = _subkey(secret, _TOKEN_PURPOSE)

    def verify(self, request: SignedRequest, now: float) -> list[tuple[str, str]]:
        """The request's query without the reserved parameters, or ``Unauthorized`` (no
        credentials) / ``Forbidden`` (bad ones)."""
        pairs = request.query
        remaining = [(k, v) for k, v in pairs if k not in RESERVED]
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, token = authorization.strip().partition(" ")
            if scheme.lower() == "bearer":
                self._check_token(token.strip(), now)
                return remaining
        signatures = [v for k, v in pairs if k == "signature"]
        expiries = [v for k, v in pairs if k == "expires"]
        if not signatures and not expiries:
            raise Unauthorized(
                "this server needs a signed URL (expires=...&signature=...) or a bearer token",
                code="unauthorized",
                headers=[("WWW-Authenticate", 'Bearer realm="axon"')],
            )
        if len(signatures) != 1 or len(expiries) != 1:
            raise Forbidden("a signed URL carries exactly one expires and one signature", code="bad_signature")
        given = _unb64(signatures[0])
        signed = [(k, v) for k, v in pairs if k != "signature"]
        message = _url_message(request.method, request.path, signed, request.body)
        expected = hmac.new(self._url_key, message, hashlib.sha256).digest()
        # Compared even when the given value is malformed, so timing tells nothing either way.
        if not hmac.compare_digest(expected, given or bytes(_MAC_BYTES)) or given is None:
            raise Forbidden("the URL signature does not match this request", code="bad_signature")
        _check_expiry(expiries[0], now, "signature")
        return remaining

    def _check_token(self, token: str, now: float) -> None:
        prefix, _, rest = token.partition(".")
        expires, _, mac = rest.partition(".")
        given = _unb64(mac)
        message = _token_message(expires if expires.isascii() else "")
        expected = hmac.new(self._token_key, message, hashlib.sha256).digest()
        if not hmac.compare_digest(expected, given or bytes(_MAC_BYTES)) or given is None or prefix != _TOKEN_PREFIX:
            raise Forbidden("the bearer token is not valid", code="bad_token")
        _check_expiry(expires, now, "token")


def _check_expiry(expires: str, now: float, what: str) -> None:
    if not (expires.isascii() and expires.isdigit()):
        raise Forbidden(f"the {what}'s expiry is malformed", code=f"bad_{what}")
    if int(expires) < now:
        raise Forbidden(f"the {what} expired", code=f"{what}_expired")


def verify(request: SignedRequest, secret: str | bytes, now: float) -> list[tuple[str, str]]:
    """One-off :meth:`Verifier.verify`; an App keeps a :class:`Verifier` instead."""
    return Verifier(secret).verify(request, now)
