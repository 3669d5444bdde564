"""Smoke tests for examples/: the docs server over a real stdio subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS_SERVER = ROOT / "examples" / "docs_server" / "server.py"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "examples-test", "version": "0"},
}


def _session(requests: list[tuple[str, dict[str, Any]]], *args: str) -> dict[int, dict[str, Any]]:
    """Send requests to a fresh stdio server, close stdin, return responses by id."""
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": {**p, "_meta": META}})
        for i, (m, p) in enumerate(requests, 1)
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "nimblemcp", "run", str(DOCS_SERVER), *args],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all(msg.get("jsonrpc") == "2.0" for msg in out), proc.stdout  # STDIO-02
    return {msg["id"]: msg for msg in out if "id" in msg}


def test_docs_server_tools_resources_prompt_over_stdio() -> None:
    responses = _session(
        [
            ("server/discover", {}),
            ("tools/list", {}),
            ("tools/call", {"name": "read_doc", "arguments": {"name": "brief.md"}}),
            ("tools/call", {"name": "read_doc", "arguments": {"name": "../server.py"}}),
            ("tools/call", {"name": "read_doc", "arguments": {"name": "missing.md"}}),
            ("tools/call", {"name": "search_docs", "arguments": {"query": "SRE"}}),
            ("resources/list", {}),
            ("resources/read", {"uri": "docs://risks.md"}),
            ("resources/read", {"uri": "docs://..%2Fserver.py"}),
            ("prompts/get", {"name": "review_brief"}),
        ]
    )
    caps = responses[1]["result"]["capabilities"]
    assert {"tools", "resources", "prompts"} <= set(caps)
    assert [t["name"] for t in responses[2]["result"]["tools"]] == [
        "list_docs", "read_doc", "search_docs", "start_review", "add_comment", "finish_review",
    ]
    brief = responses[3]["result"]
    assert "Harbor" in brief["content"][0]["text"] and not brief.get("isError")
    traversal = responses[4]["result"]
    assert traversal["isError"] is True and "Invalid document name" in traversal["content"][0]["text"]
    missing = responses[5]["result"]
    assert missing["isError"] is True and "brief.md" in missing["content"][0]["text"]
    hits = responses[6]["result"]["structuredContent"]["result"]
    assert any(h.startswith("risks.md:") for h in hits)
    uris = {r["uri"] for r in responses[7]["result"]["resources"]}
    assert uris == {"docs://brief.md", "docs://risks.md", "docs://glossary.md"}
    risks = responses[8]["result"]
    assert "deliverability" in risks["contents"][0]["text"] and risks["contents"][0]["mimeType"] == "text/markdown"
    assert responses[9]["error"]["code"] == -32602  # RES-08: traversal refused
    messages = responses[10]["result"]["messages"]
    assert messages[0]["content"]["type"] == "resource"
    assert "risks" in messages[-1]["content"]["text"]


def _read_until(proc: subprocess.Popen[str], predicate: Any, limit: float = 10.0) -> dict[str, Any]:
    """Read stdout lines until one satisfies `predicate`; fail after `limit` seconds.

    A reader thread feeds a queue: select() on a buffered pipe would miss lines that
    arrived in the same chunk.
    """
    import queue
    import threading

    lines: queue.Queue[str] = getattr(proc, "_lines", None) or queue.Queue()
    if not hasattr(proc, "_lines"):
        proc._lines = lines  # type: ignore[attr-defined]

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
    import time

    deadline = time.monotonic() + limit
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg: dict[str, Any] = json.loads(lines.get(timeout=left))
        except queue.Empty:
            break
        if predicate(msg):
            return msg
    raise AssertionError("expected message did not arrive")


def test_docs_server_listen_hears_edits_and_new_documents(tmp_path: Path) -> None:
    """SUB-02/05, RES-07: the example's folder watcher feeds subscriptions/listen (stdio)."""
    import shutil

    for doc in (DOCS_SERVER.parent / "docs").glob("*.md"):
        shutil.copy(doc, tmp_path / doc.name)
    env = {**__import__("os").environ, "DOCS_DIR": str(tmp_path), "DOCS_POLL_SECONDS": "0.1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimblemcp", "run", str(DOCS_SERVER)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    assert proc.stdin is not None

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    try:
        send({"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen", "params": {
            "_meta": META,
            "notifications": {"resourcesListChanged": True, "resourceSubscriptions": ["docs://brief.md"]},
        }})
        ack = _read_until(proc, lambda m: m.get("method") == "notifications/subscriptions/acknowledged")
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"
        (tmp_path / "brief.md").write_text("# changed\n", encoding="utf-8")
        updated = _read_until(proc, lambda m: m.get("method") == "notifications/resources/updated")
        assert updated["params"]["uri"] == "docs://brief.md"
        (tmp_path / "notes.md").write_text("# notes\n", encoding="utf-8")
        changed = _read_until(proc, lambda m: m.get("method") == "notifications/resources/list_changed")
        assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"
        send({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {"_meta": META}})
        listed = _read_until(proc, lambda m: m.get("id") == 2)
        assert "docs://notes.md" in {r["uri"] for r in listed["result"]["resources"]}
        # Cancelling the listen ends it without a response (SUB-08, CANC-03).
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L1"}})
        send({"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": META}})
        after = _read_until(proc, lambda m: "id" in m)
        assert after["id"] == 3
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


async def test_docs_server_review_session_with_confirmation(tmp_path: Path) -> None:
    """TOOL-14 + MRTR: handle flow and an elicitation answered by our Client over stdio."""
    from nimblemcp import Client
    from nimblemcp.transports.stdio.client import StdioTransport

    asked: list[dict[str, Any]] = []

    def confirm(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {}}  # the schema default (publish=True) fills in

    env = {"REVIEWS_DIR": str(tmp_path), "DOCS_WATCH": "0"}
    transport = StdioTransport(sys.executable, ["-m", "nimblemcp", "run", str(DOCS_SERVER)], env=env)
    async with Client(transport, on_elicit=confirm) as client:
        opened = await client.call_tool("start_review", {"document": "brief.md"})
        handle = opened["content"][0]["text"]
        bad = await client.call_tool("start_review", {"document": "../secrets"})
        assert bad["isError"] is True
        await client.call_tool("add_comment", {"review": handle, "comment": "No budget section."})
        done = await client.call_tool("finish_review", {"review": handle})
        assert done["content"][0]["text"].startswith("Published to brief-")
        assert "Publish 1 comment(s) on brief.md?" in asked[0]["message"]
        again = await client.call_tool("add_comment", {"review": handle, "comment": "late"})
        assert again["isError"] is True and "Unknown or expired handle" in again["content"][0]["text"]
    (published,) = tmp_path.glob("brief-*.md")
    assert "- No budget section." in published.read_text()
