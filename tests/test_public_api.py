"""The public surface is frozen, and `import nimblemcp` stays light."""

from __future__ import annotations

import json
import subprocess
import sys

import nimblemcp

FROZEN = [
    "LATEST_VERSION",
    "SUPPORTED_VERSIONS",
    "Callbacks",
    "Client",
    "ContentBlock",
    "Context",
    "ElicitResult",
    "InvalidParams",
    "McpError",
    "MissingClientCapability",
    "ProtocolError",
    "ResourceNotFound",
    "RetryPolicy",
    "Server",
    "ToolAnnotations",
    "ToolError",
    "ToolResult",
    "__version__",
    "assistant",
    "audio",
    "blob_resource",
    "embedded",
    "image",
    "message",
    "resource_link",
    "text",
    "text_resource",
    "user",
]


def test_all_is_frozen() -> None:
    """Changing the public API is a decision: update this list on purpose."""
    assert sorted(nimblemcp.__all__) == sorted(FROZEN)
    assert len(set(nimblemcp.__all__)) == len(nimblemcp.__all__)
    for name in nimblemcp.__all__:
        assert hasattr(nimblemcp, name), name


def test_error_tree_has_one_root() -> None:
    from nimblemcp import errors

    for name in errors.__all__:
        obj = getattr(errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, errors.McpError), name
    codes = {errors.ParseError.code, errors.InvalidRequest.code, errors.MethodNotFound.code,
             errors.InvalidParams.code, errors.InternalError.code, errors.HeaderMismatch.code,
             errors.MissingClientCapability.code, errors.UnsupportedProtocolVersion.code}
    assert codes == {-32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022}
    assert errors.ResourceNotFound("x://y").to_wire() == {
        "code": -32602, "message": "Resource not found", "data": {"uri": "x://y"}}


HEAVY = ["pydantic", "pydantic_core", "httpx", "uvicorn", "anyio", "starlette", "jsonschema",
         "typing_extensions", "concurrent.futures.process", "multiprocessing", "email",
         "http.client", "nimblemcp.transports.stdio", "nimblemcp.cli",
         "nimblemcp.server._sealing", "cryptography", "hmac"]


def test_import_is_light() -> None:
    """`import nimblemcp` pulls in no pydantic, HTTP stack or other heavy extras (asyncio
    itself, and the ssl it imports, is the core's one allowed cost)."""
    code = f"import sys, json, nimblemcp; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                         capture_output=True, check=True, text=True).stdout
    assert json.loads(out) == []


def test_simple_server_stays_light() -> None:
    """A server of plain-typed tools registers without importing pydantic."""
    code = (
        "import sys, json, nimblemcp as m\n"
        "s = m.Server('x')\n"
        "@s.tool()\n"
        "def f(a: int, b: list[str] | None = None) -> dict[str, int]:\n"
        "    return {'a': a}\n"
        "print(json.dumps('pydantic' in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    assert json.loads(out) is False


def test_client_is_exported_lazily() -> None:
    code = ("import sys, nimblemcp; before = 'nimblemcp.client' in sys.modules; "
            "from nimblemcp import Client; print(before, Client.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout
    assert out.split() == ["False", "nimblemcp.client._client"]


async def test_server_asgi_app_is_the_guarded_endpoint() -> None:
    """HTTP-02/HTTP-14: `Server.asgi_app()` answers MCP and refuses a foreign Origin."""
    import httpx

    server = nimblemcp.Server("asgi")
    server.tool(lambda text: text, name="echo")
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "server/discover"}
    transport = httpx.ASGITransport(app=server.asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        ok = await client.post("/mcp", json=body, headers=headers)
        assert ok.status_code == 200 and ok.json()["result"]["resultType"] == "complete"
        evil = await client.post("/mcp", json=body, headers={**headers, "origin": "http://evil.example"})
        assert evil.status_code == 403
