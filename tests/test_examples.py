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
    assert [t["name"] for t in responses[2]["result"]["tools"]] == ["list_docs", "read_doc", "search_docs"]
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
