"""Functions with positional-only parameters (`def f(a, /)`) as tools, prompts and
resource templates (TOOL-01, PROMPT-02, RES-04).

Arguments arrive by name, and every registered function used to be called with
keywords: such a function refused every call (a masked `isError` for tools, -32603 for
prompts). `Invocable` now passes those parameters by position; these tests prove the
answers, in the lean lane and in the general one (forced by a middleware), for async,
sync (worker thread) and inline functions, with defaults, a Context and a dependency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pytest

from nimblemcp import Context, Depends, Server
from nimblemcp._port import NoIO

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _prefix() -> str:
    return "p:"


def _server(with_middleware: bool) -> Server:
    server = Server("posonly", "1.0.0")

    @server.tool
    async def aadd(a: int, b: int = 10, /, c: int = 100) -> str:
        return str(a + b + c)

    @server.tool
    def sadd(a: int, b: int = 10, /) -> str:
        return str(a + b)

    @server.tool(run_in_thread=False)
    def iadd(a: int, /, *, b: int = 2) -> str:
        return str(a * b)

    @server.tool
    async def actx(a: str, ctx: Context, /) -> str:
        return f"{a}@{ctx.method}"

    @server.tool
    async def adep(a: int, p: Annotated[str, Depends(_prefix)], /) -> str:
        return f"{p}{a}"

    @server.prompt
    async def greet(name: str, /, greeting: str = "Hello") -> str:
        return f"{greeting}, {name}!"

    @server.resource("docs://{slug}")
    def doc(slug: str, /) -> str:
        return f"doc {slug}"

    if with_middleware:
        async def note(ctx: Context, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
            return await call_next()

        server.add_middleware(note)
    return server


def _call(server: Server, method: str, params: dict[str, Any]) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": dict(META)}}

    async def answer() -> dict[str, Any]:
        return await server.execute(server.prepare(message), NoIO())

    return asyncio.run(answer())


def _text(response: dict[str, Any]) -> str:
    result = response["result"]
    assert not result.get("isError"), result
    return str(result["content"][0]["text"])


@pytest.mark.parametrize("with_middleware", [False, True])
@pytest.mark.parametrize(("name", "arguments", "text"), [
    ("aadd", {"a": 1}, "111"),
    ("aadd", {"a": 1, "b": 2}, "103"),
    ("aadd", {"a": 1, "b": 2, "c": 3}, "6"),
    ("sadd", {"a": 1}, "11"),
    ("sadd", {"b": 2, "a": 1}, "3"),
    ("iadd", {"a": 4}, "8"),
    ("iadd", {"a": 4, "b": 3}, "12"),
    ("actx", {"a": "x"}, "x@tools/call"),
    ("adep", {"a": 7}, "p:7"),
])
def test_tools_with_positional_only_parameters_answer(
        with_middleware: bool, name: str, arguments: dict[str, Any], text: str) -> None:
    response = _call(_server(with_middleware), "tools/call", {"name": name, "arguments": arguments})
    assert _text(response) == text


@pytest.mark.parametrize("with_middleware", [False, True])
def test_a_missing_required_positional_only_argument_is_still_refused(with_middleware: bool) -> None:
    response = _call(_server(with_middleware), "tools/call", {"name": "sadd", "arguments": {"b": 2}})
    result = response["result"]
    assert result["isError"] is True
    assert "a" in result["content"][0]["text"]


@pytest.mark.parametrize("with_middleware", [False, True])
def test_prompts_and_templates_with_positional_only_parameters_answer(with_middleware: bool) -> None:
    server = _server(with_middleware)
    prompt = _call(server, "prompts/get", {"name": "greet", "arguments": {"name": "Ada"}})
    assert prompt["result"]["messages"][0]["content"]["text"] == "Hello, Ada!"
    prompt = _call(server, "prompts/get", {"name": "greet", "arguments": {"name": "Ada", "greeting": "Hi"}})
    assert prompt["result"]["messages"][0]["content"]["text"] == "Hi, Ada!"
    read = _call(server, "resources/read", {"uri": "docs://intro"})
    assert read["result"]["contents"][0]["text"] == "doc intro"


def test_the_schema_still_lists_positional_only_parameters_by_name() -> None:
    tools = _call(_server(False), "tools/list", {})["result"]["tools"]
    schema = next(t["inputSchema"] for t in tools if t["name"] == "aadd")
    assert list(schema["properties"]) == ["a", "b", "c"]
    assert schema["required"] == ["a"]
