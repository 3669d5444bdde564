"""Issue 33: `nimblemcp dev` across reloads and broken edits, as real processes.

- HTTP: the supervisor holds the port, so it never refuses a connection: while a broken
  edit keeps the server from starting, requests (a real `nimblemcp tools`) get a
  JSON-RPC error naming the exception and where it is, as over stdio.
- A client listening across a reload hears that the lists changed and lists the new
  tools: over HTTP its stream ends without the closing result, it listens again, the
  new generation tells it (`tools_changed`) and its cached lists are dropped; over
  stdio the supervisor replays the listen to the new child and tells the host itself
  (tagged with the listen's id; untagged for a 2025-11-25 session).
- Unexpected errors are not masked in dev: the tool's result names the exception.
- A port in use is one line and status 1.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._peers import free_port, wait_for_port
from tests.test_cli_dev import ADDED, META, SERVER, Lines, StdioDev, _tool_names

from nimblemcp import Client

BROKEN = SERVER + "\n\ndef broken(:\n"


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo.py"
    path.write_text(SERVER)
    return path


class HttpDev:
    def __init__(self, server_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "dev", str(server_file), "--transport",
                                      "http", "--port", str(self.port)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert self.proc.stderr is not None
        self.err = Lines(self.proc.stderr)
        self.err.wait_for(lambda text: self.url in text)

    def count(self, text: str) -> int:
        return self.err.text.count(text)

    def wait_count(self, text: str, n: int) -> None:
        self.err.wait_for(lambda _line: self.count(text) >= n, timeout=60)

    def close(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        status = self.proc.wait(timeout=30)
        self.err.close()
        return status


@pytest.fixture
def http_dev(server_file: Path) -> Iterator[HttpDev]:
    dev = HttpDev(server_file)
    try:
        yield dev
    finally:
        if dev.proc.poll() is None:
            dev.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_http_keeps_answering_with_the_error_of_a_broken_edit(http_dev: HttpDev, server_file: Path) -> None:
    assert "hello" in cli("tools", http_dev.url).stdout
    server_file.write_text(BROKEN)
    http_dev.wait_count("server exited with status", 1)
    down = cli("tools", http_dev.url)
    assert down.returncode == 1
    assert "the server exited with status 1: SyntaxError: invalid syntax (demo.py, line" in down.stderr
    assert "Save a change to restart it" in down.stderr
    assert "connect" not in down.stderr.lower()
    with socket.create_connection(("127.0.0.1", http_dev.port), timeout=10):
        pass  # the port is held: never refused
    server_file.write_text(SERVER + ADDED)
    http_dev.wait_count("reloaded (generation", 1)
    up = cli("tools", http_dev.url)
    assert up.returncode == 0 and "added_later" in up.stdout, up.stderr
    assert http_dev.close() == 0


def test_http_starts_answering_even_when_the_first_start_fails(tmp_path: Path) -> None:
    path = tmp_path / "demo.py"
    path.write_text(BROKEN)
    dev = HttpDev(path)
    try:
        dev.wait_count("server exited with status", 1)
        down = cli("call", "hello", "--arg", "name=x", dev.url)
        assert down.returncode == 1 and "SyntaxError: invalid syntax (demo.py, line" in down.stderr
        path.write_text(SERVER)
        dev.wait_count("reloaded (generation", 1)
        up = cli("call", "hello", "--arg", "name=Ada", dev.url)
        assert up.stdout == "hi Ada\n", up.stderr
    finally:
        assert dev.close() == 0


async def test_http_a_listening_client_hears_of_a_reload(http_dev: HttpDev, server_file: Path) -> None:
    async with Client(http_dev.url) as client:
        before = await client.list_tools()  # cached: a list stays fresh for a minute
        assert "added_later" not in {t["name"] for t in before}
        async with client.listen(tools=True) as events:
            server_file.write_text(SERVER + ADDED)
            seen = [(await asyncio.wait_for(events.next(), 60)).kind for _ in range(3)]
            assert seen == ["acknowledged", "missed", "tools_changed"]
            after = await client.list_tools()
    assert "added_later" in {t["name"] for t in after}


async def test_http_errors_are_not_masked(http_dev: HttpDev) -> None:
    async with Client(http_dev.url) as client:
        failed = await client.call_tool("boom", {})
    assert failed["isError"] is True
    assert "RuntimeError: kaboom from the tool" in failed["content"][0]["text"]


def test_stdio_a_listen_survives_a_reload_and_hears_of_it(server_file: Path) -> None:
    dev = StdioDev([str(server_file)], cwd=server_file.parent)
    try:
        dev.send({"jsonrpc": "2.0", "id": "watch", "method": "subscriptions/listen",
                  "params": {"notifications": {"toolsListChanged": True}, "_meta": META}})
        dev.out.wait_for(lambda text: "notifications/subscriptions/acknowledged" in text)
        for reloads in (1, 2):
            server_file.write_text(SERVER + ADDED + "\n" * reloads)
            dev.out.wait_for(lambda _text, n=reloads: dev.out.text.count("list_changed") >= n)
            told = [json.loads(line) for line in dev.out.lines if "list_changed" in line]
            assert len(told) == reloads
            assert told[-1] == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "watch"}}}
        assert dev.out.text.count("notifications/subscriptions/acknowledged") == 1  # not again
        assert "added_later" in _tool_names(dev.request("tools/list"))
        failed = dev.request("tools/call", {"name": "boom", "arguments": {}})
        assert "RuntimeError: kaboom from the tool" in failed["result"]["content"][0]["text"]
        # The listen is still open on the new child: no answer (error or closing result) yet.
        assert not any(json.loads(line).get("id") == "watch" for line in dev.out.lines)
    finally:
        dev.close()


def test_stdio_a_legacy_session_hears_of_a_reload(server_file: Path) -> None:
    dev = StdioDev([str(server_file)], cwd=server_file.parent)
    try:
        init = dev.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "old-host", "version": "1"}}, meta=False)
        assert init["result"]["capabilities"]["tools"]["listChanged"] is True
        dev.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server_file.write_text(SERVER + ADDED)
        told = dev.out.wait_for(lambda text: "notifications/tools/list_changed" in text)
        assert json.loads(told) == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}
        assert "added_later" in _tool_names(dev.request("tools/list", meta=False))
    finally:
        dev.close()


def test_stdio_a_broken_edit_is_named_in_the_answers(server_file: Path) -> None:
    dev = StdioDev([str(server_file)], cwd=server_file.parent)
    try:
        server_file.write_text(BROKEN)
        dev.err.wait_for(lambda text: "exited with status" in text)
        down = dev.request("tools/list")
        assert "SyntaxError: invalid syntax (demo.py, line" in down["error"]["message"]
    finally:
        dev.close()


def test_a_port_in_use_is_one_line(server_file: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "nimblemcp", "dev", str(server_file), "--transport", "http",
                              "--port", str(port)], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [f"nimblemcp dev: cannot listen on 127.0.0.1:{port}: Address already in "
                                       "use; choose another port with --port"]


async def test_a_client_drops_cached_lists_when_its_listen_stream_came_back(tmp_path: Path) -> None:
    """The Client's half (CACHE-08): a server restarted with other tools says nothing
    (no list change was ever published), but the listen's `missed` drops the cache."""
    path = tmp_path / "demo.py"
    path.write_text(SERVER)
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, "-m", "nimblemcp", "run", str(path), "--transport", "http", "--port", str(port)]

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        wait_for_port(proc, port, "the server")
        return proc

    proc = start()
    try:
        async with Client(url) as client:
            assert "added_later" not in {t["name"] for t in await client.list_tools()}
            async with client.listen(tools=True) as events:
                assert (await asyncio.wait_for(events.next(), 60)).kind == "acknowledged"
                proc.send_signal(signal.SIGTERM)  # a rolling restart: the stream just ends
                proc.wait(timeout=30)
                path.write_text(SERVER + ADDED)
                proc = start()
                assert (await asyncio.wait_for(events.next(), 60)).kind == "missed"
                after = await client.list_tools()
        assert "added_later" in {t["name"] for t in after}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
