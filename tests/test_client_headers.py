"""x-mcp-header validation (TOOL-11/12), Mcp-Param extraction and value encoding (HTTP-13/15)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from nimblemcp.client import InvalidToolHeaders, header_rules, param_headers
from nimblemcp.transports.client.http import HttpTransport, encode_header_value, mcp_name


def tool(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "t", "inputSchema": {"type": "object", "properties": props, **extra}}


def test_valid_rules_include_nested_objects() -> None:
    rules = header_rules(tool({
        "region": {"type": "string", "x-mcp-header": "Region"},
        "opts": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}},
    }))
    assert rules == [("Region", ("region",)), ("N", ("opts", "n"))]


@pytest.mark.parametrize("bad", [
    {"a": {"type": "string", "x-mcp-header": ""}},
    {"a": {"type": "string", "x-mcp-header": "Has Space"}},
    {"a": {"type": "number", "x-mcp-header": "A"}},
    {"a": {"type": "object", "x-mcp-header": "A"}},
    {"a": {"type": "string", "x-mcp-header": "A"}, "b": {"type": "string", "x-mcp-header": "a"}},
    {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}},
    {"a": {"anyOf": [{"type": "string", "x-mcp-header": "A"}]}},
])
def test_invalid_annotations_are_rejected(bad: dict[str, Any]) -> None:
    """TOOL-11: each violation makes the whole tool definition invalid."""
    with pytest.raises(InvalidToolHeaders):
        header_rules(tool(bad))


def test_annotation_under_defs_is_invalid() -> None:
    with pytest.raises(InvalidToolHeaders):
        header_rules(tool({"a": {"$ref": "#/$defs/x"}}, **{"$defs": {"x": {"type": "string", "x-mcp-header": "X"}}}))


def test_param_headers_read_exact_paths_and_skip_null() -> None:
    rules = [("Region", ("region",)), ("N", ("opts", "n")), ("Flag", ("flag",))]
    assert param_headers(rules, {"region": "eu", "opts": {"n": 3}, "flag": None}) == {"Region": "eu", "N": 3}
    with pytest.raises(ValueError):
        param_headers([("N", ("n",))], {"n": 2**60})


@pytest.mark.parametrize(("value", "wire"), [
    ("us-west1", "us-west1"), (True, "true"), (False, "false"), (42, "42"), ("a b", "a b"),
])
def test_plain_values(value: Any, wire: str) -> None:
    """HTTP-13: plain values go as-is."""
    assert encode_header_value(value) == wire


@pytest.mark.parametrize("value", ["日本語", " lead", "trail ", "tab\there", "line\nbreak", "=?base64?abc?="])
def test_unsafe_values_use_the_base64_sentinel(value: str) -> None:
    """HTTP-13: non-ASCII, control chars, edge whitespace and sentinel look-alikes are encoded."""
    wire = encode_header_value(value)
    assert wire.startswith("=?base64?") and wire.endswith("?=")
    assert base64.b64decode(wire[9:-2]).decode("utf-8") == value


def test_routing_headers_from_the_body() -> None:
    """HTTP-04/09/10/11/15: Accept, version, method, name and params headers."""
    transport = HttpTransport("http://127.0.0.1:1/mcp")
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "héllo", "arguments": {}, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}
    headers = transport.build_headers(request, {"Region": "eu"})
    assert headers["MCP-Protocol-Version"] == "2026-07-28"
    assert headers["Mcp-Method"] == "tools/call"
    assert headers["Mcp-Name"] == encode_header_value("héllo") != "héllo"
    assert headers["Mcp-Param-Region"] == "eu"
    assert "application/json" in headers["Accept"] and "text/event-stream" in headers["Accept"]
    assert mcp_name("resources/read", {"uri": "a://b"}) == "a://b"
    assert mcp_name("tasks/get", {"taskId": "t1"}) == "t1"
    assert mcp_name("tools/list", {}) is None
