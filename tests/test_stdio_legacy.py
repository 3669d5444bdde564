"""The legacy (2025-11-25) leg over a real stdio subprocess (LEG-01..15, COMPAT-S01/S05/S07).

A desktop host that speaks the `initialize` handshake gets the same tools, resources
and prompts; MRTR questions arrive as real server-to-client requests; every message we
send validates against the 2025-11-25 schema.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = '''
import asyncio
import nimblemcp as m

server = m.Server("legacy-test", "1.0", instructions="Try the tools.")

@server.tool
def echo(text: str) -> str:
    return text

@server.tool
async def greet(ctx: m.Context) -> str:
    answer = await ctx.elicit("name", "Your name?", {"type": "object",
        "properties": {"name": {"type": "string"}}, "required": ["name"]})
    return f"Hello, {answer.content['name']}!" if answer.accepted else "no name"

@server.tool
async def everything(ctx: m.Context) -> str:
    reply, roots = ctx.gather(ctx.sample("q", ["Capital of France?"], 20), ctx.roots("r"))
    return f"{reply['content']['text']} / {roots[0]['uri']}"

@server.tool
async def chatty(ctx: m.Context) -> str:
    ctx.debug("debug line")
    ctx.warning("warning line")
    return "logged"

@server.tool
def add_tool(name: str) -> str:
    server.add_tool(lambda: "new", name=name)
    return "added"

@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return "touched"

@server.resource("test://doc")
def doc() -> str:
    return "doc text"

@server.prompt
def review(topic: str) -> str:
    return f"Review {topic}"
'''

CLIENT_CAPS = {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}}


class Peer:
    """A legacy client on the other end of the pipes: sends, reads, answers."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        self.seen: list[dict[str, Any]] = []

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def read(self, limit: float = 10.0) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            raise AssertionError("no message arrived") from None
        msg: dict[str, Any] = json.loads(line)
        self.seen.append(msg)
        return msg

    def seen_or_next(self, predicate: Any) -> dict[str, Any]:
        """A message already read that matches, else the next one that does."""
        for msg in self.seen:
            if predicate(msg):
                return msg
        return self.until(predicate)

    def until(self, predicate: Any) -> dict[str, Any]:
        while True:
            msg = self.read()
            if predicate(msg):
                return msg

    def call(self, rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            body["params"] = params
        self.send(body)
        return self.until(lambda m: m.get("id") == rid and "method" not in m)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.reader.join(timeout=10)
        self.proc.stdout.close()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    path = tmp_path / "legacy_server.py"
    path.write_text(SERVER)
    p = Peer(path)
    init = p.call(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": CLIENT_CAPS,
                                    "clientInfo": {"name": "legacy-host", "version": "1"}})
    assert init["result"]["protocolVersion"] == "2025-11-25"
    p.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield p
    p.close()


def test_leg_01_initialize_result(peer: Peer, legacy_schemas: Any) -> None:
    init = peer.seen[0]
    legacy_schemas.check("JSONRPCResultResponse", init)
    legacy_schemas.check("InitializeResult", init["result"])
    result = init["result"]
    assert result["serverInfo"]["name"] == "legacy-test"
    assert result["instructions"] == "Try the tools."
    assert {"tools", "resources", "prompts", "logging", "completions"} <= set(result["capabilities"])
    assert "resultType" not in result


@pytest.mark.parametrize(("requested", "answered"), [
    ("2025-06-18", "2025-06-18"), ("2026-07-28", "2025-11-25"), ("1999-01-01", "2025-11-25")])
def test_leg_01_version_negotiation(tmp_path: Path, requested: str, answered: str) -> None:
    """Echo a legacy version we speak; otherwise offer our newest legacy one, never a modern one."""
    path = tmp_path / "s.py"
    path.write_text(SERVER)
    p = Peer(path)
    try:
        init = p.call(1, "initialize", {"protocolVersion": requested, "capabilities": {},
                                        "clientInfo": {"name": "x", "version": "1"}})
        assert init["result"]["protocolVersion"] == answered
    finally:
        p.close()


def test_legacy_requests_without_meta_and_shaped_results(peer: Peer, legacy_schemas: Any) -> None:
    """LEG-10/15, COMPAT-S07: no resultType or cache hints; -32002 for a missing resource."""
    assert peer.call(1, "ping")["result"] == {}
    tools = peer.call(2, "tools/list")["result"]
    legacy_schemas.check("ListToolsResult", tools)
    assert "resultType" not in tools and "ttlMs" not in tools and "_meta" not in tools
    call = peer.call(3, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    legacy_schemas.check("CallToolResult", call["result"])
    assert call["result"]["content"][0]["text"] == "hi"
    read = peer.call(4, "resources/read", {"uri": "test://doc"})["result"]
    legacy_schemas.check("ReadResourceResult", read)
    missing = peer.call(5, "resources/read", {"uri": "test://nope"})
    assert missing["error"]["code"] == -32002 and missing["error"]["data"] == {"uri": "test://nope"}
    prompt = peer.call(6, "prompts/get", {"name": "review", "arguments": {"topic": "x"}})["result"]
    legacy_schemas.check("GetPromptResult", prompt)
    unknown = peer.call(7, "server/discover")  # modern-only without the envelope
    assert unknown["error"]["code"] == -32601
    for msg in peer.seen:
        legacy_schemas.check("JSONRPCMessage", msg)


def test_leg_09_elicitation_is_a_real_server_request(peer: Peer, legacy_schemas: Any) -> None:
    peer.send({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "greet"}})
    ask = peer.until(lambda m: m.get("method") == "elicitation/create")
    legacy_schemas.check("ElicitRequest", ask)
    assert isinstance(ask["id"], str) and ask["params"]["message"] == "Your name?"
    peer.send({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"name": "Ada"}}})
    done = peer.until(lambda m: m.get("id") == 10)
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"


def test_leg_09_several_questions_go_out_together(peer: Peer, legacy_schemas: Any) -> None:
    peer.send({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "everything"}})
    first = peer.until(lambda m: "method" in m and "id" in m)
    second = peer.until(lambda m: "method" in m and "id" in m)
    asks = {first["method"]: first, second["method"]: second}
    assert set(asks) == {"sampling/createMessage", "roots/list"}
    legacy_schemas.check("CreateMessageRequest", asks["sampling/createMessage"])
    peer.send({"jsonrpc": "2.0", "id": asks["roots/list"]["id"],
               "result": {"roots": [{"uri": "file:///work"}]}})
    peer.send({"jsonrpc": "2.0", "id": asks["sampling/createMessage"]["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}})
    done = peer.until(lambda m: m.get("id") == 11)
    assert done["result"]["content"][0]["text"] == "Paris / file:///work"


def test_leg_09_a_refusing_client_fails_the_call_and_the_server_goes_on(peer: Peer) -> None:
    peer.send({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "greet"}})
    ask = peer.until(lambda m: m.get("method") == "elicitation/create")
    peer.send({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "user closed"}})
    failed = peer.until(lambda m: m.get("id") == 12)
    assert failed["error"]["code"] == -32603 and "user closed" in failed["error"]["message"]
    assert peer.call(13, "ping")["result"] == {}


def test_leg_11_set_level_gates_session_logs(peer: Peer) -> None:
    assert peer.call(20, "logging/setLevel", {"level": "warning"})["result"] == {}
    peer.send({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "chatty"}})
    peer.until(lambda m: m.get("id") == 21)
    logs = [m["params"]["data"] for m in peer.seen if m.get("method") == "notifications/message"]
    assert logs == ["warning line"]
    bad = peer.call(22, "logging/setLevel", {"level": "loud"})
    assert bad["error"]["code"] == -32602


def test_leg_12_subscriptions_and_list_changes_are_untagged(peer: Peer, legacy_schemas: Any) -> None:
    assert peer.call(30, "resources/subscribe", {"uri": "test://doc"})["result"] == {}
    peer.call(31, "tools/call", {"name": "touch", "arguments": {"uri": "test://doc"}})
    updated = peer.seen_or_next(lambda m: m.get("method") == "notifications/resources/updated")
    legacy_schemas.check("ResourceUpdatedNotification", updated)
    assert updated["params"] == {"uri": "test://doc"}
    peer.call(32, "tools/call", {"name": "add_tool", "arguments": {"name": "fresh"}})
    changed = peer.seen_or_next(lambda m: m.get("method") == "notifications/tools/list_changed")
    assert "params" not in changed
    assert peer.call(33, "resources/unsubscribe", {"uri": "test://doc"})["result"] == {}


def test_compat_s01_modern_requests_still_work_on_the_same_connection(peer: Peer) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    found = peer.call(40, "server/discover", {"_meta": meta})
    assert found["result"]["supportedVersions"] == ["2026-07-28"]
    assert found["result"]["resultType"] == "complete"


def test_requests_before_initialize_still_need_the_envelope(tmp_path: Path) -> None:
    path = tmp_path / "s.py"
    path.write_text(SERVER)
    p = Peer(path)
    try:
        missing = p.call(1, "tools/list")
        assert missing["error"]["code"] == -32602
        bad_init = p.call(2, "initialize", {"capabilities": {}})
        assert bad_init["error"]["code"] == -32602
    finally:
        p.close()
