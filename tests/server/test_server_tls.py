"""TLS through the ``ssl`` module: no sendfile under TLS, bounded chunks instead."""

from __future__ import annotations

import datetime
import os
import ssl
from pathlib import Path

import pytest
from conftest import FILES, Client, batch_target, big_content, parse_multipart

x509 = pytest.importorskip("cryptography.x509")


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[str, str]:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    base: Path = tmp_path_factory.mktemp("tls")
    certfile, keyfile = base / "cert.pem", base / "key.pem"
    certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return str(certfile), str(keyfile)


@pytest.fixture
def client_context(cert) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cert[0])
    ctx.check_hostname = True
    return ctx


def test_tls_serves_files_and_batches_without_sendfile(serve, cert, client_context, root, monkeypatch) -> None:
    calls = []
    real = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *a: calls.append(a) or real(*a))
    server = serve(certfile=cert[0], keyfile=cert[1])
    with Client(server.port, tls=client_context) as c:
        assert c.get("/api/health").status == 200
        assert c.get("/files/big.bin").body == big_content(root)
        paths = ["a.txt", "mid.bin", "small/f03.bin"]
        resp = c.get(batch_target(paths))
        assert [p[1] for p in parse_multipart(resp)] == [FILES[p] for p in paths]
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
        assert c.sock.selected_alpn_protocol() in (None, "http/1.1")
    assert calls == []


def test_plain_http_on_a_tls_port_is_refused(serve, cert) -> None:
    server = serve(certfile=cert[0], keyfile=cert[1])
    with Client(server.port) as c:
        c.send(b"GET /api/health HTTP/1.1\r\n\r\n")
        assert c.is_closed()
    with Client(server.port, tls=ssl.create_default_context(cafile=cert[0])) as c:
        assert c.get("/api/health").status == 200
