"""Our server against the official clients in their modern (2026-07-28) mode.

Peers: the Python SDK `mcp` 2.3.0 `Client` (mode="auto": probes `server/discover`, falls
back to `initialize`) and the TypeScript `@modelcontextprotocol/client` 2.4.0
(`versionNegotiation: {mode: "auto"}`; on stdio it probes in a sibling process first).
Each drives a real nimblemcp server, over stdio (the peer spawns
`python -m nimblemcp run ...`) and over Streamable HTTP (a real uvicorn subprocess), through
the scripts in tests/interop/, which print one JSON object of results (VER-01, RT-02,
TOOL-04, MRTR elicitation, PROG-02, completion, resources and templates, prompts).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _peers import INTEROP, ROOT, free_port, mcp_python, node, running, ts_client_modules

SERVERS = {
    "target": INTEROP / "nimble_server.py",
    "docs": ROOT / "examples" / "docs_server" / "server.py",
}


def server_env(tmp_path: Path) -> dict[str, str]:
    env = {"DOCS_WATCH": "0", "REVIEWS_DIR": str(tmp_path / "reviews")}
    if os.environ.get("PYTHONPATH"):  # the server imports nimblemcp as the tests do
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def run_peer(peer: str, mode: str, scenario: str, target: list[str],
             env: dict[str, str]) -> dict[str, Any]:
    """Run one peer script against a target (a URL, or `--` and a command); its JSON."""
    peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    peer_env["INTEROP_SERVER_ENV"] = json.dumps(env)
    if peer == "python":
        cmd = [str(mcp_python()), str(INTEROP / "sdk_client.py")]
    else:
        peer_env["INTEROP_NODE_MODULES"] = str(ts_client_modules())
        cmd = [node(), str(INTEROP / "ts_client.mjs")]
    done = subprocess.run([*cmd, mode, scenario, *target], capture_output=True, text=True,
                          timeout=180, env=peer_env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"{peer} peer failed:\n{done.stdout}\n{done.stderr}"
    out: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in out, f"{peer} peer: {out['error']}"
    return out


@contextmanager
def http_server(scenario: str, env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "nimblemcp", "run", str(SERVERS[scenario]),
           "--transport", "http", "--port", str(port)]
    with running(cmd, port, f"nimblemcp {scenario} server", env):
        yield f"http://127.0.0.1:{port}/mcp"


@contextmanager
def target_for(transport: str, scenario: str, env: dict[str, str]) -> Iterator[list[str]]:
    if transport == "stdio":
        yield ["--", sys.executable, "-m", "nimblemcp", "run", str(SERVERS[scenario])]
    else:
        with http_server(scenario, env) as url:
            yield [url]


def texts(result: Any) -> list[str]:
    assert isinstance(result, dict) and "error" not in result, result
    return [block.get("text") for block in result["content"]]


def check_target(out: dict[str, Any], lossy_progress: bool) -> None:
    assert out["server_name"] == "interop-target"
    assert out["tools"] == ["add", "ask_colour", "fail", "slow_count", "weather"]
    assert out["add"]["structuredContent"] == {"result": 42}, out["add"]
    assert out["add"].get("isError") is not True
    assert out["weather"]["structuredContent"] == {"city": "Lisbon", "celsius": 21.5}
    assert json.loads(texts(out["weather"])[0]) == {"city": "Lisbon", "celsius": 21.5}
    assert texts(out["slow_count"]) == ["counted to 3"]
    expected = [[1, 3, "step 1"], [2, 3, "step 2"], [3, 3, "step 3"]]
    if lossy_progress:
        # The TypeScript client runs notification handlers in a microtask but settles the
        # response synchronously, dropping its progress handler first: progress read in the
        # same chunk as the response is lost (client 2.4.0; the server sent all three, in
        # order, before the result). What does arrive must be exact and in order.
        assert out["progress"] == expected[: len(out["progress"])], out["progress"]
    else:
        assert out["progress"] == expected
    # MRTR: input_required, answered by the peer's elicitation callback, retried.
    assert texts(out["ask_colour"]) == ["colour=teal"]
    assert out["fail"]["isError"] is True and texts(out["fail"]) == ["nope"]
    assert out["resources"] == ["notes://readme"]
    assert out["templates"] == ["notes://topics/{topic}"]
    assert out["readme"]["contents"] == [
        {"uri": "notes://readme", "mimeType": "text/plain", "text": "read me first"}]
    assert out["topic"]["contents"][0]["text"] == "note about alpha"
    assert out["prompts"] == ["review"]
    assert [m["content"]["text"] for m in out["prompt"]["messages"]] == ["Review beta", "Sure."]
    assert out["complete_prompt"]["completion"]["values"] == ["alpha", "almond"]
    assert out["complete_template"]["completion"]["values"] == ["beta"]


def check_docs(out: dict[str, Any], reviews: Path) -> None:
    assert out["server_name"] == "project-docs"
    assert out["tools"] == ["add_comment", "finish_review", "list_docs", "read_doc",
                            "search_docs", "start_review"]
    assert out["list_docs"]["structuredContent"] == {
        "result": ["brief.md", "glossary.md", "risks.md"]}
    assert texts(out["read_doc"])[0].startswith("# Project brief")
    assert out["templates"] == ["docs://{name}"]
    assert out["document"]["contents"][0]["text"].startswith("# Project brief")
    assert out["prompt"]["messages"][0]["content"]["resource"]["uri"] == "docs://brief.md"
    assert texts(out["add_comment"]) == ["1 comment(s) on brief.md"]
    # finish_review asks the user (elicitation through MRTR) before publishing.
    published = texts(out["finish_review"])[0]
    assert published.startswith("Published to "), out["finish_review"]
    written = reviews / published.removeprefix("Published to ")
    assert written.read_text().splitlines()[-1] == "- Add a budget."


@pytest.mark.parametrize("scenario", ["target", "docs"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("peer", ["python", "ts"])
def test_official_client_in_auto_mode(peer: str, transport: str, scenario: str,
                                      tmp_path: Path) -> None:
    env = server_env(tmp_path)
    with target_for(transport, scenario, env) as target:
        out = run_peer(peer, "auto", scenario, target, env)
    assert out["protocol_version"] == "2026-07-28", out
    if scenario == "target":
        check_target(out, lossy_progress=peer == "ts")
    else:
        check_docs(out, tmp_path / "reviews")


def test_python_sdk_sees_the_output_schema(tmp_path: Path) -> None:
    env = server_env(tmp_path)
    with target_for("http", "target", env) as target:
        out = run_peer("python", "auto", "target", target, env)
    assert out["weather_tool"]["outputSchema"]["properties"] == {
        "city": {"type": "string"}, "celsius": {"type": "number"}}


def test_typescript_client_pinned_to_2026_07_28(tmp_path: Path) -> None:
    env = server_env(tmp_path)
    with target_for("http", "target", env) as target:
        out = run_peer("ts", "2026-07-28", "target", target, env)
    assert out["protocol_version"] == "2026-07-28"
    check_target(out, lossy_progress=True)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("peer", ["python", "ts"])
def test_official_client_listens(peer: str, transport: str, tmp_path: Path) -> None:
    """subscriptions/listen (SUB-04/05): the docs example watches its folder; editing a
    document reaches a subscriber as resources/updated, adding one as list_changed."""
    docs = tmp_path / "docs"
    shutil.copytree(SERVERS["docs"].parent / "docs", docs)
    env = {**server_env(tmp_path), "DOCS_WATCH": "1", "DOCS_DIR": str(docs),
           "DOCS_POLL_SECONDS": "0.1"}
    with target_for(transport, "docs", env) as target:
        out = run_peer(peer, "auto", "listen", target, env)
    assert out["honored"] == {"resourcesListChanged": True,
                              "resourceSubscriptions": ["docs://brief.md"]}
    kinds = [kind for kind, _ in out["events"]]
    assert out["events"][0][1] == "docs://brief.md" and len(kinds) == 2, out["events"]
    assert "docs://added.md" in out["resources"]


@pytest.mark.parametrize("peer", ["python", "ts"])
def test_legacy_client_over_http_is_told_the_supported_versions(peer: str, tmp_path: Path) -> None:
    """A modern-only HTTP server answers a legacy client's `initialize` with -32022 naming
    the versions it speaks, its only diagnostic (COMPAT-S02), not "params._meta is required"."""
    port = free_port()
    cmd = [sys.executable, str(INTEROP / "modern_only_http.py"), str(port)]
    with running(cmd, port, "modern-only server", server_env(tmp_path)):
        target = [f"http://127.0.0.1:{port}/mcp"]
        peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if peer == "python":
            cmd = [str(mcp_python()), str(INTEROP / "sdk_client.py")]
        else:
            peer_env["INTEROP_NODE_MODULES"] = str(ts_client_modules())
            cmd = [node(), str(INTEROP / "ts_client.mjs")]
        done = subprocess.run([*cmd, "legacy", "target", *target], capture_output=True,
                              text=True, timeout=180, env=peer_env)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "protocol_version" not in out, out
    assert "params._meta is required" not in out["error"], out["error"][-1500:]
    if peer == "python":
        assert out["error_code"] == -32022, out
        assert out["error_data"]["supported"] == ["2026-07-28"]
        assert out["error_data"]["requested"] == "2025-11-25"
    else:  # the TypeScript client quotes the response body
        assert '"code":-32022' in out["error"] and '"supported":["2026-07-28"]' in out["error"]
