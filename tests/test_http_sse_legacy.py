"""The 2024-11-05 HTTP+SSE transport on the server (issue 15), under a real uvicorn:
the `endpoint` event, 202 for POSTed messages, responses and notifications as
`message` events on the stream, server-to-client requests answered by POST, another
credential's session refused, the session ending with its stream, and the Streamable
HTTP endpoint served beside it. Interop: the official Python SDK's `sse_client`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from _peers import mcp_python
from _serving import serving

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.transports._sse import ServerSentEvent, iter_sse
from nimblemcp.transports.http.app import asgi_app
from nimblemcp.transports.http.legacy_sse import HttpSseApp

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_server() -> m.Server:
    server = m.Server("old-sse", "1.0")

    @server.tool
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool
    async def greet(ctx: m.Context) -> str:
        answer = await ctx.elicit("name", "Your name?", NAME)
        return f"Hello, {answer.content['name']}!"

    return server


@pytest.fixture
async def base() -> AsyncIterator[str]:
    server = make_server()
    async with serving(HttpSseApp(server, asgi_app(server))) as url:
        yield url


class Stream:
    def __init__(self, events: AsyncIterator[ServerSentEvent]) -> None:
        self.events = events

    async def next(self) -> ServerSentEvent:
        return await asyncio.wait_for(anext(self.events), 5)

    async def message(self) -> dict[str, Any]:
        event = await self.next()
        assert event.event == "message"
        return json.loads(event.data)  # type: ignore[no-any-return]


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2024-11-05", "capabilities": {"elicitation": {}},
                   "clientInfo": {"name": "old", "version": "0"}}}


async def test_the_old_wire_end_to_end(base: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http, http.stream("GET", f"{base}/sse") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        stream = Stream(iter_sse(r.aiter_lines()))
        endpoint = await stream.next()
        assert endpoint.event == "endpoint" and endpoint.data.startswith("/messages/?session_id=")
        post_url = base + endpoint.data
        assert (await http.post(post_url, json=INIT)).status_code == 202
        init = await stream.message()
        assert init["id"] == 1 and init["result"]["protocolVersion"] == "2024-11-05"
        assert init["result"]["serverInfo"]["name"] == "old-sse"
        await http.post(post_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        r2 = await http.post(post_url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                             "params": {"name": "add", "arguments": {"a": 2, "b": 3}}})
        assert r2.status_code == 202
        answer = await stream.message()
        assert answer["id"] == 2 and answer["result"]["content"][0]["text"] == "5"
        assert "resultType" not in answer["result"]  # the old shape
        # a server-to-client request goes out on the stream; its answer comes back by POST
        await http.post(post_url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                        "params": {"name": "greet", "arguments": {}}})
        ask = await stream.message()
        assert ask["method"] == "elicitation/create"
        await http.post(post_url, json={"jsonrpc": "2.0", "id": ask["id"],
                                        "result": {"action": "accept", "content": {"name": "Ada"}}})
        done = await stream.message()
        assert done["id"] == 3 and done["result"]["content"][0]["text"] == "Hello, Ada!"
        # garbage and unknown sessions
        assert (await http.post(post_url, content=b"{not json")).status_code == 400
        assert (await http.post(f"{base}/messages/?session_id=nope", json=INIT)).status_code == 404
        assert (await http.post(f"{base}/sse", json=INIT)).status_code == 405
    # the stream closed: its session is gone
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(50):
            if (await http.post(post_url, json=INIT)).status_code == 404:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the session outlived its stream")


async def test_streamable_http_is_served_beside_it(base: str) -> None:
    async with Client(f"{base}/mcp") as client:
        result = await client.call_tool("add", {"a": 1, "b": 1})
        assert result["content"][0]["text"] == "2"


SDK_SCRIPT = textwrap.dedent('''
    import asyncio, json, sys
    from mcp import ClientSession
    from mcp.client.sse import sse_client

    async def main(url):
        async def on_elicit(context, params):
            from mcp.types import ElicitResult
            return ElicitResult(action="accept", content={"name": "Grace"})
        async with sse_client(url) as (read, write):
            async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
                init = await session.initialize()
                tools = await session.list_tools()
                added = await session.call_tool("add", {"a": 20, "b": 22})
                greeted = await session.call_tool("greet", {})
                info = getattr(init, "server_info", None) or init.serverInfo
                print(json.dumps({"server": info.name, "tools": [t.name for t in tools.tools],
                                  "added": added.content[0].text, "greeted": greeted.content[0].text}))

    asyncio.run(main(sys.argv[1]))
''')


async def test_official_python_sdk_sse_client(base: str) -> None:
    try:
        python = mcp_python()
    except Exception as exc:  # the interop venv could not be built here
        pytest.skip(f"official SDK unavailable: {exc}")
    proc = await asyncio.create_subprocess_exec(
        str(python), "-c", SDK_SCRIPT, f"{base}/sse", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result == {"server": "old-sse", "tools": ["add", "greet"], "added": "42", "greeted": "Hello, Grace!"}


# -- the client side ------------------------------------------------------------------------


def on_elicit(params: dict[str, Any]) -> dict[str, Any]:
    return {"name": "Lin"}


async def test_our_sse_transport_with_a_legacy_client(base: str) -> None:
    from nimblemcp.transports.client.sse import SseTransport

    async with Client(SseTransport(f"{base}/sse"), mode="legacy", on_elicit=on_elicit) as client:
        assert [t["name"] for t in await client.list_tools()] == ["add", "greet"]
        assert client.era == "legacy"
        assert (await client.call_tool("add", {"a": 4, "b": 5}))["content"][0]["text"] == "9"
        assert (await client.call_tool("greet"))["content"][0]["text"] == "Hello, Lin!"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_plain_url_falls_back_to_the_old_transport(mode: str) -> None:
    """The spec's rule: a POST answered 4xx, then GET with an `endpoint` event. Here the
    URL serves only the old transport (POST to /sse is 405)."""
    server = make_server()
    async with serving(HttpSseApp(server)) as base, \
            Client(f"{base}/sse", mode=mode, on_elicit=on_elicit) as client:  # type: ignore[arg-type]
        assert (await client.call_tool("add", {"a": 1, "b": 2}))["content"][0]["text"] == "3"
        assert client.era == "legacy"
        assert (await client.call_tool("greet"))["content"][0]["text"] == "Hello, Lin!"


async def test_no_fallback_when_the_get_is_not_an_old_stream(base: str) -> None:
    from nimblemcp.errors import HttpStatusError

    async with serving(HttpSseApp(make_server())) as plain:  # /nowhere: 404 to POST and GET
        with pytest.raises(HttpStatusError):
            async with Client(f"{plain}/nowhere", mode="legacy") as client:
                await client.list_tools()
