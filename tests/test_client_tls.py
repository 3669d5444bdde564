"""The TLS context of the HTTP client's wires (transports/client/_tls.py): HTTPS endpoints
are verified with one shared context; plain-HTTP endpoints skip the CA store."""

from __future__ import annotations

import asyncio
import ssl
import sys
from pathlib import Path
from typing import Any

import pytest
from _tls_certs import LocalCA
from test_client_h1 import RawServer, calls_in, raw_server

from nimblemcp.client import Client
from nimblemcp.errors import ClientError, StreamBroken
from nimblemcp.transports.client._tls import tls_context
from nimblemcp.transports.client.http import HttpTransport

WIRES = ("h1", "httpx")


def test_https_is_fully_verified_with_one_shared_context() -> None:
    first = tls_context("https://mcp.example.com/mcp")
    assert isinstance(first, ssl.SSLContext)
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert first.cert_store_stats()["x509_ca"] > 0  # a real CA store is loaded
    assert tls_context("HTTPS://other.example/mcp") is first  # built once per process


def test_plain_http_needs_no_ca_store() -> None:
    assert tls_context("http://127.0.0.1:8000/mcp") is None
    assert tls_context("HTTP://localhost/mcp") is None


# -- verify= and cert=, on both wires, against a TLS server made here (issue 31) -----------


@pytest.fixture
def ca(tmp_path: Path) -> LocalCA:
    return LocalCA.make(tmp_path / "pki")


def served(ca: LocalCA, *, client_certs: bool = False) -> ssl.SSLContext:
    """The server side: a certificate from our CA; optionally one required of clients."""
    leaf = ca.issue("server")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(leaf.cert, leaf.key)
    if client_certs:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(ca.ca_pem)
    return context


async def call_over(url: str, wire: str, **tls: Any) -> str:
    transport = HttpTransport(url, wire=wire, **tls)  # type: ignore[arg-type]
    async with Client(transport, mode="modern") as client:
        result = await client.call_tool("echo", {"text": "over tls"})
    assert transport.backend == wire
    return str(result["content"][0]["text"])


@pytest.mark.parametrize("wire", WIRES)
async def test_a_ca_bundle_path_an_ssl_context_or_no_verification(ca: LocalCA, wire: str) -> None:
    peer = RawServer()
    async with raw_server(peer, tls=served(ca)) as port:
        url = f"https://localhost:{port}/mcp"
        with pytest.raises(StreamBroken, match="CERTIFICATE_VERIFY_FAILED"):
            await call_over(url, wire)  # our CA is in no default store
        assert await call_over(url, wire, verify=str(ca.ca_pem)) == "over tls"
        assert await call_over(url, wire, verify=ca.ca_pem) == "over tls"  # a Path too
        assert await call_over(url, wire, verify=ssl.create_default_context(cafile=ca.ca_pem)) == "over tls"
        assert await call_over(url, wire, verify=False) == "over tls"
        other = LocalCA.make(ca.folder / "other", "another CA")
        with pytest.raises(StreamBroken, match="CERTIFICATE_VERIFY_FAILED"):
            await call_over(url, wire, verify=other.ca_pem)
    assert calls_in(peer.requests) == 4  # the refused handshakes reached no handler


@pytest.mark.parametrize("wire", WIRES)
async def test_a_client_certificate_for_a_server_that_requires_one(ca: LocalCA, wire: str) -> None:
    mine = ca.issue("client", client=True)
    locked = ca.issue("locked", client=True, password=b"s3cret")
    peer = RawServer()
    async with raw_server(peer, tls=served(ca, client_certs=True)) as port:
        url = f"https://localhost:{port}/mcp"
        with pytest.raises(StreamBroken):
            await call_over(url, wire, verify=ca.ca_pem)  # no certificate: refused
        assert not peer.requests
        assert await call_over(url, wire, verify=ca.ca_pem, cert=(str(mine.cert), str(mine.key))) == "over tls"
        both = ca.folder / "both.pem"
        both.write_bytes(mine.cert.read_bytes() + mine.key.read_bytes())
        assert await call_over(url, wire, verify=ca.ca_pem, cert=str(both)) == "over tls"
        assert await call_over(url, wire, verify=ca.ca_pem,
                               cert=(str(locked.cert), str(locked.key), "s3cret")) == "over tls"
    assert calls_in(peer.requests) == 3


async def test_the_client_takes_verify_and_cert(ca: LocalCA) -> None:
    mine = ca.issue("client", client=True)
    peer = RawServer()
    async with raw_server(peer, tls=served(ca, client_certs=True)) as port, \
            Client(f"https://localhost:{port}/mcp", mode="modern", verify=ca.ca_pem,
                   cert=(str(mine.cert), str(mine.key))) as client:
        result = await client.call_tool("echo", {"text": "hello"})
        assert result["content"][0]["text"] == "hello"


async def test_tls_settings_that_cannot_load_are_a_client_error(ca: LocalCA) -> None:
    with pytest.raises(ClientError, match="cannot load the TLS settings"):
        async with Client("https://localhost:1/mcp", mode="modern", verify=ca.folder / "missing.pem"):
            pass
    with pytest.raises(ClientError, match="cannot load the TLS settings"):
        async with Client("https://localhost:1/mcp", mode="modern", cert=str(ca.ca_pem)):  # no key in it
            pass
    with pytest.raises(TypeError, match="load_cert_chain"):
        Client("https://localhost:1/mcp", verify=ssl.create_default_context(), cert="c.pem")
    with pytest.raises(TypeError, match="http"):
        Client(["python", "server.py"], verify=False)
    import httpx

    with pytest.raises(TypeError, match="http="):
        HttpTransport("https://localhost:1/mcp", http=httpx.AsyncClient(), verify=False)


async def test_the_cli_verifies_a_server_with_cafile(ca: LocalCA) -> None:
    peer = RawServer()
    async with raw_server(peer, tls=served(ca)) as port:
        url = f"https://localhost:{port}/mcp"
        refused = await run_cli("tools", url, "--timeout", "20")
        trusted = await run_cli("tools", url, "--cafile", str(ca.ca_pem), "--timeout", "20")
    assert refused[0] == 1 and "CERTIFICATE_VERIFY_FAILED" in refused[2] and "Traceback" not in refused[2]
    assert trusted[0] == 0 and "echo" in trusted[1], trusted


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nimblemcp", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
