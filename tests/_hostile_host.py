"""Hostile MCP servers for the host side (issue 37): a raw JSON-RPC stdio server driven
by a JSON spec, written into the test's folder and run as a real subprocess by a real
`ClientGroup` or the real CLI, and a raw HTTP server on loopback.

The stdio server speaks just enough 2026-07-28 to be connected (`server/discover`, the
four lists, `subscriptions/listen`, `tools/call`) and does what its spec says: answer
lists with whatever items it is given (malformed ones included), hand out endless
pages, flood a listen with `list_changed` notices, spray garbage on stdout, crash soon
after connecting, print control characters (results, logs, stderr), dump the
environment it was given. Each
start and each list request is appended to files in `marks/`, so a test counts them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

SID = "io.modelcontextprotocol/subscriptionId"

SOURCE = r'''
import json, os, sys, time

SPEC = json.load(open(sys.argv[1]))
MARKS = SPEC["marks"]
SID = "io.modelcontextprotocol/subscriptionId"
LIST_KEYS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
             "resources/templates/list": "resourceTemplates"}
started = time.monotonic()


def mark(name, text="x"):
    with open(os.path.join(MARKS, name), "a") as f:
        f.write(text + "\n")


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def answer(rid, result):
    send({"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", **result}})


def note(method, rid, params=None):
    send({"jsonrpc": "2.0", "method": method, "params": {**(params or {}), "_meta": {SID: rid}}})


mark("starts")
if SPEC.get("dump_env"):
    with open(os.path.join(MARKS, "env.json"), "w") as f:
        json.dump(dict(os.environ), f)


def garbage():
    chunk = ("garbage " * 4 + "\x1b[2J\n") * 1000
    for _ in range(SPEC["garbage_lines"] // 1000):
        sys.stdout.write(chunk)
    sys.stdout.flush()


if SPEC.get("stderr"):
    sys.stderr.write(SPEC["stderr"])
    sys.stderr.flush()
if SPEC.get("exit_at_once"):
    sys.exit(SPEC["exit_at_once"])

lists_served = 0
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if "id" not in msg or "method" not in msg:
        continue
    rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
    if method == "server/discover":
        answer(rid, {"supportedVersions": ["2026-07-28"],
                     "capabilities": SPEC.get("capabilities", {
                         "tools": {"listChanged": True}, "prompts": {"listChanged": True},
                         "resources": {"listChanged": True}}),
                     "serverInfo": {"name": SPEC.get("name", "hostile"), "version": "0"}})
        if SPEC.get("garbage_lines"):  # after the era probe's answer, before the lists
            garbage()
    elif method in LIST_KEYS:
        mark(method.replace("/", "_"))
        key = LIST_KEYS[method]
        if method in SPEC.get("endless", []):
            page = int(params.get("cursor") or 0)
            items = [{"name": f"t{page}_{i}", "uri": f"x://{page}/{i}", "inputSchema": {},
                      "description": "d" * SPEC.get("item_bytes", 10)} for i in range(10)]
            answer(rid, {key: items, "nextCursor": str(page + 1), "ttlMs": 0,
                         "cacheScope": "private"})
            continue
        if method in SPEC.get("hang_after_first", []) and lists_served:
            continue  # never answers a re-list
        lists_served += 1
        after = SPEC.get("after_notices", {}).get(method)
        got = after if after is not None and os.path.exists(os.path.join(MARKS, "noticed")) \
            else SPEC.get("lists", {}).get(method, [])
        answer(rid, {key: got, "ttlMs": 0, "cacheScope": "private"})
        if SPEC.get("logs") and method == "tools/list":  # outside any request
            time.sleep(0.2)
            for log in SPEC["logs"]:
                send({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": log}})
        if SPEC.get("exit_after") == method:
            sys.stdout.flush()
            time.sleep(SPEC.get("linger", 0.05))
            os._exit(3)
    elif method == "subscriptions/listen":
        wanted = params.get("notifications") or {}
        note("notifications/subscriptions/acknowledged", rid, {"notifications": wanted})
        if wanted.get("resourceSubscriptions") and SPEC.get("notices"):
            mark("noticed")
            for _ in range(SPEC["notices"]):
                note("notifications/tools/list_changed", rid)
            for uri in wanted["resourceSubscriptions"]:
                note("notifications/resources/updated", rid, {"uri": uri})
    elif method == "tools/call":
        text = SPEC.get("call_text", f"{SPEC.get('name', 'hostile')}:{params.get('name')}")
        answer(rid, {"content": [{"type": "text", "text": text}]})
    elif method == "resources/read":
        answer(rid, {"contents": [{"uri": params.get("uri"), "text": "x"}]})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no " + method}})
'''


class Hostile:
    """One hostile stdio server: its spec, its `mcp.json` entry and what it marked."""

    def __init__(self, folder: Path, name: str, **spec: Any) -> None:
        self.marks = folder / f"marks-{name}"
        self.marks.mkdir(parents=True, exist_ok=True)
        script = folder / "hostile_server.py"
        if not script.exists():
            script.write_text(SOURCE)
        self.spec_path = folder / f"spec-{name}.json"
        self.spec_path.write_text(json.dumps({"name": name, "marks": str(self.marks), **spec}))
        self.command = [sys.executable, str(script), str(self.spec_path)]

    @property
    def entry(self) -> dict[str, Any]:
        return {"command": self.command[0], "args": self.command[1:]}

    def count(self, what: str) -> int:
        path = self.marks / what
        return len(path.read_text().splitlines()) if path.exists() else 0

    def env(self) -> dict[str, str]:
        loaded: dict[str, str] = json.loads((self.marks / "env.json").read_text())
        return loaded


def write_config(folder: Path, servers: dict[str, Any]) -> Path:
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@asynccontextmanager
async def http_error_server(status: int, body: bytes) -> AsyncIterator[str]:
    """A loopback HTTP server that answers every request with `status` and `body`
    (text/plain): the URL of its `/mcp` endpoint."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            await reader.readexactly(length)
            writer.write(f"HTTP/1.1 {status} Oops\r\ncontent-type: text/plain\r\n"
                         f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.close()
        await server.wait_closed()
