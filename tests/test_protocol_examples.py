"""The spec's examples round-trip through our codec, and what our server puts on the
wire validates against schema.json (BASE-01, BASE-03, BASE-04, RT-01, CACHE-01)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES_DIR, SchemaBook, build_full_server, example_files

from nimblemcp.jsonrpc import decode, encode
from nimblemcp.testing import TestClient, connect

EXAMPLES = example_files()


def _same(a: Any, b: Any) -> bool:
    """Equality that also insists on the same JSON types (1 != 1.0 != True)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_examples_exist() -> None:
    assert len(EXAMPLES) > 50
    assert EXAMPLES_DIR.is_dir()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_round_trips_through_codec(path: Path) -> None:
    """BASE-01: every example decodes, re-encodes, and decodes to the same value."""
    raw = path.read_bytes()
    value = decode(raw)
    assert _same(value, json.loads(raw))
    encoded = encode(value)
    assert b"\n" not in encoded  # STDIO-01: one message per line
    assert _same(decode(encoded), value)
    assert encode(decode(encoded)) == encoded  # stable


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_is_valid_for_its_def(path: Path, schemas: SchemaBook) -> None:
    """The examples are named after their `$defs`: our schema harness agrees with them."""
    name = path.parent.name
    if name not in schemas.defs:
        pytest.fail(f"{path} is filed under an unknown $defs name")
    schemas.check(name, decode(path.read_bytes()))


def test_schema_harness_rejects_bad_instances(schemas: SchemaBook) -> None:
    """The validator is not vacuous: a result without resultType is refused."""
    with pytest.raises(AssertionError):
        schemas.check("DiscoverResult", {"supportedVersions": [], "capabilities": {}})
    with pytest.raises(AssertionError):
        schemas.check("CallToolResult", {"resultType": "complete", "content": [{"type": "nope"}]})


# --- what our server produces ----------------------------------------------------------


def _check_error(schemas: SchemaBook, def_name: str, response: dict[str, Any]) -> None:
    schemas.check("JSONRPCErrorResponse", response)
    schemas.check("JSONRPCMessage", response)
    if "error" in schemas.defs[def_name].get("properties", {}):
        schemas.check(def_name, response)
    else:
        schemas.check(def_name, response["error"])


async def _ok(client: TestClient, schemas: SchemaBook, method: str, params: dict[str, Any] | None,
              result_def: str, response_def: str | None = None) -> dict[str, Any]:
    ex = await client.exchange(method, params)
    assert ex.response is not None and "result" in ex.response, ex.response
    schemas.check(result_def, ex.response["result"])
    schemas.check(response_def or (result_def + "Response"), ex.response)
    schemas.check("JSONRPCMessage", ex.response)
    return ex.response["result"]


async def test_discover_result_validates(schemas: SchemaBook) -> None:
    """DISC-01 / RT-01 / CACHE-01 / META-03."""
    async with connect(build_full_server()) as c:
        r = await _ok(c, schemas, "server/discover", None, "DiscoverResult")
    assert r["resultType"] == "complete"
    assert r["supportedVersions"] == ["2026-07-28"]
    assert r["instructions"] == "Use the tools."
    assert r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "full"


async def test_list_results_validate(schemas: SchemaBook) -> None:
    async with connect(build_full_server()) as c:
        tools = await _ok(c, schemas, "tools/list", None, "ListToolsResult")
        for tool in tools["tools"]:
            schemas.check("Tool", tool)
        res = await _ok(c, schemas, "resources/list", None, "ListResourcesResult")
        tpl = await _ok(c, schemas, "resources/templates/list", None, "ListResourceTemplatesResult")
        prompts = await _ok(c, schemas, "prompts/list", None, "ListPromptsResult")
    assert len(tools["tools"]) == 10
    assert {r["uri"] for r in res["resources"]} == {"docs://brief", "bin://logo"}
    assert tpl["resourceTemplates"][0]["uriTemplate"] == "docs://{name}"
    assert prompts["prompts"][0]["name"] == "review"


@pytest.mark.parametrize(
    ("tool", "arguments", "kind"),
    [
        ("echo", {"message": "hi"}, "text"),
        ("picture", {}, "image"),
        ("sound", {}, "audio"),
        ("link", {}, "resource_link"),
        ("embed", {}, "resource"),
        ("weather", {"city": "Oslo"}, "structured"),
        ("point", {"x": 1, "y": 2}, "structured"),
        ("numbers", {"n": 3}, "structured"),
        ("fail", {"reason": "nope"}, "isError"),
        ("echo", {"message": 5}, "isError"),
    ],
)
async def test_call_tool_results_validate(schemas: SchemaBook, tool: str, arguments: dict[str, Any], kind: str) -> None:
    """TOOL-05/07/08: every content kind and error result is a valid CallToolResult."""
    async with connect(build_full_server()) as c:
        r = await _ok(c, schemas, "tools/call", {"name": tool, "arguments": arguments}, "CallToolResult")
    for block in r["content"]:
        schemas.check("ContentBlock", block)
    if kind == "structured":
        assert "structuredContent" in r
        assert json.loads(r["content"][0]["text"]) == r["structuredContent"]
    elif kind == "isError":
        assert r["isError"] is True
    else:
        assert r["content"][0]["type"] == kind
        assert "isError" not in r or r["isError"] is False
    assert "ttlMs" not in r and "cacheScope" not in r


async def test_read_and_prompt_and_completion_validate(schemas: SchemaBook) -> None:
    async with connect(build_full_server()) as c:
        text = await _ok(c, schemas, "resources/read", {"uri": "docs://brief"}, "ReadResourceResult")
        blob = await _ok(c, schemas, "resources/read", {"uri": "bin://logo"}, "ReadResourceResult")
        tpl = await _ok(c, schemas, "resources/read", {"uri": "docs://risks"}, "ReadResourceResult")
        prompt = await _ok(c, schemas, "prompts/get", {"name": "review", "arguments": {"topic": "x"}}, "GetPromptResult")
        comp = await _ok(c, schemas, "completion/complete",
                         {"ref": {"type": "ref/prompt", "name": "review"},
                          "argument": {"name": "topic", "value": "a"}}, "CompleteResult")
    assert text["contents"][0]["text"] == "# Brief"
    assert "blob" in blob["contents"][0] and "text" not in blob["contents"][0]
    assert tpl["contents"][0] == {"uri": "docs://risks", "text": "# risks", "mimeType": "text/markdown"}
    assert [m["role"] for m in prompt["messages"]] == ["user", "assistant"]
    assert comp["completion"]["values"] == ["alpha", "beta"]


@pytest.mark.parametrize(
    ("raw", "def_name", "code"),
    [
        (b"{not json", "ParseError", -32700),
        (b"[1, 2]", "InvalidRequestError", -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "nope/nope", "params": {"_meta": '
         b'{"io.modelcontextprotocol/protocolVersion": "2026-07-28", '
         b'"io.modelcontextprotocol/clientCapabilities": {}}}}', "MethodNotFoundError", -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}', "InvalidParamsError", -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": '
         b'{"io.modelcontextprotocol/protocolVersion": "1999-01-01", '
         b'"io.modelcontextprotocol/clientCapabilities": {}}}}', "UnsupportedProtocolVersionError", -32022),
    ],
)
async def test_error_responses_validate(schemas: SchemaBook, raw: bytes, def_name: str, code: int) -> None:
    """BASE-04 / BASE-09: each error kind matches its schema definition."""
    async with connect(build_full_server()) as c:
        ex = await c.send_raw(raw)
    assert ex.response is not None
    assert ex.response["error"]["code"] == code
    _check_error(schemas, def_name, ex.response)


async def test_internal_and_not_found_errors_validate(schemas: SchemaBook) -> None:
    server = build_full_server()

    @server.resource("boom://x")
    def boom() -> str:
        raise RuntimeError("secret internals")

    async with connect(server) as c:
        ex = await c.exchange("resources/read", {"uri": "boom://x"})
        _check_error(schemas, "InternalError", ex.response or {})
        assert "secret" not in json.dumps(ex.response)
        ex = await c.exchange("resources/read", {"uri": "nothing://here"})
        _check_error(schemas, "InvalidParamsError", ex.response or {})
        ex = await c.exchange("tools/call", {"name": "missing"})
        _check_error(schemas, "InvalidParamsError", ex.response or {})


async def test_progress_and_log_notifications_validate(schemas: SchemaBook) -> None:
    """PROG-02 / LOG-04: our notifications are valid schema messages."""
    async with connect(build_full_server()) as c:
        ex = await c.exchange("tools/call", {"name": "work"},
                              meta=c.meta(progressToken="p1", **{"io.modelcontextprotocol/logLevel": "debug"}))
    kinds = [n["method"] for n in ex.notifications]
    assert kinds == ["notifications/progress", "notifications/progress", "notifications/message"]
    for n in ex.notifications:
        schemas.check("JSONRPCNotification", n)
        schemas.check("ServerNotification", n)
    schemas.check("ProgressNotification", ex.notifications[0])
    schemas.check("LoggingMessageNotification", ex.notifications[2])
