"""Proxies as httpx finds them (issue 31 point 6): `urllib.request.getproxies()` (the
environment; on macOS and Windows the system settings too) and NO_PROXY, decided as
httpx decides (transports/client/_proxies.py). A proxied endpoint goes over httpx, which
proxies it; one NO_PROXY exempts stays on the h1 wire. Before issue 31 only the
environment variables were read, and any of them sent every endpoint to httpx.
"""

from __future__ import annotations

import os
import urllib.request
from typing import Any

import httpx
import pytest
from _fake_mcp import FakeMcp, Seen, answer_body, fake_mcp, json_answer, raw

from nimblemcp.client import Client
from nimblemcp.transports.client import _proxies
from nimblemcp.transports.client._proxies import proxy_for
from nimblemcp.transports.client.http import HttpTransport

URLS = [
    "http://example.com/mcp", "http://www.example.com/", "http://wwwexample.com/", "http://example.com:8080/",
    "https://example.com:8080/", "https://example.com/", "http://EXAMPLE.com/", "http://localhost:8000/mcp",
    "http://127.0.0.1:9/", "http://[::1]:8000/mcp", "http://192.168.0.0/", "http://192.168.1.1/",
    "http://a.com/", "https://b.com:443/x", "http://sub.b.com/",
]
SETTINGS = [
    {"HTTP_PROXY": "http://proxy:3128"},
    {"https_proxy": "proxy:3128"},
    {"ALL_PROXY": "http://proxy:1080", "HTTP_PROXY": "http://web:3128"},
    {"all_proxy": "http://proxy:1080", "ALL_PROXY": "http://other:1080"},  # the lower case wins
    *({"ALL_PROXY": "http://proxy:3128", "NO_PROXY": no} for no in [
        "*", "example.com", ".example.com", "localhost", "127.0.0.1", "::1", "http://example.com",
        "example.com:8080", "192.168.0.0/16", " a.com , b.com ", "a.com,*", "", "https://b.com",
        "www.example.com", "sub.b.com:80",
    ]),
    {"HTTP_PROXY": "http://proxy:3128", "no_proxy": "localhost,127.0.0.1,::1"},
    {"FTP_PROXY": "http://proxy:21"},  # not a web proxy: none
]


def clear(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.lower().endswith("_proxy"):
            monkeypatch.delenv(key)


def httpx_proxies(client: httpx.AsyncClient, url: str) -> bool:
    """Whether httpx (trust_env, as the transport builds it) sends `url` through a proxy:
    the client's mount for the URL is not its own transport (httpx's private lookup, read
    here only to hold our decision equal to it)."""
    return client._transport_for_url(httpx.URL(url)) is not client._transport


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_the_decision_equals_httpx(monkeypatch: pytest.MonkeyPatch, settings: dict[str, str]) -> None:
    clear(monkeypatch)
    for key, value in settings.items():
        monkeypatch.setenv(key, value)
    client = httpx.AsyncClient(verify=False)
    for url in URLS:
        assert (proxy_for(url) is not None) == httpx_proxies(client, url), url


def test_which_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    clear(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "proxy:3128")
    monkeypatch.setenv("ALL_PROXY", "http://all:1080")
    assert proxy_for("https://example.com/") == "http://proxy:3128"  # the scheme's own, made a URL
    assert proxy_for("http://example.com/") == "http://all:1080"


def test_without_proxy_variables_nothing_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    clear(monkeypatch)
    monkeypatch.setattr(urllib.request, "getproxies", lambda: pytest.fail("read the settings"))
    monkeypatch.setattr(_proxies, "_ENVIRONMENT_ONLY", True)
    assert proxy_for("http://example.com/") is None


def forward(seen: Seen) -> bytes:
    """A forward proxy that answers for the origin (the request line names it)."""
    assert seen.line.startswith("POST http://127.0.0.1:")
    return json_answer(answer_body(seen.message))


async def calls(transport: HttpTransport) -> list[str]:
    async with Client(transport, mode="modern") as client:
        return [(await client.call_tool("side_effect", {}))["content"][0]["text"] for _ in range(2)]


async def test_an_endpoint_no_proxy_exempts_stays_on_the_h1_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    origin, proxy = FakeMcp(), FakeMcp(answer=raw(forward))
    async with fake_mcp(origin) as url, fake_mcp(proxy) as proxy_url:
        clear(monkeypatch)
        monkeypatch.setenv("HTTP_PROXY", proxy_url.removesuffix("/mcp"))
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        exempt = HttpTransport(url)
        assert await calls(exempt) == ["side_effect"] * 2
        monkeypatch.setenv("NO_PROXY", "localhost")
        proxied = HttpTransport(url)
        assert await calls(proxied) == ["side_effect"] * 2
    assert (exempt.backend, proxied.backend) == ("h1", "httpx")
    assert origin.runs["side_effect"] == 2 and proxy.runs["side_effect"] == 2


async def test_a_proxy_from_the_system_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS and Windows keep proxies in their settings, which `getproxies()` reads there;
    this machine has none, so the settings are what `getproxies()` answers (for us and
    for httpx, which imported it by name)."""
    origin, proxy = FakeMcp(), FakeMcp(answer=raw(forward))
    async with fake_mcp(origin) as url, fake_mcp(proxy) as proxy_url:
        clear(monkeypatch)
        system: dict[str, Any] = {"http": proxy_url.removesuffix("/mcp")}
        monkeypatch.setattr(_proxies, "_ENVIRONMENT_ONLY", False)
        monkeypatch.setattr(urllib.request, "getproxies", lambda: system)
        monkeypatch.setattr("httpx._utils.getproxies", lambda: system)
        transport = HttpTransport(url)
        assert await calls(transport) == ["side_effect"] * 2
        assert transport.backend == "httpx"
        system["no"] = "127.0.0.1"  # the settings' exceptions
        exempt = HttpTransport(url)
        assert await calls(exempt) == ["side_effect"] * 2
        assert exempt.backend == "h1"
    assert proxy.runs["side_effect"] == 2 and origin.runs["side_effect"] == 2
