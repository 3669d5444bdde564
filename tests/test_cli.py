"""`nimblemcp run` loads a server from a file, `file.py:obj`, or a module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nimblemcp.cli import load_server

SRC = '''
import nimblemcp as m
server = m.Server("cli-{tag}")
other = m.Server("other-{tag}")
def make():
    return m.Server("made-{tag}")
not_a_server = 42
'''

DISCOVER = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {}}}}) + "\n"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", "run", *args], input=DISCOVER,
                          capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.mark.parametrize(("target", "name"), [
    ("srv.py", "cli-a"),
    ("srv.py:other", "other-a"),
    ("srv.py:make", "made-a"),
    ("climod_b", "cli-b"),
    ("climod_b:other", "other-b"),
])
def test_run_targets(tmp_path: Path, target: str, name: str) -> None:
    (tmp_path / "srv.py").write_text(SRC.format(tag="a"))
    (tmp_path / "climod_b.py").write_text(SRC.format(tag="b"))
    proc = run([target], tmp_path)
    assert proc.returncode == 0, proc.stderr
    response = json.loads(proc.stdout.splitlines()[0])
    assert response["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == name


@pytest.mark.parametrize(("target", "fragment"), [
    ("missing.py", "no such file"),
    ("srv.py:not_a_server", "not a nimblemcp Server"),
    ("srv.py:absent", "no attribute"),
    ("empty.py", "name the server object"),
])
def test_run_errors_are_clear(tmp_path: Path, target: str, fragment: str) -> None:
    (tmp_path / "srv.py").write_text(SRC.format(tag="a"))
    (tmp_path / "empty.py").write_text("x = 1\n")
    proc = run([target], tmp_path)
    assert proc.returncode != 0
    assert fragment in proc.stderr
    assert proc.stdout == ""


def test_load_server_in_process(tmp_path: Path) -> None:
    (tmp_path / "one.py").write_text("import nimblemcp as m\nthe_only = m.Server('solo')\n")
    assert load_server(str(tmp_path / "one.py")).name == "solo"
