"""Issue 18 (start-up, round six): what a server does NOT import at start, and that the
names loaded on first use still resolve.

- `nimblemcp run TARGET --option value ...` (the target first, then exact long options)
  is read by `cli._run_options.quick_parse` without argparse; it must give what
  argparse gives, and leave every other line (errors, help, abbreviations) to argparse.
- A stdio server started that way, and an HTTP server (`--transport http`, the line
  scripts and deployments use), load neither argparse, gettext nor the parsers; the
  HTTP server's shared-log check no longer builds the store Protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
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
from nimblemcp.cli import _RunDefaults
from nimblemcp.cli._parsers import full_parser, parse
from nimblemcp.cli._run_options import OPTIONS, quick_parse

SERVER = textwrap.dedent("""
    import atexit, json, sys

    from nimblemcp import Server

    server = Server("startup-round6", "1.0.0")

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

NOT_AT_START = {"argparse", "gettext", "shutil", "nimblemcp.cli._parsers", "nimblemcp.client",
                "nimblemcp.backends._store"}


def _argparse_namespace(argv: list[str]) -> dict[str, Any] | None:
    """What the full parser gives for `argv`, or None when it reports an error."""
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            return vars(full_parser().parse_args(argv))
        except SystemExit:
            return None


def _quick_namespace(words: list[str]) -> dict[str, Any] | None:
    given = quick_parse(words)
    if given is None:
        return None
    bare = _RunDefaults(**given)
    names = _argparse_namespace(["run", "srv.py"])
    assert names is not None
    return {name: getattr(bare, name) for name in names}


@pytest.mark.parametrize("words", [
    ["srv.py"], ["srv.py", "--transport", "http", "--port", "9001"], ["srv.py", "--port=8000"],
    ["srv.py", "--transport=http", "--host", "0.0.0.0", "--path", "/x"],
    ["srv.py", "--no-proxy-headers", "--legacy-sse"], ["srv.py", "--proxy-headers", "--no-legacy-sse"],
    ["pkg.mod:make", "--allowed-hosts", "a,b", "--max-body", "10", "--workers", "3"],
    ["srv.py", "--shutdown-timeout", "2.5", "--log-format", "json", "--log-level", "debug"],
    ["srv.py", "--engine", "uvicorn", "--redis-url", "redis://h:6379/0", "--state-keys-file", "k.txt"],
    ["srv.py", "--config", "c.toml", "--root-path", "/api", "--forwarded-allow-ips", "*"],
    ["srv.py", "--allowed-origins", "https://a,https://b", "--port", "1", "--port", "2"],
    ["srv.py", "--port", " 7 "], ["srv.py", "--shutdown-timeout", "1e1"], ["", "--port", "5"],
    ["srv.py", "-v", "--transport", "http"], ["srv.py", "--verbose"],
])
def test_a_plain_run_line_reads_as_argparse_reads_it(words: list[str]) -> None:
    quick = _quick_namespace(words)
    assert quick is not None
    assert quick == _argparse_namespace(["run", *words])


@pytest.mark.parametrize("words", [
    [], ["--transport", "http", "srv.py"], ["srv.py", "--trans", "http"], ["srv.py", "--"],
    ["srv.py", "-h"], ["srv.py", "--help"], ["srv.py", "extra"], ["srv.py", "--port"],
    ["srv.py", "--port", "-1"], ["srv.py", "--port", "abc"], ["srv.py", "--transport", "ftp"],
    ["srv.py", "--host", ""], ["srv.py", "--host="], ["srv.py", "--legacy-sse=yes"],
    ["srv.py", "--no-port", "1"], ["srv.py", "--workers", "2.5"], ["-x.py"], ["srv.py", "--bogus"],
    ["srv.py", "--verbose=1"], ["srv.py", "-vv"], ["srv.py", "--no-verbose"],
])
def test_anything_else_is_left_to_argparse(words: list[str]) -> None:
    assert quick_parse(words) is None


def test_random_run_lines_agree_with_argparse() -> None:
    """Whenever the quick reading answers, argparse accepts the line and gives the same."""
    rng = random.Random(18)
    flags = [flag for flag, _ in OPTIONS] + ["--no-proxy-headers", "--no-legacy-sse", "--trans", "--po",
                                             "--", "-h", "--nope", "-v"]
    values = ["http", "stdio", "json", "text", "debug", "uvicorn", "nimblemcp", "8000", "-3", "0", "2.5",
              "abc", "", "a,b", "/mcp", "x=y", "--port", "srv.py", " 9 "]
    answered = 0
    for _ in range(1500):
        words = ["srv.py"] if rng.random() < 0.9 else []
        for _ in range(rng.randint(0, 6)):
            flag = rng.choice(flags)
            if rng.random() < 0.2:
                words.append(f"{flag}={rng.choice(values)}")
            else:
                words.append(flag)
                if rng.random() < 0.85:
                    words.append(rng.choice(values))
        quick = _quick_namespace(words)
        if quick is not None:
            answered += 1
            assert quick == _argparse_namespace(["run", *words]), words
    assert answered > 100  # the generator does reach the quick reading


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


def test_stdio_run_with_options_loads_no_parser(tmp_path: Path) -> None:
    (tmp_path / "srv.py").write_text(SERVER)
    proc = subprocess.run(
        [sys.executable, "-m", "nimblemcp", "run", "srv.py", "--transport", "stdio", "--shutdown-timeout", "3"],
        input=json.dumps(DISCOVER) + "\n", capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True,
        env=_spawn_env())
    answer = json.loads(proc.stdout.splitlines()[0])
    assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "startup-round6"
    mods = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert NOT_AT_START & mods == set()
    assert "nimblemcp.cli._run_options" in mods


def test_options_before_the_target_still_go_through_argparse(tmp_path: Path) -> None:
    (tmp_path / "srv.py").write_text(SERVER)
    proc = subprocess.run(
        [sys.executable, "-m", "nimblemcp", "run", "--shutdown-timeout", "3", "srv.py"],
        input=json.dumps(DISCOVER) + "\n", capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True,
        env=_spawn_env())
    assert json.loads(proc.stdout.splitlines()[0])["id"] == 1
    assert "argparse" in json.loads(proc.stderr.strip().splitlines()[-1])


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
def test_http_run_loads_no_parser_and_prints_the_same_settings(tmp_path: Path, engine: str) -> None:
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
    assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "startup-round6"
    lines = err.strip().splitlines()
    assert lines[0] == f"nimblemcp: serving 'startup-round6' over Streamable HTTP at http://127.0.0.1:{port}/mcp"
    settings = json.loads(lines[1].removeprefix("nimblemcp: settings "))["nimblemcp_settings"]
    assert (settings["transport"], settings["port"], settings["log_level"]) == ("http", port, "warning")
    assert settings["engine"] == engine
    mods = set(json.loads(lines[-1]))
    # uvicorn (the default, issue 31) imports click, which brings gettext and shutil.
    assert (NOT_AT_START - ({"gettext", "shutil"} if engine == "uvicorn" else set())) & mods == set()
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
