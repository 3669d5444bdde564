"""Non-ASCII URLs (issue 31 point 6): an IDNA host and a path or query with non-ASCII
characters go out in httpx's normal form (punycode host, UTF-8 percent-encoding) on
both wires, not as a raw `UnicodeEncodeError`; a host that is not valid IDNA is a
`ClientError`, and the CLI says so without a traceback.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from _fake_mcp import FakeMcp, Seen, answer_body, fake_mcp, json_answer, raw

from nimblemcp.client import Client
from nimblemcp.errors import ClientError
from nimblemcp.transports.client.http import HttpTransport

WIRES = ("h1", "httpx")
PUNY = "xn--bcher-kva.localhost"


@pytest.fixture
async def loopback_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DNS here knows the IDNA name: the event loop resolves it to loopback (both
    wires resolve through the loop: asyncio directly, httpx through anyio)."""
    loop = asyncio.get_running_loop()
    resolve = loop.getaddrinfo

    async def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host in (PUNY, PUNY.encode()):
            host = "127.0.0.1"
        return await resolve(host, *args, **kwargs)

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)


@pytest.mark.usefixtures("loopback_names")
@pytest.mark.parametrize("wire", WIRES)
async def test_an_idna_host_and_a_non_ascii_path_and_query(wire: str) -> None:
    peer = FakeMcp()
    async with fake_mcp(peer) as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        transport = HttpTransport(f"http://Bücher.localhost:{port}/pfad/ä b?q=ü&x=<1>", wire=wire)  # type: ignore[arg-type]
        assert transport.url == f"http://{PUNY}:{port}/pfad/%C3%A4%20b?q=%C3%BC&x=%3C1%3E"
        assert transport.peer == f"http://{PUNY}:{port}"
        async with Client(transport, mode="modern") as client:
            result = await client.call_tool("side_effect", {})
            assert result["content"][0]["text"] == "side_effect"
    lines = {seen.line for seen in peer.seen}
    hosts = {seen.headers["host"] for seen in peer.seen}
    assert lines == {"POST /pfad/%C3%A4%20b?q=%C3%BC&x=%3C1%3E HTTP/1.1"} and hosts == {f"{PUNY}:{port}"}


def test_a_host_that_is_not_idna_is_a_client_error() -> None:
    with pytest.raises(ClientError, match="invalid URL"):
        HttpTransport("http://☃.net/mcp")
    with pytest.raises(ClientError, match="invalid URL"):
        Client("http://exa\u00admple.com:99999/mcp")


async def run_cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "nimblemcp", *args,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_the_cli_reports_non_ascii_urls_without_a_traceback() -> None:
    code, err = await run_cli("tools", "http://☃.net/mcp")
    assert code == 1 and "invalid URL" in err and "Traceback" not in err, err
    code, err = await run_cli("tools", "http://127.0.0.1:1/pfad/ä", "--timeout", "10")
    assert code == 1 and "Traceback" not in err and "UnicodeEncodeError" not in err, err


@pytest.mark.parametrize("wire", WIRES)
async def test_a_redirect_to_a_path_with_a_space_is_followed_in_its_normal_form(wire: str) -> None:
    def answer(seen: Seen) -> bytes:
        if seen.line.startswith("POST /mcp "):
            return b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /moved here?x=<1>\r\ncontent-length: 0\r\n\r\n"
        return json_answer(answer_body(seen.message))

    peer = FakeMcp(answer=raw(answer))
    async with fake_mcp(peer) as url, Client(HttpTransport(url, wire=wire), mode="modern") as client:  # type: ignore[arg-type]
        result = await client.call_tool("side_effect", {})
        assert result["content"][0]["text"] == "side_effect"
    assert "POST /moved%20here?x=%3C1%3E HTTP/1.1" in {seen.line for seen in peer.seen}
