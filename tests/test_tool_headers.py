"""One `x-mcp-header` rule walk for server and client (TOOL-11/12, HTTP-15/16).

The server refuses, at registration, a tool whose annotations break TOOL-11 (before,
it published it and its own client dropped it); a valid tool's rules are the same on
both sides, and a real client's `Mcp-Param-*` headers pass the server's check.
"""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
import pytest
from _serving import HeaderRecorder, serving

import nimblemcp as m
from nimblemcp.client import Client, header_rules
from nimblemcp.errors import InvalidToolHeaders, McpError
from nimblemcp.testing import connect
from nimblemcp.transports.http.app import asgi_app
from nimblemcp.types._tool_headers import HeaderRule

NESTED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "opts": {"type": "object", "properties": {
            "n": {"type": ["integer", "null"], "x-mcp-header": "N"},
            "dry": {"type": "boolean", "x-mcp-header": "Dry"},
        }},
        "query": {"type": "string"},
    },
    "required": ["region"],
}


def _echo(**kwargs: Any) -> str:
    return repr(sorted(kwargs))


@pytest.mark.parametrize(("why", "props"), [
    ("empty", {"a": {"type": "string", "x-mcp-header": ""}}),
    ("not a token", {"a": {"type": "string", "x-mcp-header": "Has Space"}}),
    ("CR/LF", {"a": {"type": "string", "x-mcp-header": "A\r\nX"}}),
    ("number", {"a": {"type": "number", "x-mcp-header": "A"}}),
    ("object", {"a": {"type": "object", "x-mcp-header": "A"}}),
    ("duplicate", {"a": {"type": "string", "x-mcp-header": "Dup"},
                   "b": {"type": "string", "x-mcp-header": "dup"}}),
    ("under items", {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}),
    ("under anyOf", {"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}}),
])
def test_tool_11_server_refuses_invalid_annotations_at_registration(why: str, props: dict[str, Any]) -> None:
    """TOOL-11: any violation makes the definition invalid; the server does not publish it."""
    server = m.Server("bad-headers")
    schema = {"type": "object", "properties": props}
    with pytest.raises(InvalidToolHeaders, match="tool 'bad'") as caught:
        server.tool(_echo, name="bad", input_schema=schema)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, McpError), why
    assert "bad" not in server.tools


def test_tool_11_typed_number_parameter_is_refused() -> None:
    """TOOL-11: a `float` parameter (JSON `number`) cannot carry x-mcp-header."""
    server = m.Server("bad-typed")

    def price(amount: Annotated[float, pydantic.Field(json_schema_extra={"x-mcp-header": "Amount"})]) -> str:
        return str(amount)

    with pytest.raises(InvalidToolHeaders, match="string, integer or boolean"):
        server.tool(price)
    assert "price" not in server.tools


def test_tool_11_annotation_under_defs_is_refused() -> None:
    server = m.Server("bad-defs")
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
              "$defs": {"x": {"type": "string", "x-mcp-header": "X"}}}
    with pytest.raises(InvalidToolHeaders):
        server.tool(_echo, name="refs", input_schema=schema)


async def test_valid_rules_are_the_same_on_both_sides() -> None:
    """TOOL-11/HTTP-15: the server's registration-time rules equal what a client walks
    out of the published definition."""
    server = m.Server("same-rules")
    server.tool(_echo, name="nested", input_schema=NESTED)

    def sql(
        region: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Region"})],
        limit: Annotated[int | None, pydantic.Field(json_schema_extra={"x-mcp-header": "Limit"})] = None,
    ) -> str:
        return region

    server.tool(sql)
    server.tool(_echo, name="plain", input_schema={"type": "object", "properties": {"q": {"type": "string"}}})
    async with connect(server) as client:
        listed = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
    for name, tool in listed.items():
        assert list(server.tools[name].header_rules) == header_rules(tool), name
    assert server.tools["nested"].header_rules == (
        HeaderRule("Region", ("region",)), HeaderRule("N", ("opts", "n")), HeaderRule("Dry", ("opts", "dry")))
    assert server.tools["sql"].header_rules == (HeaderRule("Region", ("region",)), HeaderRule("Limit", ("limit",)))
    assert server.tools["plain"].header_rules == ()


async def test_http_15_16_nested_param_headers_pass_the_server_check() -> None:
    """HTTP-15/16: our client's nested `Mcp-Param-*` values satisfy our server's check."""
    server = m.Server("nested-http")
    server.tool(lambda region, opts=None, query=None: f"{region}:{opts}", name="nested", input_schema=NESTED)
    recorder = HeaderRecorder(asgi_app(server))
    async with serving(recorder) as base, Client(f"{base}/mcp") as client:
        assert [t["name"] for t in await client.list_tools()] == ["nested"]
        result = await client.call_tool("nested", {"region": "eu", "opts": {"n": 3, "dry": True}})
        assert result["content"][0]["text"] == "eu:{'n': 3, 'dry': True}"
        result = await client.call_tool("nested", {"region": "日本", "opts": {"n": None}})
        assert result["content"][0]["text"] == "日本:{'n': None}"
    calls = [h for h in recorder.headers if h.get("mcp-method") == "tools/call"]
    assert calls[0]["mcp-param-n"] == "3" and calls[0]["mcp-param-dry"] == "true"
    assert calls[1]["mcp-param-region"].startswith("=?base64?") and "mcp-param-n" not in calls[1]
