"""Tool transformation (issue 35, item 4): `Server.derive_tool` makes a tool from a local,
mounted or proxied one — renamed, redescribed, arguments renamed, hidden (a fixed or
computed value), defaulted, the call wrapped — with a correct schema, errors under the
new names, the source hidden if asked, and the source's required scopes kept.

Real parts: `nimblemcp run --transport http` processes on loopback driven by our Client
and by the official `mcp` SDK's client; a proxy in front of a real stdio server
subprocess; uvicorn in-process for the scopes."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import _peers
import pytest
from _deploy import launch, stop
from _redis import free_port
from tests._serving import serving

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.client import Client
from nimblemcp.errors import McpError
from nimblemcp.server import ArgChange
from nimblemcp.server._transform import derived_schema
from nimblemcp.testing import connect
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.client.http import HttpTransport

SOURCE = {
    "type": "object",
    "properties": {
        "q": {"type": "string"},
        "limit": {"type": "integer"},
        "region": {"type": "string"},
        "verbose": {"type": "boolean", "default": False},
    },
    "required": ["q", "limit", "region"],
}


def test_the_derived_schema_renames_hides_and_defaults() -> None:
    schema, sources = derived_schema(SOURCE, {
        "q": ArgChange(name="query", description="What to look for"),
        "limit": ArgChange(default=10),
        "region": ArgChange(hidden=True, value="eu"),
        "verbose": ArgChange(hidden=True),  # has a default: may simply be left out
    }, "search")
    assert schema["properties"] == {"query": {"type": "string", "description": "What to look for"},
                                    "limit": {"type": "integer", "default": 10}}
    assert schema["required"] == ["query"]
    assert sources == {"query": "q", "limit": "limit"}
    assert SOURCE["required"] == ["q", "limit", "region"]  # the source's schema is untouched


def test_mistakes_in_a_derivation_are_refused() -> None:
    with pytest.raises(ValueError, match="no argument 'nope'"):
        derived_schema(SOURCE, {"nope": ArgChange(name="x")}, "search")
    with pytest.raises(ValueError, match="required and has no default"):
        derived_schema(SOURCE, {"region": ArgChange(hidden=True)}, "search")
    with pytest.raises(ValueError, match="two arguments would be named 'limit'"):
        derived_schema(SOURCE, {"q": ArgChange(name="limit")}, "search")
    with pytest.raises(ValueError, match="add hidden=True"):
        ArgChange(value=1)
    with pytest.raises(ValueError, match="not both"):
        ArgChange(hidden=True, value=1, compute=lambda ctx: 2)
    server = m.Server("s")

    @server.tool
    def search(q: str) -> str:
        return q

    with pytest.raises(ValueError, match="already registered"):
        server.derive_tool("search", name="search")
    with pytest.raises(ValueError, match="no argument"):
        server.derive_tool("search", name="find", args={"query": ArgChange(name="q2")})
    assert "find" not in server.tools


SERVER = '''
import nimblemcp as m
from nimblemcp.server import ArgChange

server = m.Server("docs")
DOCS = {"intro": "Welcome", "install": "pip install nimblemcp", "internal": "secret plans"}


@server.tool(annotations={"readOnlyHint": True})
def search(q: str, limit: int, region: str, verbose: bool = False) -> dict:
    """Search the documents."""
    hits = sorted(name for name in DOCS if q in DOCS[name].lower() or q in name)
    return {"hits": hits[:limit], "region": region}


async def only_public(ctx, arguments, forward):
    if not arguments["query"].strip():
        raise m.ToolError("say what to look for")
    result = await forward(arguments)
    hits = [h for h in result["structuredContent"]["hits"] if h != "internal"]
    return {**result, "structuredContent": {**result["structuredContent"], "hits": hits}}


server.derive_tool(
    "search", name="find_docs", description="Find public documents by a word.",
    args={"q": ArgChange(name="query", description="A word to look for"),
          "limit": ArgChange(default=2),
          "region": ArgChange(hidden=True, compute=lambda ctx: "eu-" + ctx.server.name)},
    wrap=only_public, hide_source=True,
)
'''


@pytest.fixture
def docs_server(tmp_path: Path) -> Iterator[str]:
    src = tmp_path / "docs_server.py"
    src.write_text(SERVER)
    port = free_port()
    proc = launch(src, port, tmp_path / "server.log")
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc, signal.SIGINT)


async def test_a_local_derived_tool_over_http_with_our_client(docs_server: str) -> None:
    async with Client(HttpTransport(docs_server)) as client:
        tools = {t["name"]: t for t in await client.list_tools()}
        assert set(tools) == {"find_docs"}  # the source is hidden
        found = tools["find_docs"]
        assert found["description"] == "Find public documents by a word."
        assert found["annotations"] == {"readOnlyHint": True}  # kept from the source
        assert found["inputSchema"]["required"] == ["query"]
        assert set(found["inputSchema"]["properties"]) == {"query", "limit", "verbose"}
        assert "outputSchema" in found

        done = await client.call_tool("find_docs", {"query": "in", "limit": 3})
        assert done["structuredContent"] == {"hits": ["install", "intro"], "region": "eu-docs"}
        first_two = await client.call_tool("find_docs", {"query": "in"})  # limit's default: 2
        assert first_two["structuredContent"]["hits"] == ["install"]  # of install, internal
        bad = await client.call_tool("find_docs", {"q": "in"})  # the old name
        assert bad["isError"] is True
        assert "Invalid arguments for tool find_docs" in bad["content"][0]["text"]
        assert "'query' is a required property" in bad["content"][0]["text"]
        empty = await client.call_tool("find_docs", {"query": " "})
        assert empty["isError"] is True and empty["content"][0]["text"] == "say what to look for"
        with pytest.raises(McpError) as info:
            await client.call_tool("search", {"q": "in", "limit": 1, "region": "x"})
        assert info.value.code == -32602
        wrong_type = await client.call_tool("find_docs", {"query": "in", "limit": "many"})
        assert wrong_type["isError"] is True and "limit" in wrong_type["content"][0]["text"]
        still = await client.call_tool("find_docs", {"query": "secret", "limit": 5})
        assert still["structuredContent"]["hits"] == []  # `internal` filtered out by the wrap


def test_a_local_derived_tool_with_the_official_sdk_client(docs_server: str) -> None:
    seen = _peers.sdk_http_probe(docs_server, "find_docs", {"query": "intro"})
    out = {"tools": [t["name"] for t in seen["tools"]], "schema": seen["tools"][0]["inputSchema"],
           "result": seen["result"]["structuredContent"]}
    assert out["tools"] == ["find_docs"]
    assert out["schema"]["required"] == ["query"]
    assert out["result"] == {"hits": ["intro"], "region": "eu-docs"}


BACKEND = '''
import nimblemcp as m

server = m.Server("backend")


@server.tool(annotations={"destructiveHint": True})
def send(to: str, body: str, urgent: bool = False) -> str:
    """Send a message."""
    return f"sent to {to}: {body}" + (" (urgent)" if urgent else "")
'''

FRONT = '''
import sys

from nimblemcp.proxy import proxy
from nimblemcp.server import ArgChange

server = proxy([sys.executable, "-m", "nimblemcp", "run", {backend!r}], name="front")
# the proxied tool is mirrored once the proxy starts: derived from then on
server.derive_tool("send", name="notify_ops", title="Notify the operators",
                   args={{"to": ArgChange(hidden=True, value="ops@example.com"),
                         "urgent": ArgChange(default=True)}},
                   hide_source=True)
'''


async def test_a_proxied_tool_derived_in_front_of_a_stdio_server(tmp_path: Path) -> None:
    backend = tmp_path / "backend.py"
    backend.write_text(BACKEND)
    front = tmp_path / "front.py"
    front.write_text(FRONT.format(backend=str(backend)))
    port = free_port()
    proc = launch(front, port, tmp_path / "front.log")
    try:
        async with Client(HttpTransport(f"http://127.0.0.1:{port}/mcp")) as client:
            tools = {t["name"]: t for t in await client.list_tools()}
            assert set(tools) == {"notify_ops"}
            assert tools["notify_ops"]["title"] == "Notify the operators"
            assert tools["notify_ops"]["annotations"] == {"destructiveHint": True}
            assert tools["notify_ops"]["inputSchema"]["required"] == ["body"]
            assert tools["notify_ops"]["inputSchema"]["properties"]["urgent"]["default"] is True
            sent = await client.call_tool("notify_ops", {"body": "disk full"})
            assert sent["content"][0]["text"] == "sent to ops@example.com: disk full (urgent)"
            calm = await client.call_tool("notify_ops", {"body": "fine", "urgent": False})
            assert calm["content"][0]["text"] == "sent to ops@example.com: fine"
            bad = await client.call_tool("notify_ops", {})
            assert bad["isError"] is True and "'body' is a required property" in bad["content"][0]["text"]
            again = await client.call_tool("notify_ops", {"body": "still here"})
            assert not again.get("isError") and again["content"][0]["text"].endswith("still here (urgent)")
    finally:
        stop(proc, signal.SIGINT)


RESOURCE = "http://127.0.0.1/mcp"
TOKENS = StaticTokens({
    "admin": AccessToken("alice", frozenset({"notes:write"}), (RESOURCE,)),
    "user": AccessToken("bob", frozenset(), (RESOURCE,)),
})


def _mounted() -> m.Server:
    host, child = m.Server("host"), m.Server("notes")

    @child.tool
    def delete(key: str, cascade: bool) -> str:
        return f"deleted {key}" + (" and below" if cascade else "")

    child.require_scopes(["notes:write"], tool="delete")
    host.mount(child, namespace="notes")
    host.derive_tool("notes_delete", name="drop_note", args={
        "key": ArgChange(name="note"), "cascade": ArgChange(hidden=True, value=False)})
    return host


async def test_a_mounted_tool_derived_keeps_the_source_scopes() -> None:
    app = _mounted().asgi_app(auth={
        "verifier": TOKENS, "resource": RESOURCE, "authorization_servers": ["https://as.example"]}, security=HttpSecurity(allowed_hosts=["*"]))
    async with serving(app) as base:
        async with Client(HttpTransport(base + "/mcp", headers={"authorization": "Bearer admin"})) as admin:
            done = await admin.call_tool("drop_note", {"note": "a"})
            assert done["content"][0]["text"] == "deleted a"
            assert {t["name"] for t in await admin.list_tools()} == {"notes_delete", "drop_note"}
        async with Client(HttpTransport(base + "/mcp", headers={"authorization": "Bearer user"})) as user:
            assert await user.list_tools() == []  # neither is offered without notes:write
            with pytest.raises(McpError) as info:
                await user.call_tool("drop_note", {"note": "a"})
            assert getattr(info.value, "status", None) == 403 or info.value.code == -32001


async def test_without_a_token_the_core_refuses_the_derived_tool() -> None:
    async with connect(_mounted()) as client:
        refused = await client.exchange("tools/call", {"name": "drop_note", "arguments": {"note": "a"}})
        assert refused.error["code"] == -32001
        assert refused.error["data"] == {"requiredScopes": ["notes:write"]}


async def test_a_derived_tool_follows_its_source() -> None:
    server = m.Server("s")

    @server.tool
    def greet(name: str) -> str:
        return f"hello {name}"

    @server.tool
    def other() -> str:
        return "other"

    server.derive_tool("greet", name="greet_team", args={"name": ArgChange(hidden=True, value="team")})
    async with connect(server) as client:
        assert (await client.call_tool("greet_team", {}))["content"][0]["text"] == "hello team"
        server.remove_tool("greet")
        assert {t["name"] for t in await client.list_tools(cache=False)} == {"other"}

        @server.tool(name="greet")
        def greet_loudly(name: str) -> str:
            return f"HELLO {name.upper()}"

        assert (await client.call_tool("greet_team", {}))["content"][0]["text"] == "HELLO TEAM"
        server.remove_tool("greet_team")  # the derivation goes with it
        server.remove_tool("greet")

        @server.tool
        def greet(name: str) -> str:
            return name

        assert {t["name"] for t in await client.list_tools(cache=False)} == {"other", "greet"}

