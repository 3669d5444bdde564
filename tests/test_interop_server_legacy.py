"""Our stdio server against the official clients in their legacy (2025-11-25) mode.

The TypeScript client's default (`versionNegotiation` unset = 'legacy') and the Python SDK's
`mode="legacy"` open with `initialize`; the dual-era stdio transport then serves the same
handlers at 2025-11-25, where an MRTR question becomes a real server-to-client
`elicitation/create` request answered by the peer's request handler (LEG-*, COMPAT-S01).
The wire is recorded by `tee` around the server so the test can see which mechanism ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_interop_server_official import SERVERS, check_docs, check_target, run_peer, server_env


def teed(scenario: str, wire: Path) -> list[str]:
    """A stdio target whose traffic is copied to wire/{in,out}.jsonl."""
    script = 'i="$1"; o="$2"; shift 2; tee "$i" | "$@" | tee "$o"'
    return ["--", "sh", "-c", script, "sh", str(wire / "in.jsonl"), str(wire / "out.jsonl"),
            sys.executable, "-m", "nimblemcp", "run", str(SERVERS[scenario])]


def messages(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("peer", ["python", "ts"])
def test_legacy_client_over_stdio(peer: str, tmp_path: Path) -> None:
    out = run_peer(peer, "legacy", "target", teed("target", tmp_path), server_env(tmp_path))
    assert out["protocol_version"] == "2025-11-25", out
    check_target(out, lossy_progress=peer == "ts")

    sent = messages(tmp_path / "in.jsonl")
    received = messages(tmp_path / "out.jsonl")
    assert sent[0]["method"] == "initialize"
    assert received[0]["result"]["protocolVersion"] == "2025-11-25"
    assert received[0]["result"]["serverInfo"]["name"] == "interop-target"
    assert not any(m.get("method") == "server/discover" for m in sent)
    # The elicitation went out as a server-to-client request and came back as its response.
    asks = [m for m in received if m.get("method") == "elicitation/create"]
    assert len(asks) == 1 and "id" in asks[0], asks
    answers = [m for m in sent if m.get("id") == asks[0]["id"] and "result" in m]
    assert answers and answers[0]["result"]["content"] == {"colour": "teal"}
    # No 2026-07-28 shapes leak into the legacy session.
    results = [m["result"] for m in received if "result" in m]
    assert not any("resultType" in r or "inputRequests" in r for r in results)


@pytest.mark.parametrize("peer", ["python", "ts"])
def test_legacy_client_runs_the_docs_review(peer: str, tmp_path: Path) -> None:
    out = run_peer(peer, "legacy", "docs", teed("docs", tmp_path), server_env(tmp_path))
    assert out["protocol_version"] == "2025-11-25", out
    check_docs(out, tmp_path / "reviews")
    received = messages(tmp_path / "out.jsonl")
    assert [m["params"]["requestedSchema"]["required"] for m in received
            if m.get("method") == "elicitation/create"] == [["publish"]]
