"""Resources (section 12), prompts (13) and completion (14)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

import nimblemcp as m
from nimblemcp.testing import connect

# --- resources --------------------------------------------------------------------------


def docs_server(seen: list[str]) -> m.Server:
    server = m.Server("docs")

    @server.resource("docs://{name}", mime_type="text/markdown")
    def doc(name: str) -> str:
        seen.append(name)
        return f"# {name}"

    @server.resource("files://{+path}")
    def file(path: str) -> str:
        seen.append(path)
        return path

    @server.resource("docs://index", description="All documents")
    def index() -> str:
        return "brief, risks"

    @server.resource("bin://logo", mime_type="image/png")
    def logo() -> bytes:
        return b"\x89PNG"

    return server


async def test_res_02_03_fixed_resources_text_and_blob() -> None:
    """RES-02 / RES-03: listed resources read as text or base64 blob."""
    async with connect(docs_server([])) as c:
        listed = await c.list_resources()
        idx = await c.read_resource("docs://index")
        logo = await c.read_resource("bin://logo")
    by_uri = {r["uri"]: r for r in listed}
    assert by_uri["docs://index"] == {"uri": "docs://index", "name": "index", "description": "All documents"}
    assert idx["contents"] == [{"uri": "docs://index", "text": "brief, risks", "mimeType": "text/plain"}]
    assert logo["contents"][0]["mimeType"] == "image/png"
    assert base64.b64decode(logo["contents"][0]["blob"]) == b"\x89PNG"
    assert "text" not in logo["contents"][0]


async def test_res_04_templates_rfc6570_level1() -> None:
    """RES-04: `{var}` matches one segment (percent-decoded), `{+var}` a path."""
    seen: list[str] = []
    async with connect(docs_server(seen)) as c:
        templates = await c.list_resource_templates()
        a = await c.read_resource("docs://brief")
        b = await c.read_resource("docs://my%20notes")
        p = await c.read_resource("files://a/b/c.txt")
        nested = await c.exchange("resources/read", {"uri": "docs://a/b"})
    assert [t["uriTemplate"] for t in templates] == ["docs://{name}", "files://{+path}"]
    assert a["contents"][0] == {"uri": "docs://brief", "text": "# brief", "mimeType": "text/markdown"}
    assert b["contents"][0]["text"] == "# my notes"
    assert p["contents"][0]["text"] == "a/b/c.txt"
    assert nested.error["code"] == -32602  # `{name}` never spans a slash
    assert seen == ["brief", "my notes", "a/b/c.txt"]


@pytest.mark.parametrize("uri", [
    "docs://..%2F..%2Fetc",
    "docs://..",
    "docs://%2E%2E",
    "docs://..%5Cwindows",
    "docs://a%5Cb",
    "docs://x%00y",
    "files://../etc/passwd",
    "files://a/../../etc",
    "files://a/%2E%2E/b",
    "files://a\\b",
    "files://./x",
])
async def test_res_08_path_traversal_rejected(uri: str) -> None:
    """RES-08: traversal tricks never reach the read function; the server keeps serving."""
    seen: list[str] = []
    async with connect(docs_server(seen)) as c:
        ex = await c.exchange("resources/read", {"uri": uri})
        ok = await c.read_resource("docs://brief")
    assert ex.error["code"] == -32602
    assert ex.error["data"]["uri"] == uri
    assert seen == ["brief"]
    assert ok["contents"][0]["text"] == "# brief"


@pytest.mark.parametrize("uri", ["nothing://here", "docs://", "docs:/brief", "DOCS://brief", ""])
async def test_res_05_unknown_resource_is_32602_with_uri(uri: str) -> None:
    """RES-05: unknown resource -> -32602 with data.uri, never empty contents."""
    async with connect(docs_server([])) as c:
        ex = await c.exchange("resources/read", {"uri": uri})
    assert ex.response is not None and "result" not in ex.response
    assert ex.error["code"] == -32602
    assert ex.error["data"] == {"uri": uri}


async def test_res_03_missing_uri_and_internal_error() -> None:
    """RES-03 params; RES-05: internal faults are -32603 without leaking details."""
    server = docs_server([])

    @server.resource("boom://x")
    def boom() -> str:
        raise OSError("/secret/path")

    async with connect(server) as c:
        missing = await c.exchange("resources/read", {})
        fault = await c.exchange("resources/read", {"uri": "boom://x"})
        ok = await c.read_resource("docs://index")
    assert missing.error["code"] == -32602
    assert fault.error["code"] == -32603 and "secret" not in str(fault.error)
    assert ok["contents"]


def test_resource_registration_checks() -> None:
    server = m.Server("s")
    with pytest.raises(ValueError):
        server.resource("no-scheme")(lambda: "")
    with pytest.raises(TypeError):
        server.resource("x://{name}")(lambda other: "")


# --- prompts --------------------------------------------------------------------------


async def test_prompt_02_03_list_and_get(full_server: m.Server) -> None:
    """PROMPT-02 / PROMPT-03: arguments with required flags; messages with roles."""
    async with connect(full_server) as c:
        listed = await c.list_prompts()
        got = await c.get_prompt("review", {"topic": "risks", "tone": "dry"})
        default = await c.get_prompt("review", {"topic": "risks"})
    assert listed == [{
        "name": "review", "description": "Review a topic.",
        "arguments": [
            {"name": "topic", "description": "what to review", "required": True},
            {"name": "tone", "description": "how to sound", "required": False},
        ],
    }]
    assert got["description"] == "Review a topic."
    assert got["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Review risks (dry)"}},
        {"role": "assistant", "content": {"type": "text", "text": "Sure."}},
    ]
    assert default["messages"][0]["content"]["text"] == "Review risks (calm)"


@pytest.mark.parametrize(("params", "fragment"), [
    ({"name": "review"}, "topic"),
    ({"name": "review", "arguments": {}}, "topic"),
    ({"name": "review", "arguments": {"topic": 5}}, "string"),
    ({"name": "review", "arguments": ["topic"]}, "object"),
    ({"name": "nope"}, "nope"),
    ({}, "name"),
])
async def test_prompt_05_errors_are_32602(full_server: m.Server, params: dict[str, Any], fragment: str) -> None:
    """PROMPT-05: unknown prompt and missing/invalid args -> -32602; keeps serving."""
    async with connect(full_server) as c:
        ex = await c.exchange("prompts/get", params)
        ok = await c.get_prompt("review", {"topic": "x"})
    assert ex.error["code"] == -32602
    assert fragment in ex.error["message"]
    assert ok["messages"]


# --- completion -------------------------------------------------------------------------


async def test_comp_01_03_completion_for_prompt_and_template(full_server: m.Server) -> None:
    """COMP-01 (declared) / COMP-02 / COMP-03."""
    async with connect(full_server) as c:
        caps = (await c.discover())["capabilities"]
        p = await c.complete({"type": "ref/prompt", "name": "review"}, "topic", "")
        r = await c.complete({"type": "ref/resource", "uri": "docs://{name}"}, "name", "b")
        none = await c.complete({"type": "ref/prompt", "name": "review"}, "tone", "")
    assert caps["completions"] == {}
    assert p["completion"]["values"] == ["alpha", "beta"]
    assert r["completion"]["values"] == ["brief"]
    assert none["completion"]["values"] == []
    assert p["completion"]["hasMore"] is False


async def test_comp_03_values_capped_at_100_with_has_more() -> None:
    """COMP-03: at most 100 values; hasMore tells there were more."""
    server = m.Server("s")

    @server.prompt(complete={"word": lambda value, ctx: [f"{value}{i}" for i in range(250)]})
    def p(word: str) -> str:
        return word

    async with connect(server) as c:
        r = (await c.complete({"type": "ref/prompt", "name": "p"}, "word", "w"))["completion"]
    assert len(r["values"]) == 100 and r["values"][0] == "w0"
    assert r["hasMore"] is True
    assert r["total"] == 250


async def test_comp_04_bad_completion_requests(full_server: m.Server) -> None:
    """COMP-04: unknown prompt / bad ref -> -32602."""
    async with connect(full_server) as c:
        for params in (
            {"ref": {"type": "ref/prompt", "name": "nope"}, "argument": {"name": "a", "value": ""}},
            {"ref": {"type": "ref/other"}, "argument": {"name": "a", "value": ""}},
            {"ref": {"type": "ref/resource", "uri": "zzz://{x}"}, "argument": {"name": "x", "value": ""}},
            {"ref": {"type": "ref/prompt", "name": "review"}},
            {"ref": {"type": "ref/prompt", "name": "review"}, "argument": {"name": 1, "value": ""}},
        ):
            ex = await c.exchange("completion/complete", params)
            assert ex.error["code"] == -32602, params
