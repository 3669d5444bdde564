"""Issue 19: dependency injection with `Annotated[T, Depends(provider)]`.

Providers sync, async, generator and async generator (cleaned up after the call),
nested, once per request, left out of the input schema; the Context, the lifespan
value, HTTP headers and the authenticated principal injected the same way. Real
HTTP (uvicorn on loopback) for the headers and the principal, real stdio for the
empty headers off HTTP.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import pytest
from tests._serving import serving

import nimblemcp as m
from nimblemcp import Depends, Headers, HttpSecurity, get_lifespan, get_principal
from nimblemcp.client import Client
from nimblemcp.testing import connect
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.stdio.client import StdioTransport

EVENTS: list[str] = []


def settings() -> dict[str, int]:
    EVENTS.append("settings")
    return {"limit": 3}


async def connection(ctx: m.Context, state: Annotated[dict[str, str], Depends(get_lifespan)]) -> str:
    EVENTS.append("connect")
    return f"{state['dsn']}#{ctx.request_id}"


def transaction(conn: Annotated[str, Depends(connection)]) -> Iterator[str]:
    EVENTS.append("begin")
    try:
        yield "tx:" + conn
    finally:
        EVENTS.append("end")


async def session(conn: Annotated[str, Depends(connection)]) -> AsyncIterator[str]:
    EVENTS.append("open")
    yield "session:" + conn
    EVENTS.append("close")


def needs_value(value: int) -> int:
    return value


def _server(events: list[str]) -> m.Server:
    @contextlib.asynccontextmanager
    async def lifespan(server: m.Server) -> AsyncIterator[dict[str, str]]:
        yield {"dsn": "sqlite://memory"}

    server = m.Server("di", lifespan=lifespan)

    @server.tool()
    async def query(
        sql: str,
        tx: Annotated[str, Depends(transaction)],
        sess: Annotated[str, Depends(session)],
        conf: Annotated[dict[str, int], Depends(settings)],
        limit: int = 10,
    ) -> str:
        EVENTS.append("tool")
        return f"{sql}|{tx}|{sess}|{conf['limit']}|{limit}"

    @server.tool()
    def sync_tool(conf: Annotated[dict[str, int], Depends(settings)], ctx: m.Context) -> str:
        return f"{conf['limit']}:{ctx.method}"

    @server.tool()
    async def failing(tx: Annotated[str, Depends(transaction)]) -> str:
        EVENTS.append("tool")
        raise RuntimeError("boom")

    @server.prompt()
    def greet(name: str, conf: Annotated[dict[str, int], Depends(settings)]) -> str:
        return f"hello {name} x{conf['limit']}"

    @server.resource("notes://{id}")
    def note(id: str, state: Annotated[dict[str, str], Depends(get_lifespan)]) -> str:
        return f"{id}@{state['dsn']}"

    return server


async def test_dependencies_are_left_out_of_the_input_schema_and_prompt_arguments() -> None:
    server = _server([])
    schema = server.tools["query"].definition["inputSchema"]
    assert set(schema["properties"]) == {"sql", "limit"}
    assert schema["required"] == ["sql"]
    assert server.tools["sync_tool"].definition["inputSchema"]["properties"] == {}
    assert [a["name"] for a in server.prompts["greet"].definition["arguments"]] == ["name"]


async def test_providers_resolve_once_and_generators_clean_up_after_the_call() -> None:
    events = EVENTS
    events.clear()
    server = _server(events)
    async with connect(server) as client:
        result = await client.call_tool("query", {"sql": "select"})
        text = result["content"][0]["text"]
        sql, tx, sess, limit, default = text.split("|")
        assert sql == "select" and tx.startswith("tx:sqlite://memory#") and sess.startswith("session:sqlite")
        assert (limit, default) == ("3", "10")
        # `connection` ran once though two providers need it; cleanup after the tool, in reverse.
        assert events == ["connect", "begin", "open", "settings", "tool", "close", "end"]
        events.clear()
        assert (await client.call_tool("sync_tool"))["content"][0]["text"] == "3:tools/call"
        got = await client.get_prompt("greet", {"name": "ada"})
        assert got["messages"][0]["content"]["text"] == "hello ada x3"
        read = await client.read_resource("notes://7")
        assert read["contents"][0]["text"] == "7@sqlite://memory"
        events.clear()
        failed = await client.call_tool("failing")
        assert failed["isError"] is True
        assert events == ["connect", "begin", "tool", "end"]  # cleaned up on failure too


def test_a_provider_parameter_that_cannot_be_filled_is_refused_at_registration() -> None:
    server = m.Server("bad")

    with pytest.raises(TypeError, match=r"needs_value.*'value'"):
        @server.tool()
        def tool(x: Annotated[int, Depends(needs_value)]) -> int:
            return x

    with pytest.raises(TypeError, match="callable"):
        Depends(42)  # type: ignore[arg-type]


HEADERS_SERVER = """
from typing import Annotated, Any
import nimblemcp as m
from nimblemcp import Headers, Depends, get_principal

server = m.Server("headers")

@server.tool()
def seen(headers: Headers, who: Annotated[Any, Depends(get_principal)]) -> str:
    return f"{len(headers)}:{who}"

if __name__ == "__main__":
    server.run()
"""


async def test_headers_are_empty_and_principal_none_over_stdio(tmp_path: Path) -> None:
    src = tmp_path / "headers_server.py"
    src.write_text(HEADERS_SERVER)
    async with Client(StdioTransport(sys.executable, [str(src)])) as client:
        result = await client.call_tool("seen", {})
    assert result["content"][0]["text"] == "0:None"


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_headers_and_principal_injected_over_http(mode: str) -> None:
    server = m.Server("http-di")
    resource = "http://127.0.0.1/mcp"

    @server.tool()
    async def whoami(
        headers: Headers,
        token: Annotated[AccessToken | None, Depends(get_principal)],
        ctx: m.Context,
    ) -> dict[str, Any]:
        assert token is not None
        return {"method": headers.get("mcp-method"), "custom": headers.get("x-tenant"),
                "subject": token.subject, "scopes": sorted(token.scopes), "same": ctx.headers == headers}

    tokens = StaticTokens({"t": AccessToken("alice", frozenset({"mcp:use"}), (resource,))})
    app = server.asgi_app(auth={
        "verifier": tokens, "resource": resource, "authorization_servers": ["https://as.example"],
        "required_scopes": ["mcp:use"]}, security=HttpSecurity(allowed_hosts=["*"]))
    async with serving(app) as base:
        transport = HttpTransport(base + "/mcp", headers={"authorization": "Bearer t", "x-tenant": "acme"})
        async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
            result = await client.call_tool("whoami", {})
    assert result["structuredContent"] == {  # the legacy session leg too
        "method": "tools/call", "custom": "acme", "subject": "alice", "scopes": ["mcp:use"], "same": True}


def test_no_dependencies_no_wrapper() -> None:
    server = m.Server("plain")

    @server.tool()
    def plain(x: int, ctx: m.Context) -> int:
        return x

    assert server.tools["plain"].fn is plain  # zero cost: the function runs as it is
    assert server.tools["plain"].ctx_param == "ctx"


def test_headers_alias_is_a_mapping_dependency() -> None:
    args = Headers.__metadata__  # type: ignore[attr-defined]
    assert isinstance(args[0], Depends)
    assert Headers.__origin__ == Mapping[str, str]  # type: ignore[attr-defined]
