"""The Client's era detection and 2025-11-25 fallback over real wires (COMPAT-C02/C04/C06,
LEGC-01..03/05/07, MAP-07/09).

Peers: our own dual-era server over stdio (a subprocess) and over HTTP (uvicorn), and a
small legacy-only stdio peer that knows nothing of `server/discover` (it answers -32601
or stays silent before `initialize`, as real 2025 servers do). stdio traffic is recorded
by `tee` around the server so the tests see the wire.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _serving import HeaderRecorder, serving

import nimblemcp as m
from nimblemcp.client import Client, RetryPolicy
from nimblemcp.transports.http.app import asgi_app

SERVER = '''
import nimblemcp as m

server = m.Server("legacy-client-test", "1.0", instructions="Be kind.")

@server.tool
def add(a: int, b: int) -> str:
    return str(a + b)

@server.tool
async def greet(ctx: m.Context) -> str:
    answer = await ctx.elicit("who", "Your name?", {"type": "object", "properties": {
        "name": {"type": "string"}, "mood": {"type": "string", "default": "calm"}},
        "required": ["name"]})
    c = answer.content or {}
    return f"{c.get('name')} is {c.get('mood')}" if answer.accepted else "declined"

@server.tool
async def everything(ctx: m.Context) -> str:
    reply, roots = ctx.gather(ctx.sample("q", ["Capital of France?"], 20), ctx.roots("r"))
    return f"{reply['content']['text']} / {roots[0]['uri']}"

if __name__ == "__main__":
    server.run()
'''

LEGACY_ONLY = '''
import json, sys

mode = sys.argv[1]
ready = False
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    out = None
    if method == "initialize":
        ready = True
        out = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
               "serverInfo": {"name": "legacy-only", "version": "1"}}
    elif not ready:
        if mode == "silent" or rid is None:
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": rid,
                          "error": {"code": -32601, "message": "not initialized"}}), flush=True)
        continue
    elif method == "tools/list":
        out = {"tools": [{"name": "add", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        a = msg["params"]["arguments"]
        out = {"content": [{"type": "text", "text": str(a["a"] + a["b"])}]}
    elif method == "resources/read":
        print(json.dumps({"jsonrpc": "2.0", "id": rid, "error": {
            "code": -32002, "message": "Resource not found"}}), flush=True)
        continue
    if rid is not None and out is not None:
        print(json.dumps({"jsonrpc": "2.0", "id": rid, "result": out}), flush=True)
'''


def teed(wire: Path, *command: str) -> list[str]:
    script = 'i="$1"; o="$2"; shift 2; tee "$i" | "$@" | tee "$o"'
    return ["sh", "-c", script, "sh", str(wire / "in.jsonl"), str(wire / "out.jsonl"), *command]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def answer_name(params: dict[str, Any]) -> dict[str, Any]:
    return {"name": "Ada"}  # "mood" is left out: the schema default fills it


def callbacks() -> dict[str, Any]:
    return {
        "on_elicit": answer_name,
        "on_sample": lambda p: "Paris",
        "on_roots": lambda p: [{"uri": "file:///work", "name": "work"}],
    }


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


async def test_forced_legacy_over_stdio_uses_the_handshake_and_the_same_callbacks(
    server_script: Path, tmp_path: Path
) -> None:
    """LEGC-01/03/07: initialize, initialized, no modern envelope; the server's own
    requests are answered by the MRTR callbacks; listen maps onto the legacy session."""
    target = teed(tmp_path, sys.executable, str(server_script))
    async with Client(target, mode="legacy", **callbacks()) as client:
        assert (await client.call_tool("add", {"a": 2, "b": 3}))["content"][0]["text"] == "5"
        assert client.era == "legacy" and client.version == "2025-11-25"
        greeted = await client.call_tool("greet", {})
        assert greeted["content"][0]["text"] == "Ada is calm"
        both = await client.call_tool("everything", {})
        assert both["content"][0]["text"] == "Paris / file:///work"
        found = await client.discover()
        assert found["supportedVersions"] == ["2025-11-25"]
        assert found["serverInfo"]["name"] == "legacy-client-test"
        assert found["instructions"] == "Be kind."
        async with client.listen(tools=True) as events:  # LEGC-05
            assert (await events.next()).kind == "acknowledged"
            assert events.acknowledged == {"toolsListChanged": True}
    sent, received = lines(tmp_path / "in.jsonl"), lines(tmp_path / "out.jsonl")
    assert [x.get("method") for x in sent[:2]] == ["initialize", "notifications/initialized"]
    init = sent[0]["params"]
    assert init["protocolVersion"] == "2025-11-25"
    assert init["capabilities"] == {"elicitation": {"form": {}}, "sampling": {},
                                    "roots": {"listChanged": True}}
    assert not any(x.get("method") == "server/discover" for x in sent)
    requests = [x for x in sent if "method" in x and "id" in x]
    assert not any("io.modelcontextprotocol/protocolVersion" in (x.get("params") or {}).get(
        "_meta", {}) for x in requests)
    asked = {x["method"]: x["id"] for x in received if "method" in x and "id" in x}
    assert set(asked) == {"elicitation/create", "sampling/createMessage", "roots/list"}
    answered = {x["id"]: x["result"] for x in sent if "result" in x}
    assert answered[asked["elicitation/create"]] == {
        "action": "accept", "content": {"name": "Ada", "mood": "calm"}}
    assert answered[asked["roots/list"]]["roots"][0]["uri"] == "file:///work"


async def test_auto_against_a_modern_server_probes_once(server_script: Path, tmp_path: Path) -> None:
    """COMPAT-C02/C04: one server/discover before anything else; discover() reuses it."""
    target = teed(tmp_path, sys.executable, str(server_script))
    async with Client(target) as client:
        found = await client.discover()
        assert client.era == "modern" and "2026-07-28" in found["supportedVersions"]
        await client.list_tools()
        await client.discover()  # cached era and result: no second probe
    methods = [x.get("method") for x in lines(tmp_path / "in.jsonl") if "method" in x]
    assert methods[0] == "server/discover" and "initialize" not in methods
    assert methods.count("server/discover") <= 2


@pytest.mark.parametrize("behaviour", ["error", "silent"])
async def test_auto_falls_back_for_a_legacy_only_peer(behaviour: str, tmp_path: Path) -> None:
    """COMPAT-C02/C06: -32601 or silence for the probe => initialize; nothing but the
    probe precedes it (no cancellation of the probe, LEGC-01); -32002 is not-found."""
    peer = tmp_path / "legacy_only.py"
    peer.write_text(LEGACY_ONLY)
    target = teed(tmp_path, sys.executable, str(peer), behaviour)
    async with Client(target, retry_policy=RetryPolicy(probe_timeout=0.5)) as client:
        assert (await client.call_tool("add", {"a": 4, "b": 5}))["content"][0]["text"] == "9"
        assert client.era == "legacy" and client.server_info == {"name": "legacy-only",
                                                                  "version": "1"}
        with pytest.raises(m.errors.ResourceNotFound):
            await client.read_resource("docs://missing")
    methods = [x.get("method") for x in lines(tmp_path / "in.jsonl")]
    assert methods[:3] == ["server/discover", "initialize", "notifications/initialized"]
    assert "notifications/cancelled" not in methods


def build_http_server() -> m.Server:
    server = m.Server("legacy-http-test", "1.0")

    @server.tool
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool
    async def greet(ctx: m.Context) -> str:
        answer = await ctx.elicit("who", "Your name?", {"type": "object", "properties": {
            "name": {"type": "string"}, "mood": {"type": "string", "default": "calm"}},
            "required": ["name"]})
        c = answer.content or {}
        return f"{c.get('name')} is {c.get('mood')}" if answer.accepted else "declined"

    return server


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, HeaderRecorder]]:
    recorder = HeaderRecorder(asgi_app(build_http_server()))
    async with serving(recorder) as base:
        yield f"{base}/mcp", recorder


async def test_legacy_http_session(served: tuple[str, HeaderRecorder]) -> None:
    """LEGC-02/03: session id and version on every later request, elicitation answered
    by a POSTed response, DELETE at close."""
    url, recorder = served
    async with Client(url, mode="legacy", **callbacks()) as client:
        assert (await client.call_tool("add", {"a": 1, "b": 2}))["content"][0]["text"] == "3"
        assert (await client.call_tool("greet", {}))["content"][0]["text"] == "Ada is calm"
        session = client.transport.session_id  # type: ignore[attr-defined]
        assert isinstance(session, str) and session
    assert client.transport.session_id is None  # type: ignore[attr-defined]
    posts = [h for method, h in recorder.seen if method == "POST"]
    assert "mcp-session-id" not in posts[0]
    for headers in posts[1:]:
        assert headers["mcp-session-id"] == session
        assert headers["mcp-protocol-version"] == "2025-11-25"
    assert ("DELETE", session) in [(method, h.get("mcp-session-id")) for method, h in recorder.seen]


async def test_auto_over_http_settles_modern_for_our_server(served: tuple[str, HeaderRecorder]) -> None:
    url, recorder = served
    async with Client(url) as client:
        assert (await client.call_tool("add", {"a": 1, "b": 1}))["content"][0]["text"] == "2"
        assert client.era == "modern"
    assert not any("mcp-session-id" in h for _, h in recorder.seen)
