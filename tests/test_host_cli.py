"""The host commands over an `mcp.json` (issue 16), run as a real process:
`python -m nimblemcp.host tools|call|listen --config FILE` (the logic the `nimblemcp`
CLI hands `--config` commands to)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS_SERVER = ROOT / "examples" / "docs_server" / "server.py"


def _config(tmp_path: Path, docs_dir: Path | None = None) -> Path:
    docs: dict[str, object] = {"command": sys.executable,
                               "args": ["-m", "nimblemcp", "run", str(DOCS_SERVER)]}
    if docs_dir is not None:
        docs["env"] = {"DOCS_DIR": str(docs_dir), "DOCS_POLL_SECONDS": "0.1"}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "docs": docs, "broken": {"command": str(tmp_path / "missing-server")}}}))
    return path


def _host(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp.host", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_tools_lists_every_server_with_its_status(tmp_path: Path) -> None:
    config = _config(tmp_path)
    done = _host("tools", "--config", str(config))
    assert done.returncode == 1, done.stderr  # one server failed
    lines = done.stdout.splitlines()
    assert lines[0] == "docs  [connected]"
    assert "  docs.read_doc  - Read one project document." in lines
    assert any(line.startswith("broken  [failed]  TransportError: cannot start") for line in lines)
    as_json = json.loads(_host("tools", "--config", str(config), "--json").stdout)
    assert as_json["broken"]["status"] == "failed" and as_json["broken"]["tools"] == []
    assert [t["name"] for t in as_json["docs"]["tools"]][:2] == ["docs__list_docs", "docs__read_doc"]


def test_call_routes_server_dot_tool_and_asks_before_risky_tools(tmp_path: Path) -> None:
    config = _config(tmp_path)
    done = _host("call", "--config", str(config), "docs.read_doc", "--arg", "name=brief.md")
    assert done.returncode == 0, done.stderr
    assert "Harbor" in done.stdout
    refused = _host("call", "--config", str(config), "docs.start_review",
                    "--arg", "document=brief.md", stdin="n\n")
    assert refused.returncode == 1
    assert "docs wants to run start_review" in refused.stderr and "user declined" in refused.stderr
    allowed = _host("call", "--config", str(config), "docs.start_review",
                    "--arg", "document=brief.md", stdin="y\n")
    assert allowed.returncode == 0 and allowed.stdout.strip(), allowed.stderr
    assert _host("call", "--config", str(config), "docs.start_review", "--yes",
                 "--args", '{"document": "brief.md"}').returncode == 0
    down = _host("call", "--config", str(config), "broken.anything")
    assert down.returncode == 1 and "broken" in down.stdout + down.stderr
    bad = _host("tools", "--config", str(tmp_path / "nope.json"))
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_listen_prints_merged_events(tmp_path: Path) -> None:
    docs_dir = tmp_path / "docs"
    shutil.copytree(DOCS_SERVER.parent / "docs", docs_dir)
    config = _config(tmp_path, docs_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimblemcp.host", "listen", "--config", str(config),
         "--resource", "docs://brief.md", "--seconds", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline().rstrip("\n")
            seen.append(line)
            if line == "docs  subscribed docs://brief.md":  # acknowledged by the server
                with open(docs_dir / "brief.md", "a", encoding="utf-8") as fh:
                    fh.write("\nedited\n")
            if line == "docs  resource_updated docs://brief.md":
                break
        assert "docs  resource_updated docs://brief.md" in seen, seen
        assert any(s.startswith("broken  status failed") for s in seen), seen
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_nimblemcp_cli_hands_config_commands_to_the_host(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"servers": {"docs": {  # VS Code shape, with a variable
        "type": "stdio", "command": "${python}", "args": ["-m", "nimblemcp", "run", str(DOCS_SERVER)]}}}))
    done = subprocess.run(
        [sys.executable, "-m", "nimblemcp", "call", "--config", str(path), "--var",
         f"python={sys.executable}", "docs.search_docs", "--arg", "query=Dana"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "brief.md:" in done.stdout and "Dana" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "nimblemcp", "tools", "--config", str(path)],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "${python} is not set" in missing.stderr
