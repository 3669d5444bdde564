"""Issue 33, the small things people hit with the client commands and `proxy`, each a
real `nimblemcp` process:

- a server with no tools answers `nimblemcp tools` with "no tools", status 0 (was
  -32601 and status 1); the same for prompts and resources;
- an unknown tool name lists the close matches (difflib), or the tools there are;
- on a terminal (a pty of a known width), a server log line goes above the progress
  bar instead of onto it, and the bar never wraps;
- `nimblemcp proxy` presents the target's name and version, or `--name`.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from tests._peers import free_port, wait_for_port

SERVERS = {
    "empty.py": "import nimblemcp as m\nserver = m.Server('empty')\n",
    "calc.py": '''
import asyncio
import nimblemcp as m

server = m.Server("calc", "2.5.0")

@server.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b

@server.tool
def subtract(a: int, b: int) -> int:
    """Subtract b from a."""
    return a - b

@server.tool
async def crunch(ctx: m.Context) -> str:
    """Takes a while, says so."""
    for step in range(1, 4):
        await ctx.report_progress(step, 3, "crunching the numbers of a long and winding computation " * 2)
        await asyncio.sleep(0.05)
        await ctx.info(f"step {step} done")
    return "crunched"
''',
}


def write(tmp_path: Path) -> None:
    for name, source in SERVERS.items():
        (tmp_path / name).write_text(source)


def stdio(tmp_path: Path, name: str) -> list[str]:
    return ["--", sys.executable, "-m", "nimblemcp", "run", str(tmp_path / name)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_a_server_without_tools_prompts_or_resources(tmp_path: Path) -> None:
    write(tmp_path)
    for command, said in (("tools", "no tools"), ("prompt", "no prompts"), ("read", "no resources")):
        out = cli(command, *stdio(tmp_path, "empty.py"))
        assert (out.returncode, out.stdout, out.stderr) == (0, f"{said}\n", ""), command
    listed = cli("tools", "--json", *stdio(tmp_path, "empty.py"))
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    call = cli("call", "add", *stdio(tmp_path, "empty.py"))
    assert call.returncode == 1
    assert call.stderr == "nimblemcp: the server has no tool named 'add'; it has no tools\n"


def test_an_unknown_tool_lists_close_matches(tmp_path: Path) -> None:
    write(tmp_path)
    typo = cli("call", "ad", "--arg", "a=1", *stdio(tmp_path, "calc.py"))
    assert typo.returncode == 1
    assert typo.stderr == "nimblemcp: the server has no tool named 'ad'; did you mean 'add'?\n"
    sub = cli("call", "substract", *stdio(tmp_path, "calc.py"))
    assert "did you mean 'subtract'?" in sub.stderr
    far = cli("call", "zebra", *stdio(tmp_path, "calc.py"))
    assert far.stderr == "nimblemcp: the server has no tool named 'zebra'; its tools: add, subtract, crunch\n"
    wrong_args = cli("call", "add", "--arg", "a=x", "--arg", "b=1", *stdio(tmp_path, "calc.py"))
    assert wrong_args.returncode == 1 and "no tool named" not in wrong_args.stderr  # a real tool


def test_a_log_line_goes_above_the_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    write(tmp_path)
    master, slave = pty.openpty()
    columns = 60
    proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "call", "crunch", *stdio(tmp_path, "calc.py")],
                            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": str(columns)})
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        assert ready, f"no output from the terminal: {seen!r}"
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the process closed the terminal (EIO)
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.stdout is not None
    with proc.stdout:
        assert proc.stdout.read() == b"crunched\n"
    assert proc.wait(timeout=60) == 0
    text = seen.decode().replace("\r\n", "\n")
    # What the terminal shows on each line: the text after the last clear of that line.
    shown = [line.rsplit("\r\x1b[2K", 1)[-1] for line in text.split("\n")]
    logs = [line for line in shown if "[server" in line]
    assert logs == [f"[server info] step {n} done" for n in (1, 2, 3)], text
    bars = re.findall(r"\r\x1b\[2K(\[[#.]+\][^\r\n]*)", text)
    assert len(bars) >= 3 and all(len(bar) <= columns - 1 for bar in bars), bars
    assert all("crunching" in bar for bar in bars)


def test_the_proxy_presents_the_target(tmp_path: Path) -> None:
    write(tmp_path)
    for extra, name, version in (([], "calc", "2.5.0"), (["--name", "front"], "front", "0.1.0")):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "nimblemcp", "proxy", "--port", str(port), *extra,
                                 *stdio(tmp_path, "calc.py")], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        try:
            wait_for_port(proc, port, "the proxy")
            found = cli("discover", "--json", f"http://127.0.0.1:{port}/mcp")
            assert found.returncode == 0, found.stderr
            info = json.loads(found.stdout)["_meta"]["io.modelcontextprotocol/serverInfo"]
            assert (info["name"], info["version"]) == (name, version)
            shown = cli("discover", f"http://127.0.0.1:{port}/mcp")
            assert shown.stdout.splitlines()[0] == f"{name} {version}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
