"""What the HTTP client hands httpx as `verify` (transports/_tls.py): HTTPS endpoints
are verified with one shared context; plain-HTTP endpoints skip the CA store."""

from __future__ import annotations

import ssl

from nimblemcp.transports._tls import verify_for


def test_https_is_fully_verified_with_one_shared_context() -> None:
    first = verify_for("https://mcp.example.com/mcp")
    assert isinstance(first, ssl.SSLContext)
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert first.cert_store_stats()["x509_ca"] > 0  # a real CA store is loaded
    assert verify_for("HTTPS://other.example/mcp") is first  # built once per process


def test_plain_http_needs_no_ca_store() -> None:
    assert verify_for("http://127.0.0.1:8000/mcp") is False
    assert verify_for("HTTP://localhost/mcp") is False
