"""Issue 12, part A: schema rules (SCHEMA-01/02), output validation (TOOL-04) and
masked unexpected errors."""

from __future__ import annotations

import enum
import logging
from typing import Any

import pydantic
import pytest

from nimblemcp import Context, Server, StateOptions, ToolError, ToolOptions, ToolResult
from nimblemcp.errors import SchemaRefused
from nimblemcp.server._sealing import new_key
from nimblemcp.testing import connect

OBJ = {"type": "object", "properties": {"x": {"type": "integer"}}}


def _tool(**schema: Any) -> Server:
    server = Server("schemas")

    def anything(**kwargs: Any) -> str:
        return "ok"

    server.add_tool(anything, input_schema={**OBJ, **schema})
    return server


@pytest.mark.parametrize("ref", [
    "https://example.com/schema.json",
    "http://127.0.0.1:9/x.json#/defs/a",
    "other.json#/a",
    "file:///etc/passwd",
])
def test_network_and_external_refs_are_refused_at_registration(ref: str) -> None:
    with pytest.raises(SchemaRefused, match="never fetched"):
        _tool(properties={"x": {"$ref": ref}})
    with pytest.raises(SchemaRefused):
        _tool(allOf=[{"$dynamicRef": ref}])


async def test_local_refs_still_work() -> None:
    server = _tool(**{"$defs": {"n": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/n"}}})
    async with connect(server) as client:
        ok = await client.call_tool("anything", {"x": 1})
        bad = await client.call_tool("anything", {"x": "one"})
    assert ok["content"][0]["text"] == "ok"
    assert bad["isError"] is True


def test_an_unknown_dialect_is_refused_naming_it() -> None:
    with pytest.raises(SchemaRefused, match=r"unsupported JSON Schema dialect 'https://example\.com/my-dialect'"):
        _tool(**{"$schema": "https://example.com/my-dialect"})


async def test_known_dialects_validate_by_their_own_rules() -> None:
    # draft-07: `exclusiveMaximum` is a number there too; `dependencies` is draft-07 only.
    server = _tool(**{"$schema": "http://json-schema.org/draft-07/schema#",
                      "dependencies": {"x": ["y"]}})
    async with connect(server) as client:
        bad = await client.call_tool("anything", {"x": 1})
        ok = await client.call_tool("anything", {"x": 1, "y": 2})
    assert bad["isError"] is True and ok["content"][0]["text"] == "ok"


async def test_elicitation_schemas_are_held_to_the_same_rules() -> None:
    server = Server("elicit", state=StateOptions(keys=[new_key()]))

    @server.tool
    async def ask(ctx: Context) -> str:
        await ctx.elicit("a", "?", {"type": "object", "properties": {"n": {"$ref": "https://example.com/n"}}})
        return "asked"

    async with connect(server, capabilities={"elicitation": {"form": {}}}) as client:
        result = await client.call_tool("ask", {})
    assert result["isError"] is True


class Color(enum.Enum):
    RED = "red"


class Point(pydantic.BaseModel):
    x: int
    y: int


async def test_structured_content_breaking_the_output_schema_is_an_error_saying_why() -> None:
    server = Server("out")

    @server.tool
    def count() -> int:
        return "three"  # type: ignore[return-value]

    @server.tool
    def point() -> Point:
        return {"x": 1, "y": "two"}  # type: ignore[return-value]

    @server.tool
    def fine() -> list[Color]:
        return [Color.RED]

    @server.tool
    def good_point() -> Point:
        return Point(x=1, y=2)

    @server.tool
    def explicit() -> Point:
        return ToolResult(structured={"x": "nope"})  # type: ignore[return-value]

    async with connect(server) as client:
        c = await client.call_tool("count")
        p = await client.call_tool("point")
        f = await client.call_tool("fine")
        g = await client.call_tool("good_point")
        e = await client.call_tool("explicit")
    assert c["isError"] is True and "structuredContent" not in c
    assert "does not match its outputSchema" in c["content"][0]["text"] and "integer" in c["content"][0]["text"]
    assert p["isError"] is True and "y" in p["content"][0]["text"]
    assert f["structuredContent"] == {"result": ["red"]}
    assert g["structuredContent"] == {"x": 1, "y": 2}
    assert e["isError"] is True and "structuredContent" not in e


async def test_output_validation_can_be_turned_off() -> None:
    server = Server("out", tool_options=ToolOptions(validate_output=False))

    @server.tool
    def count() -> int:
        return "three"  # type: ignore[return-value]

    async with connect(server) as client:
        c = await client.call_tool("count")
    assert c["structuredContent"] == {"result": "three"}


async def test_unexpected_errors_are_masked_with_a_reference_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("leaky")

    @server.tool
    def connect_db() -> str:
        raise RuntimeError("connection failed (db-password=hunter2) at /srv/app/secret.py")

    @server.tool
    async def refuse() -> str:
        raise ToolError("quota exceeded")

    with caplog.at_level(logging.ERROR, logger="nimblemcp.server"):
        async with connect(server) as client:
            a = await client.call_tool("connect_db")
            b = await client.call_tool("refuse")
    text = a["content"][0]["text"]
    assert a["isError"] is True
    assert "hunter2" not in text and "/srv" not in text and "RuntimeError" not in text
    ref = text.split("reference ", 1)[1].split(")", 1)[0]
    assert len(ref) == 8
    logged = [r for r in caplog.records if ref in r.getMessage()]
    assert logged and logged[0].exc_info is not None and "hunter2" in str(logged[0].exc_info[1])
    assert b["content"][0]["text"] == "quota exceeded"  # ToolError passes through


async def test_details_are_shown_when_masking_is_off() -> None:
    server = Server("dev", tool_options=ToolOptions(mask_errors=False))

    @server.tool
    def broken() -> str:
        raise RuntimeError("detail for the developer")

    async with connect(server) as client:
        a = await client.call_tool("broken")
    assert "RuntimeError: detail for the developer" in a["content"][0]["text"]
    assert "reference" in a["content"][0]["text"]


async def test_other_handlers_failures_answer_a_reference_only(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("leaky")

    @server.resource("secret://db")
    def db() -> str:
        raise RuntimeError("dsn=postgres://admin:hunter2@db/prod")

    with caplog.at_level(logging.ERROR, logger="nimblemcp.server"):
        async with connect(server) as client:
            ex = await client.exchange("resources/read", {"uri": "secret://db"})
    assert ex.error is not None and ex.error["code"] == -32603
    assert "hunter2" not in str(ex.error)
    ref = ex.error["message"].split("reference ", 1)[1].rstrip(")")
    assert any(ref in r.getMessage() for r in caplog.records)
