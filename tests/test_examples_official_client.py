"""Issue 19 acceptance: the examples reached by the official `mcp` Python client (2.3.0),
over real stdio and real HTTP (`nimblemcp run`), in both eras."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _peers import INTEROP, ROOT, free_port, mcp_python, running

EXAMPLES = {
    "notes_sqlite": ROOT / "examples" / "notes_sqlite" / "server.py",
    "middleware": ROOT / "examples" / "middleware" / "server.py",
    "composition": ROOT / "examples" / "composition" / "server.py",
}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {"NOTES_DB": str(tmp_path / "notes.db")}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@contextmanager
def _target(transport: str, example: str, env: dict[str, str]) -> Iterator[list[str]]:
    if transport == "stdio":
        yield ["--", sys.executable, "-m", "nimblemcp", "run", str(EXAMPLES[example])]
        return
    port = free_port()
    cmd = [sys.executable, "-m", "nimblemcp", "run", str(EXAMPLES[example]), "--transport", "http",
           "--port", str(port)]
    with running(cmd, port, f"nimblemcp {example} example", env):
        yield [f"http://127.0.0.1:{port}/mcp"]


def _drive(mode: str, example: str, target: list[str], env: dict[str, str]) -> dict[str, Any]:
    peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    peer_env["INTEROP_SERVER_ENV"] = json.dumps(env)
    done = subprocess.run([str(mcp_python()), str(INTEROP / "sdk_framework_client.py"), mode, example, *target],
                          capture_output=True, text=True, timeout=180, env=peer_env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"official client failed:\n{done.stdout}\n{done.stderr}"
    out: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in out, out["error"]
    return out


def _text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_examples_with_the_official_client(tmp_path: Path, example: str, transport: str, mode: str) -> None:
    env = _env(tmp_path)
    with _target(transport, example, env) as target:
        out = _drive(mode, example, target, env)
    if example == "notes_sqlite":
        assert out["tools"] == ["add_note", "check_url", "search_notes"]
        assert out["add_note_args"] == ["body", "title"]
        assert out["add"].get("isError") is not True, out["add"]
        assert _text(out["search"]) == '{"result":["sdk"]}'
        assert out["read"]["contents"][0]["text"] == "from the official client"
    elif example == "middleware":
        assert out["tools"] == ["add", "clear", "stats"]
        assert _text(out["add"]) == "{\"result\":1}"
        assert '"tools/call"' in _text(out["stats"])
    else:
        assert out["tools"] == ["about", "calc_add_numbers", "notes_add"]
        assert _text(out["sum"]) == "{\"result\":3.0}"
        assert out["memo"]["contents"][0]["text"] == "ship the release"
