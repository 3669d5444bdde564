"""The core port (issue 11): transports meet the server only at `nimblemcp._port`; one
legacy adapter serves stdio and HTTP; options are typed and the environment is read once;
registration follows one rule for tools, prompts, resources and templates."""

from __future__ import annotations

import ast
import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

import nimblemcp as m
from nimblemcp._port import Core, NoIO, Prepared
from nimblemcp.backends.memory import MemoryStore
from nimblemcp.server._dispatch import Dispatcher
from nimblemcp.server._options import Backends, ListenOptions, ServerSettings, StateOptions
from nimblemcp.serving import bare_asgi_app
from nimblemcp.transports._legacy import LegacySession
from nimblemcp.transports.http._asgi import (
    accepted,
    accepts_json,
    accepts_json_and_sse,
    accepts_sse,
)
from nimblemcp.transports.http.security import HttpSecurity, SecurityMiddleware, secure_app

SRC = Path(__file__).resolve().parents[1] / "src" / "nimblemcp"

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}
HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
           "mcp-method": "server/discover"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_transports_import_the_port_never_the_server() -> None:
    for path in sorted((SRC / "transports").glob("*.py")):
        bad = {n for n in _imports(path) if n == "nimblemcp.server" or n.startswith("nimblemcp.server.")}
        assert not bad, f"{path.name} imports {bad}"


def test_the_port_imports_only_low_layers() -> None:
    allowed = ("nimblemcp.types", "nimblemcp.jsonrpc", "nimblemcp.errors")
    for name in _imports(SRC / "_port.py"):
        if name.startswith("nimblemcp"):
            assert name.startswith(allowed), name


def test_server_is_the_core_with_no_extra_frame() -> None:
    server = m.Server("port")
    core: Core = server  # checked statically by mypy as well
    assert core.execute.__func__ is Dispatcher.run  # type: ignore[attr-defined]
    assert core.prepare.__func__ is Dispatcher.prepare  # type: ignore[attr-defined]
    assert core.tool_header_rules("nope") == ()
    assert list(core.describe()) == ["capabilities", "serverInfo"]
    assert m.Server("x", instructions="hi", listen=ListenOptions(enabled=False)).changes() is None


async def test_prepare_and_execute_through_the_port() -> None:
    server = m.Server("port")

    @server.tool
    async def add(a: int, b: int) -> int:
        return a + b

    req = server.prepare({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": META}})
    assert isinstance(req, Prepared) and (req.id, req.method) == (7, "tools/call")
    response = await server.execute(req, NoIO())
    assert response["id"] == 7 and response["result"]["structuredContent"] == {"result": 5}


# -- the legacy adapter ---------------------------------------------------------------------

def _legacy_server() -> m.Server:
    server = m.Server("legacy")

    @server.tool
    async def ask_name(ctx: m.Context) -> str:
        answer = await ctx.elicit("name", "Name?", {"type": "object", "properties": {"n": {"type": "string"}}})
        return f"hello {answer.content['n']}"

    @server.tool
    async def wait(ctx: m.Context) -> str:
        await asyncio.sleep(30)
        return "late"

    return server


def _request(rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


async def test_legacy_session_answers_own_methods_and_refuses_modern_only_ones() -> None:
    session = LegacySession(_legacy_server())
    result = session.initialize({"protocolVersion": "1999-01-01", "capabilities": {"elicitation": {}}})
    assert result["protocolVersion"] == "2025-11-25" and result["serverInfo"]["name"] == "legacy"
    assert session.prepare(_request(1, "ping")) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    refused = session.prepare(_request(2, "server/discover"))
    assert isinstance(refused, dict) and refused["error"]["code"] == -32601
    malformed = session.prepare({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": [1]})
    assert isinstance(malformed, dict) and malformed["error"]["code"] == -32602
    with pytest.raises(m.InvalidParams):
        LegacySession(_legacy_server()).initialize({"protocolVersion": "2025-11-25"})


async def test_legacy_session_back_channel_and_shaping() -> None:
    """LEG-09: a handler's question goes out through the request's sink as a request;
    the peer's answer resumes it; the result has the legacy shape (COMPAT-S07)."""
    session = LegacySession(_legacy_server())
    session.initialize({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}})
    req = session.prepare(_request(5, "tools/call", {"name": "ask_name"}))
    assert isinstance(req, Prepared)
    sent: list[dict[str, Any]] = []
    run = asyncio.ensure_future(session.run(req, sent.append))
    for _ in range(200):
        if sent:
            break
        await asyncio.sleep(0.005)
    question = sent[0]
    assert question["method"] == "elicitation/create" and question["id"] == "nimblemcp-1"
    session.answer({"jsonrpc": "2.0", "id": "nimblemcp-1", "result": {"action": "accept", "content": {"n": "Ada"}}})
    response = await run
    assert response["result"]["content"][0]["text"] == "hello Ada"
    assert "resultType" not in response["result"] and "_meta" not in response["result"]
    assert not session.pending and not session.requests


async def test_legacy_session_cancel_by_id_and_close() -> None:
    session = LegacySession(_legacy_server())
    session.initialize({"protocolVersion": "2025-11-25", "capabilities": {}})
    req = session.prepare(_request("w", "tools/call", {"name": "wait"}))
    assert isinstance(req, Prepared)
    run = asyncio.ensure_future(session.run(req, lambda _m: None))
    await asyncio.sleep(0.01)
    assert "w" in session.requests
    session.cancel({"requestId": "w"})
    with pytest.raises(asyncio.CancelledError):
        await run
    assert "w" in session.cancelled and not session.requests
    session.close()
    assert session.closed


async def test_legacy_session_forwards_changes_untagged() -> None:
    """LEG-12: list changes become untagged notifications while the session forwards."""
    server = _legacy_server()
    session = LegacySession(server)
    session.initialize({"protocolVersion": "2025-11-25", "capabilities": {}})
    changes = server.changes()
    assert changes is not None
    notes: list[dict[str, Any]] = []
    forward = asyncio.ensure_future(session.forward(changes, notes.append))
    server.add_tool(lambda: "x", name="fresh")
    for _ in range(200):
        if notes:
            break
        await asyncio.sleep(0.005)
    assert notes == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    server.close_listeners()
    await asyncio.wait_for(forward, 5)


# -- serving: guarded by default, bare on request ---------------------------------------------

async def _post(app: Any, origin: str | None = None) -> int:
    headers = dict(HEADERS) if origin is None else {**HEADERS, "origin": origin}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return (await client.post("/mcp", json=DISCOVER, headers=headers)).status_code


async def test_bare_asgi_app_has_no_guards_and_asgi_app_has() -> None:
    server = m.Server("serve")
    assert await _post(bare_asgi_app(server), "http://evil.example") == 200
    assert await _post(server.asgi_app(), "http://evil.example") == 403


async def test_http_security_options_object_and_a_replaced_copy() -> None:
    server = m.Server("serve")
    security = HttpSecurity(allowed_origins=("https://app.example",))
    app = secure_app(server, security=security)
    assert await _post(app, "https://app.example") == 200
    assert await _post(app, "https://other.example") == 403
    other = secure_app(server, security=replace(security, allowed_origins=["https://other.example"]))
    assert await _post(other, "https://other.example") == 200
    assert replace(security, allowed_origins=["https://other.example"]).allowed_origins == ("https://other.example",)
    assert HttpSecurity().override(max_body=None) == HttpSecurity()
    # The guard's fields have one spelling: HttpSecurity (issue 32, point 1).
    for build in (lambda: secure_app(server, max_body=10), lambda: server.asgi_app(allowed_hosts=["*"]),
                  lambda: SecurityMiddleware(secure_app(server), cors=True)):
        with pytest.raises(TypeError):
            build()


# -- options, and the environment read in one place -------------------------------------------

def test_each_option_has_one_spelling_its_group() -> None:
    """Issue 32: the option groups are the only spelling; the flat duplicates are gone."""
    server = m.Server("opts", state=StateOptions(ttl=5, one_time=True, handle_ttl=9, audience="aud"),
                      listen=ListenOptions(enabled=False, queue=3))
    assert server.state_options == StateOptions(ttl=5, one_time=True, audience="aud", handle_ttl=9)
    assert server.config.listen == ListenOptions(enabled=False, queue=3)
    assert (server.config.state_ttl, server.config.one_time_state, server.audience) == (5, True, "aud")
    grouped = m.Server("opts", state=StateOptions(ttl=7), listen=ListenOptions(queue=4))
    assert (grouped.config.state_ttl, grouped.config.listen.queue, grouped.subscriptions) == (7, 4, True)
    store = MemoryStore()
    assert m.Server("opts", backends=Backends(store=store)).store is store
    for flat in ("state_keys", "state_ttl", "one_time_state", "audience", "handle_ttl", "store", "bus",
                 "subscriptions", "listen_queue", "mask_errors"):
        with pytest.raises(TypeError, match=flat):
            m.Server("opts", **{flat: None})


def test_server_init_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIMBLEMCP_REDIS_URL", "memory://")
    monkeypatch.setenv("NIMBLEMCP_STATE_KEYS", "not-a-key")
    server = m.Server("env")
    assert server.backends == Backends() and server._state_keys is None
    assert ServerSettings.from_env() == ServerSettings(("not-a-key",), "memory://")


def test_settings_fill_in_only_what_the_code_did_not_give() -> None:
    key = "A" * 43
    settings = ServerSettings.from_env({"NIMBLEMCP_STATE_KEYS": f" {key} , ", "NIMBLEMCP_REDIS_URL": "memory://"})
    assert settings == ServerSettings((key,), "memory://")
    plain = m.Server("env")
    old_store, old_bus = plain.store, plain.bus
    settings.apply(plain)
    assert plain._state_keys == [key]
    assert plain.store is not old_store and plain.bus is not old_bus
    assert plain.handles.store is plain.store
    applied = plain.store
    settings.apply(plain)  # a second application changes nothing
    assert plain.store is applied
    store = MemoryStore()
    explicit = m.Server("env", state=StateOptions(keys=("B" * 43,)), backends=Backends(store=store))
    settings.apply(explicit)
    assert explicit._state_keys == ["B" * 43] and explicit.store is store
    assert ServerSettings.from_env({}) == ServerSettings()


# -- registration: one rule for every kind -------------------------------------------------------

def test_registration_is_consistent_across_kinds() -> None:
    server = m.Server("reg")

    def fn() -> str:
        return "x"

    def templ(name: str) -> str:
        return name

    assert server.tool(fn) is fn
    assert server.prompt(fn) is fn
    assert server.resource("file:///a")(fn) is fn
    assert server.resource("file:///t/{name}")(templ) is templ
    for register in (lambda: server.tool(fn), lambda: server.prompt(fn),
                     lambda: server.resource("file:///a")(fn),
                     lambda: server.resource("file:///t/{name}")(templ)):
        with pytest.raises(ValueError, match="already registered"):
            register()
    server.remove_tool("fn")
    server.remove_prompt("fn")
    server.remove_resource("file:///a")
    server.remove_template("file:///t/{name}")
    assert not (server.tools or server.prompts or server.resources or server.templates)
    with pytest.raises(KeyError):
        server.remove_template("file:///t/{name}")


# -- one way to run a handler, one Accept parser ------------------------------------------------

async def test_sync_prompts_and_resources_run_in_a_worker_thread() -> None:
    from nimblemcp.testing import connect

    server = m.Server("threads")
    seen: dict[str, int] = {}

    @server.prompt
    def greet(name: str) -> str:
        seen["prompt"] = threading.get_ident()
        return f"hi {name}"

    @server.resource("file:///r")
    def read() -> str:
        seen["resource"] = threading.get_ident()
        return "r"

    async with connect(server) as client:
        await client.request("prompts/get", {"name": "greet", "arguments": {"name": "x"}})
        await client.request("resources/read", {"uri": "file:///r"})
    loop_thread = threading.get_ident()
    assert seen["prompt"] != loop_thread and seen["resource"] != loop_thread


def test_one_accept_parser() -> None:
    assert accepted(b"Text/Event-Stream;q=0.5, application/json") == {b"text/event-stream", b"application/json"}
    assert accepts_sse(accepted(b"text/*")) and not accepts_json(accepted(b"text/*"))
    assert accepts_json(accepted(b"*/*")) and accepts_sse(accepted(b"*/*"))
    assert accepts_json_and_sse(b"application/json, text/event-stream")
    assert accepts_json_and_sse(b"application/*, text/*")
    assert not accepts_json_and_sse(b"application/json") and not accepts_json_and_sse(None)


def test_http_security_refuses_one_string_for_a_list() -> None:
    """`allowed_origins="https://a"` would allow each of its letters: refused, with the fix."""
    for name in ("allowed_origins", "allowed_hosts"):
        with pytest.raises(TypeError, match=r"list of strings"):
            HttpSecurity(**{name: "https://app.example"})
    assert HttpSecurity(allowed_hosts=["a.example"]).allowed_hosts == ("a.example",)
