"""The Client over real HTTP: our ASGI app under a real uvicorn on 127.0.0.1, httpx.

Headers (HTTP-04/09..15) are checked twice: recorded on the way in, and validated by
our server, which rejects any `Mcp-Name`/`Mcp-Param-*` that disagrees with the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import pydantic
import pytest
from _serving import HeaderRecorder, serving

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.errors import TransportError
from nimblemcp.transports.http.app import asgi_app


def build_server() -> m.Server:
    server = m.Server("http-client-test", "0.1")

    @server.tool()
    def sql(
        region: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Region"})],
        limit: Annotated[int | None, pydantic.Field(json_schema_extra={"x-mcp-header": "Limit"})] = None,
    ) -> str:
        return f"{region}:{limit}"

    @server.resource("docs://café", mime_type="text/plain")
    def cafe() -> str:
        return "hallo"

    @server.tool()
    async def progress(steps: int, ctx: m.Context) -> str:
        for i in range(1, steps + 1):
            await ctx.report_progress(i, steps)
        return "done"

    @server.tool()
    async def hang() -> str:
        await asyncio.Event().wait()
        return "never"

    @server.resource("docs://brief", mime_type="text/markdown")
    def brief() -> str:
        return "# Brief"

    @server.prompt()
    def review(topic: str) -> str:
        return f"Review {topic}"

    return server


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, HeaderRecorder]]:
    recorder = HeaderRecorder(asgi_app(build_server()))
    async with serving(recorder) as base:
        yield f"{base}/mcp", recorder


async def test_tools_resources_prompts_over_http(served: tuple[str, HeaderRecorder]) -> None:
    """HTTP-03/04/06, HTTP-09..11: routing headers match the body (the server checks)."""
    url, recorder = served
    async with Client(url) as client:
        names = [t["name"] for t in await client.list_tools()]
        assert "sql" in names
        assert (await client.call_tool("sql", {"region": "eu"}))["content"][0]["text"] == "eu:None"
        assert (await client.read_resource("docs://café"))["contents"][0]["text"] == "hallo"
        assert (await client.read_resource("docs://brief"))["contents"][0]["text"] == "# Brief"
        prompt = await client.get_prompt("review", {"topic": "x"})
        assert prompt["messages"][0]["content"]["text"] == "Review x"
    reads = [h["mcp-name"] for h in recorder.headers if h["mcp-method"] == "resources/read"]
    assert reads[0].startswith("=?base64?") and reads[1] == "docs://brief"
    by_method = {h["mcp-method"]: h for h in recorder.headers}
    assert by_method["tools/call"]["mcp-name"] == "sql"
    assert by_method["prompts/get"]["mcp-name"] == "review"
    assert "mcp-name" not in by_method["tools/list"]
    for headers in recorder.headers:
        assert headers["mcp-protocol-version"] == "2026-07-28"
        assert "text/event-stream" in headers["accept"] and "application/json" in headers["accept"]


async def test_param_headers_mirror_x_mcp_header_arguments(served: tuple[str, HeaderRecorder]) -> None:
    """HTTP-13/15: Mcp-Param-* from x-mcp-header properties; omitted when null."""
    url, recorder = served
    async with Client(url) as client:
        result = await client.call_tool("sql", {"region": "Zürich", "limit": 5})
        assert result["content"][0]["text"] == "Zürich:5"
        result = await client.call_tool("sql", {"region": "eu"})
        assert result["content"][0]["text"] == "eu:None"
    calls = [h for h in recorder.headers if h.get("mcp-method") == "tools/call"]
    assert calls[0]["mcp-param-region"].startswith("=?base64?")
    assert calls[0]["mcp-param-limit"] == "5"
    assert calls[1]["mcp-param-region"] == "eu" and "mcp-param-limit" not in calls[1]


async def test_sse_progress_reaches_the_callback(served: tuple[str, HeaderRecorder]) -> None:
    """HTTP-06/07: an SSE response with notifications, then the result."""
    url, _ = served
    seen: list[float] = []
    async with Client(url) as client:
        result = await client.call_tool("progress", {"steps": 3},
                                        on_progress=lambda p, t, msg: seen.append(p))
    assert result["content"][0]["text"] == "done"
    assert seen == [1, 2, 3]


async def test_timeout_closes_the_stream(served: tuple[str, HeaderRecorder]) -> None:
    """CANC-01, CANC-07, ERR-05: a timeout is local, and the client stays usable."""
    url, _ = served
    async with Client(url) as client:
        with pytest.raises(m.errors.RequestTimeout):
            await client.call_tool("hang", {}, timeout=0.2)
        assert (await client.call_tool("sql", {"region": "eu"}))["content"][0]["text"] == "eu:None"


async def test_unreachable_server_is_a_transport_error() -> None:
    """ERR-05: a refused connection is a TransportError, never a ProtocolError."""
    async with Client("http://127.0.0.1:9/mcp") as client:
        with pytest.raises(TransportError):
            await client.list_tools()
