"""Tools (section 11) and schemas from type hints (section 24)."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pydantic
import pytest
import typing_extensions

import nimblemcp as m
from nimblemcp import ToolOptions
from nimblemcp.testing import connect


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str = pydantic.Field(description="street and number")
    city: str


class Person(pydantic.BaseModel):
    name: str
    home: Address
    work: Address | None = None


class Node(pydantic.BaseModel):
    value: int
    children: list[Node] = []


class Options(TypedDict):
    depth: int
    label: NotRequired[str]


class PydOptions(typing_extensions.TypedDict):
    depth: int
    label: typing_extensions.NotRequired[str]


class Summary(TypedDict):
    count: int
    names: list[str]


def _no_refs(node: Any) -> bool:
    if isinstance(node, dict):
        return "$ref" not in node and "$defs" not in node and all(_no_refs(v) for v in node.values())
    if isinstance(node, list):
        return all(_no_refs(v) for v in node)
    return True


async def tools_of(server: m.Server) -> dict[str, dict[str, Any]]:
    async with connect(server) as c:
        return {t["name"]: t for t in await c.list_tools()}


async def test_tool_03_schema_from_simple_hints_and_docstring() -> None:
    """TOOL-03: an object schema from hints; descriptions from the docstring."""
    server = m.Server("s")

    @server.tool()
    def search(query: str, limit: int = 10, exact: bool = False, ratio: float | None = None,
               tags: list[str] | None = None, color: Color = Color.RED,
               mode: Literal["a", "b"] = "a", note: Annotated[str, "free text"] = "") -> str:
        """Search the docs.

        Args:
            query: words to look for
            limit: how many hits
                at most
        """
        return ""

    @server.tool()
    def nothing() -> str:
        return ""

    tools = await tools_of(server)
    s = tools["search"]
    assert s["description"] == "Search the docs."
    schema = s["inputSchema"]
    assert schema["type"] == "object" and schema["required"] == ["query"]
    props = schema["properties"]
    assert props["query"] == {"type": "string", "description": "words to look for"}
    assert props["limit"] == {"type": "integer", "description": "how many hits at most", "default": 10}
    assert props["exact"]["type"] == "boolean"
    assert props["ratio"]["type"] == ["number", "null"]
    assert props["tags"] == {"type": ["array", "null"], "items": {"type": "string"}, "default": None}
    assert props["color"]["enum"] == ["red", "blue"]
    assert props["mode"]["enum"] == ["a", "b"]
    assert props["note"]["description"] == "free text"
    assert tools["nothing"]["inputSchema"]["type"] == "object"
    assert "outputSchema" not in s


async def test_tool_03_pydantic_models_are_inlined_without_defs() -> None:
    """TOOL-03 / SCHEMA-02: nested models are inlined; no `$defs` when not recursive."""
    server = m.Server("s")

    @server.tool()
    def register(person: Person, options: PydOptions) -> str:
        """Register someone.

        Args:
            person: who
        """
        return f"{person.home.city}:{options['depth']}"

    @server.tool()
    def tree(root: Node) -> int:
        return root.value + sum(c.value for c in root.children)

    tools = await tools_of(server)
    schema = tools["register"]["inputSchema"]
    assert _no_refs(schema), schema
    person = schema["properties"]["person"]
    assert person["description"] == "who"
    assert person["properties"]["home"]["properties"]["street"]["description"] == "street and number"
    assert schema["properties"]["options"]["required"] == ["depth"]
    # recursive models keep exactly the $defs they need, and the $refs resolve
    rec = tools["tree"]["inputSchema"]
    assert set(rec.get("$defs", {})) == {"Node"}
    import jsonschema
    jsonschema.Draft202012Validator.check_schema(rec)
    jsonschema.validate({"root": {"value": 1, "children": [{"value": 2}]}}, rec)

    async with connect(server) as c:
        r = await c.call_tool("register", {"person": {"name": "A", "home": {"street": "s", "city": "Oslo"}},
                                           "options": {"depth": 2}})
        t = await c.call_tool("tree", {"root": {"value": 1, "children": [{"value": 2}]}})
    assert r["content"][0]["text"] == "Oslo:2"
    assert t["structuredContent"] == {"result": 3}


async def test_typeddict_arguments_without_pydantic() -> None:
    """typing.TypedDict hints (refused by pydantic on 3.11) get a schema and validation."""
    server = m.Server("s")

    @server.tool()
    def run(opts: Options) -> Summary:
        return {"count": opts["depth"], "names": [opts.get("label", "-")]}

    tools = await tools_of(server)
    assert tools["run"]["inputSchema"]["properties"]["opts"] == {
        "type": "object", "properties": {"depth": {"type": "integer"}, "label": {"type": "string"}},
        "required": ["depth"]}
    assert tools["run"]["outputSchema"]["required"] == ["count", "names"]
    async with connect(server) as c:
        ok = await c.call_tool("run", {"opts": {"depth": 2, "label": "x"}})
        missing = await c.call_tool("run", {"opts": {"label": "x"}})
        wrong = await c.call_tool("run", {"opts": {"depth": "two"}})
    assert ok["structuredContent"] == {"count": 2, "names": ["x"]}
    assert missing["isError"] is True and "depth" in missing["content"][0]["text"]
    assert wrong["isError"] is True


@pytest.mark.parametrize(("arguments", "fragment"), [
    ({"a": "1", "b": 2}, "a"),
    ({"a": 1}, "b"),
    ({"a": 1.5, "b": 2}, "a"),
    ({"a": True, "b": 2}, "a"),
    ({"a": None, "b": 2}, "a"),
])
async def test_tool_08_wrong_argument_types_are_iserror_results(arguments: dict[str, Any], fragment: str) -> None:
    """TOOL-08: argument validation failures are tool execution errors (isError)."""
    server = m.Server("s")

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    async with connect(server) as c:
        r = await c.call_tool("add", arguments)
        ok = await c.call_tool("add", {"a": 1, "b": 2})
    assert r["isError"] is True
    assert fragment in r["content"][0]["text"]
    assert ok["structuredContent"] == {"result": 3}


async def test_tool_08_protocol_errors() -> None:
    """TOOL-08: unknown tool, bad name, non-object arguments -> -32602."""
    server = m.Server("s")
    server.add_tool(lambda: "x", name="x")
    async with connect(server) as c:
        unknown = await c.exchange("tools/call", {"name": "nope"})
        no_name = await c.exchange("tools/call", {})
        bad_args = await c.exchange("tools/call", {"name": "x", "arguments": [1]})
        ok = await c.call_tool("x")
    assert unknown.error["code"] == -32602 and "nope" in unknown.error["message"]
    assert no_name.error["code"] == -32602
    assert bad_args.error["code"] == -32602
    assert ok["content"] == [{"type": "text", "text": "x"}]


async def test_tool_08_raising_and_tool_error_become_iserror() -> None:
    # Unmasked (the development option): the exception's text reaches the model.
    # Masking by default is tested in test_hardening_leaks.py (issue 12).
    server = m.Server("s", tool_options=ToolOptions(mask_errors=False))

    @server.tool()
    def boom() -> str:
        raise ValueError("bad date")

    @server.tool()
    async def refuse() -> str:
        raise m.ToolError("quota exceeded")

    @server.tool()
    def explicit() -> m.ToolResult:
        return m.ToolResult("partial", is_error=True)

    async with connect(server) as c:
        a = await c.call_tool("boom")
        b = await c.call_tool("refuse")
        e = await c.call_tool("explicit")
    assert a["isError"] is True and "bad date" in a["content"][0]["text"]
    assert b == {**b, "isError": True, "content": [{"type": "text", "text": "quota exceeded"}]}
    assert e["isError"] is True and e["content"][0]["text"] == "partial"


async def test_tool_04_06_structured_output_and_text_mirror() -> None:
    """TOOL-04: structuredContent conforms to outputSchema; TOOL-06: JSON text mirror."""
    import jsonschema

    server = m.Server("s")

    @server.tool()
    def person() -> Person:
        return Person(name="A", home=Address(street="s", city="c"))

    @server.tool()
    def count() -> int:
        return 3

    @server.tool()
    def colors() -> list[Color]:
        return [Color.RED]

    @server.tool()
    def mapping() -> dict[str, int]:
        return {"a": 1}

    @server.tool(structured_output=False)
    def plain() -> dict[str, int]:
        return {"a": 1}

    tools = await tools_of(server)
    async with connect(server) as c:
        for name in ("person", "count", "colors", "mapping"):
            r = await c.call_tool(name)
            schema = tools[name]["outputSchema"]
            assert schema["type"] == "object" and _no_refs(schema)
            jsonschema.validate(r["structuredContent"], schema)
            assert json.loads(r["content"][0]["text"]) == r["structuredContent"]
        p = await c.call_tool("plain")
    assert "outputSchema" not in tools["plain"] and "structuredContent" not in p
    assert json.loads(p["content"][0]["text"]) == {"a": 1}


async def test_tool_07_every_content_type_via_helpers(full_server: m.Server) -> None:
    """TOOL-07: text, image, audio, resource_link, embedded text/blob."""
    async with connect(full_server) as c:
        img = (await c.call_tool("picture"))["content"][0]
        snd = (await c.call_tool("sound"))["content"][0]
        lnk = (await c.call_tool("link"))["content"][0]
        emb = (await c.call_tool("embed"))["content"]
    import base64

    from conftest import PNG, WAV
    assert img == {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}
    assert snd == {"type": "audio", "data": base64.b64encode(WAV).decode(), "mimeType": "audio/wav"}
    assert lnk["type"] == "resource_link" and lnk["uri"] == "docs://brief" and lnk["annotations"]["priority"] == 0.5
    assert emb[0]["resource"] == {"uri": "docs://brief", "text": "# Brief", "mimeType": "text/markdown"}
    assert base64.b64decode(emb[1]["resource"]["blob"]) == b"\x00\x01"


async def test_tool_02_09_annotations_title_icons_on_the_wire(full_server: m.Server) -> None:
    """TOOL-02 / TOOL-09 / ICON-01."""
    tools = await tools_of(full_server)
    echo = tools["echo"]
    assert echo["title"] == "Echo"
    assert echo["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    assert echo["icons"] == [{"src": "https://example.com/e.png", "mimeType": "image/png"}]
    assert echo["inputSchema"]["properties"]["message"]["description"] == "what to echo back"


def test_tool_10_names_validated_and_unique() -> None:
    server = m.Server("s")
    server.add_tool(lambda: "", name="ok.name-1_x")
    with pytest.raises(ValueError):
        server.add_tool(lambda: "", name="ok.name-1_x")
    for bad in ("", "has space", "x" * 129, "slash/no"):
        with pytest.raises(ValueError):
            server.add_tool(lambda: "", name=bad)


async def test_tool_03_verbatim_input_schema_is_published_and_enforced() -> None:
    """TOOL-03: any JSON Schema 2020-12 keyword survives untouched; arguments are checked."""
    from nimblemcp import Server
    from nimblemcp.testing import connect

    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"addr": {"$anchor": "addr", "type": "object",
                           "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        "properties": {"kind": {"enum": ["home", "work"]}, "address": {"$ref": "#addr"}},
        "if": {"properties": {"kind": {"const": "work"}}},
        "then": {"required": ["address"]},
        "allOf": [{"required": ["kind"]}],
        "additionalProperties": False,
    }
    server = Server("verbatim")

    @server.tool(input_schema=schema)
    def locate(kind: str, address: dict[str, str] | None = None) -> str:
        return f"{kind}:{(address or {}).get('city', '-')}"

    async with connect(server) as client:
        listed = (await client.list_tools())[0]["inputSchema"]
        assert listed == schema
        ok = await client.call_tool("locate", {"kind": "work", "address": {"city": "Oslo"}})
        assert ok["content"][0]["text"] == "work:Oslo"
        missing = await client.call_tool("locate", {"kind": "work"})
        assert missing["isError"] is True and "address" in missing["content"][0]["text"]
        extra = await client.call_tool("locate", {"kind": "home", "x": 1})
        assert extra["isError"] is True
