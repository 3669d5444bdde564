"""The client commands show what happens (issue 14): progress and the server's log
messages on stderr while a tool runs, `read` listing templates, the URL anywhere on
the line, `--json` for scripts, and the end of a dead stdio server's stderr."""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER = '''
import asyncio
import nimblemcp as m

server = m.Server("showy")

@server.tool
async def work(ctx: m.Context, steps: int = 2) -> str:
    """Work in steps, saying so."""
    await ctx.info("starting", logger="worker")
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(0.01)
    await ctx.debug({"detail": "only at debug"})
    await ctx.warning({"left": 0}, logger="worker")
    return "done"

@server.tool
def hello(name: str) -> str:
    return "hi " + name

@server.resource("notes://today", mime_type="text/plain", description="Today's note")
def today() -> str:
    return "buy milk"

@server.resource("notes://{day}", mime_type="text/plain", description="A day's note")
def note(day: str) -> str:
    return f"note for {day}"
'''


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "showy.py"
    path.write_text(SERVER)
    return path


def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def stdio(server_file: Path) -> list[str]:
    return ["--", sys.executable, "-m", "nimblemcp", "run", str(server_file)]


def test_progress_and_log_messages_go_to_stderr_as_they_come(server_file: Path) -> None:
    out = cli("call", "work", "--arg", "steps=2", *stdio(server_file))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"
    lines = out.stderr.splitlines()
    assert "[server info worker] starting" in lines
    assert "progress 1/2 (50%) step 1" in lines
    assert "progress 2/2 (100%) step 2" in lines
    assert '[server warning worker] {"left": 0}' in lines
    assert lines.index("[server info worker] starting") < lines.index("progress 1/2 (50%) step 1")
    assert "only at debug" not in out.stderr  # the default level is info
    debug = cli("call", "work", "--log-level", "debug", *stdio(server_file))
    assert '[server debug] {"detail": "only at debug"}' in debug.stderr.splitlines()
    quiet = cli("call", "work", "--log-level", "off", *stdio(server_file))
    assert "[server" not in quiet.stderr and "progress 2/2" in quiet.stderr


def test_json_keeps_stdout_for_the_result_and_stderr_as_json_lines(server_file: Path) -> None:
    out = cli("call", "work", "--json", *stdio(server_file))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"][0]["text"] == "done"
    events = [json.loads(line) for line in out.stderr.splitlines()]
    assert {"progress": 1, "total": 2, "message": "step 1"} in events
    assert {"log": {"level": "info", "logger": "worker", "data": "starting"}} in events


def test_progress_is_a_bar_on_a_terminal(server_file: Path) -> None:
    main, secondary = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "nimblemcp", "call", "work", "--log-level",
                               "off", *stdio(server_file)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=secondary, timeout=60)
        os.close(secondary)
        secondary = -1
        seen = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if secondary != -1:
            os.close(secondary)
        os.close(main)
    assert proc.returncode == 0 and proc.stdout == b"done\n"
    assert b"\r\x1b[2K[" in seen and b"]  50%  step 1" in seen and b"] 100%  step 2" in seen
    assert seen.endswith(b"\r\x1b[2K")  # the bar is cleared before the result shows


def test_read_lists_resources_and_templates(server_file: Path) -> None:
    table = cli("read", *stdio(server_file))
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0].split() == ["URI", "TYPE", "DESCRIPTION"]
    assert any(row.startswith("notes://today ") and "Today's note" in row for row in rows)
    assert any(row.startswith("notes://{day} ") and "(template) A day's note" in row for row in rows)
    listed = json.loads(cli("read", "--json", *stdio(server_file)).stdout)
    assert [r["uri"] for r in listed["resources"]] == ["notes://today"]
    assert [t["uriTemplate"] for t in listed["resourceTemplates"]] == ["notes://{day}"]
    one = cli("read", "notes://tuesday", *stdio(server_file))
    assert one.stdout == "note for tuesday\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_url(server_file: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "run", str(server_file),
                             "--transport", "http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize("order", [
    ["call", "{url}", "hello", "--arg", "name=Ada"],
    ["call", "hello", "{url}", "--arg", "name=Ada"],
    ["call", "hello", "--arg", "name=Ada", "{url}"],
    ["call", "--arg", "name=Ada", "hello", "{url}"],
    ["{url}", "call", "hello", "--arg", "name=Ada"],
    ["--timeout", "30", "call", "{url}", "hello", "--arg", "name=Ada"],
])
def test_the_url_may_come_anywhere(http_url: str, order: list[str]) -> None:
    out = cli(*(word.format(url=http_url) for word in order))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hi Ada\n"


def test_options_before_the_command_and_usage_errors(http_url: str, server_file: Path) -> None:
    listed = json.loads(cli("--json", "tools", http_url).stdout)
    assert {"work", "hello"} <= {tool["name"] for tool in listed}
    two = cli("tools", http_url, http_url)
    assert two.returncode == 2 and "more than one" in two.stderr
    both = cli("tools", http_url, *stdio(server_file))
    assert both.returncode == 2 and "not both" in both.stderr
    extra = cli("tools", http_url, "surplus")
    assert extra.returncode == 2 and "unexpected argument(s): surplus" in extra.stderr


def test_a_dead_stdio_server_shows_its_stderr_and_status(tmp_path: Path) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('connecting to the database...', file=sys.stderr)\n"
                     "print('FATAL: DATABASE_URL is not set', file=sys.stderr)\nsys.exit(3)\n")
    out = cli("tools", "--", sys.executable, str(crash))
    assert out.returncode == 1
    assert "TransportError" in out.stderr
    assert "exited with status 3" in out.stderr
    assert "FATAL: DATABASE_URL is not set" in out.stderr
    assert "Traceback" not in out.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import nimblemcp as m\nserver = m.Server('b')\nraise ImportError('no module named db_driver')\n")
    died = cli("tools", "--", sys.executable, "-m", "nimblemcp", "run", str(broken))
    assert died.returncode == 1
    assert "exited with status 1" in died.stderr and "ImportError: no module named db_driver" in died.stderr
    as_json = cli("tools", "--json", "--", sys.executable, str(crash))
    error = json.loads(as_json.stderr.splitlines()[-1])["error"]
    assert error["type"] == "TransportError" and "DATABASE_URL" in error["message"]
