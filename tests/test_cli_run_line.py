"""`nimblemcp run`'s command line and what a run imports: the run parser is built from
the one table of options; an HTTP server started by the CLI prints the settings it was
given and loads neither the client nor the store Protocol; every public name resolves;
the backend selection builds no store Protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import nimblemcp
from nimblemcp.cli._parsers import parse
from nimblemcp.cli._run_options import OPTIONS

SERVER = textwrap.dedent("""
    import atexit, json, sys

    from nimblemcp import Server

    server = Server("run-line", "1.0.0")

    @server.tool
    def echo(text: str) -> str:
        return text

    def report() -> None:
        print(json.dumps(sorted(sys.modules)), file=sys.stderr, flush=True)

    atexit.register(report)
""")

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}
DISCOVER = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}}

NOT_AT_START = {"nimblemcp.client", "nimblemcp.backends._store"}


def test_the_run_parser_is_built_from_the_options_table() -> None:
    parser = argparse.ArgumentParser(prog="nimblemcp run")
    from nimblemcp.cli.run import add_arguments

    add_arguments(parser)
    given = {opt for action in parser._actions for opt in action.option_strings}
    listed = {flag for flag, _ in OPTIONS}
    assert listed <= given
    assert given - listed == {"-h", "--help", "--no-proxy-headers", "--no-legacy-sse", "-v"}
    assert parse(["run", "srv.py", "--legacy-sse"]).legacy_sse is True


def _spawn_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _discover_when_listening(port: int, proc: subprocess.Popen[str]) -> dict[str, Any]:
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "server/discover"}
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = httpx.post(f"http://127.0.0.1:{port}/mcp", json=DISCOVER, headers=headers, timeout=10)
        except httpx.ConnectError:
            assert proc.poll() is None, "the server exited before it listened"
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.05)
            continue
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


@pytest.mark.parametrize("engine", ["uvicorn", "nimblemcp"])
def test_http_run_prints_its_settings_and_loads_neither_client_nor_store_protocol(tmp_path: Path, engine: str) -> None:
    (tmp_path / "srv.py").write_text(SERVER)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nimblemcp", "run", "srv.py", "--transport", "http", "--port", str(port),
         "--log-level", "warning", "-v", "--engine", engine],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env=_spawn_env())
    try:
        answer = _discover_when_listening(port, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "run-line"
    lines = err.strip().splitlines()
    assert lines[0] == f"nimblemcp: serving 'run-line' over Streamable HTTP at http://127.0.0.1:{port}/mcp"
    settings = json.loads(lines[1].removeprefix("nimblemcp: settings "))["nimblemcp_settings"]
    assert (settings["transport"], settings["port"], settings["log_level"]) == ("http", port, "warning")
    assert settings["engine"] == engine
    mods = set(json.loads(lines[-1]))
    assert NOT_AT_START & mods == set()
    served_by = "uvicorn" if engine == "uvicorn" else "nimblemcp.transports.h1.engine_server"
    assert {"nimblemcp.cli._run_options", served_by} <= mods

def test_every_public_name_still_resolves() -> None:
    code = textwrap.dedent("""
        import sys, nimblemcp
        listed = set(dir(nimblemcp))
        missing = [n for n in nimblemcp.__all__ if n not in listed]
        values = [getattr(nimblemcp, n) for n in nimblemcp.__all__]
        from nimblemcp.backends import KeyValueStore, from_url
        store, bus = from_url("memory://")
        print(len(values), missing, isinstance(store, KeyValueStore))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env=_spawn_env()).stdout.split()
    assert out == [str(len(nimblemcp.__all__)), "[]", "True"]


def test_the_backend_selection_leaves_the_store_protocol_unbuilt() -> None:
    code = ("import sys; from nimblemcp.backends._select import from_url, shared_event_log; "
            "store, _ = from_url('memory://'); print(shared_event_log(store), "
            "'nimblemcp.backends._store' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env=_spawn_env()).stdout.split()
    assert out == ["None", "False"]
