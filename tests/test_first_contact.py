"""A friendlier first contact (issue 14): a bare JSON-RPC line typed into a stdio server
is told what `_meta` must hold, and `scripts/demo --http` says how to call it."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "examples" / "docs_server" / "server.py"


def test_a_bare_json_rpc_line_is_shown_what_meta_holds() -> None:
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
                 "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}]
    out = subprocess.run([sys.executable, "-m", "nimblemcp", "run", str(DOCS)],
                         input="".join(json.dumps(line) + "\n" for line in lines),
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DOCS_WATCH": "0"})
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, 2, 3]
    for answer in answers:
        assert answer["error"]["code"] == -32602
        message = answer["error"]["message"]
        assert '"io.modelcontextprotocol/protocolVersion": "2026-07-28"' in message
        assert '"io.modelcontextprotocol/clientCapabilities": {}' in message
    # The example in the message is itself a request the server accepts.
    example = answers[0]["error"]["message"].split("e.g. ", 1)[1].rsplit(" (", 1)[0]
    params = json.loads("{" + example + "}")["params"]
    ok = subprocess.run([sys.executable, "-m", "nimblemcp", "run", str(DOCS)],
                        input=json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list",
                                          "params": params}) + "\n",
                        capture_output=True, text=True, timeout=60,
                        env={**os.environ, "DOCS_WATCH": "0"})
    assert "list_docs" in {t["name"] for t in json.loads(ok.stdout)["result"]["tools"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_http_says_how_to_call_it() -> None:
    port = _free_port()
    proc = subprocess.Popen([str(ROOT / "scripts" / "demo"), "--http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DOCS_WATCH": "0"}, start_new_session=True)
    assert proc.stderr is not None
    try:
        said = ""
        while "Ctrl-C" not in said:
            line = proc.stderr.readline()
            assert line, f"demo ended early: {said}"
            said += line
        url = f"http://127.0.0.1:{port}/mcp"
        assert f".venv/bin/nimblemcp tools {url}" in said
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, said
                time.sleep(0.1)
        # Each suggested command works as printed (run from the repository root).
        suggested = [line.strip() for line in said.splitlines() if line.startswith("  .venv/bin/")]
        assert len(suggested) == 3
        for command in suggested:
            words = shlex.split(command)
            words[0] = str(Path(sys.executable).parent / "nimblemcp")
            done = subprocess.run(words, capture_output=True, text=True, timeout=60, cwd=ROOT)
            assert done.returncode == 0, (command, done.stderr)
            assert done.stdout.strip()
    finally:
        os.killpg(proc.pid, 15)
        proc.communicate(timeout=20)
