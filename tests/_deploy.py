"""Helpers for the deployment tests: launch `nimblemcp run` subprocesses on loopback
ports, wait for them, put Debian's nginx in front of them (`Nginx`: the kit's
`deploy/nginx/nimblemcp.conf`), and speak raw 2026-07-28 MCP over httpx (a tools/call,
an MRTR round)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

CONF = Path(__file__).resolve().parents[1] / "deploy" / "nginx" / "nimblemcp.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}
HANG_GUARD = 30.0

SOURCE = '''
import os

import nimblemcp as m

server = m.Server("deploy")
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@server.tool
def whoami() -> str:
    return f"{os.environ.get('INSTANCE', '?')}:{os.getpid()}"


@server.tool
async def wizard(ctx: m.Context) -> str:
    ctx.state["ran_on"] = [*ctx.state.get("ran_on", []), os.environ.get("INSTANCE", "?")]
    name = await ctx.elicit("name", "Name?", NAME)
    return f"{name.content['name']} ran on " + ",".join(ctx.state["ran_on"])


@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return os.environ.get("INSTANCE", "?")


@server.tool
async def slow(seconds: float) -> str:
    import asyncio

    await asyncio.sleep(seconds)
    return "finished"


@server.resource("test://doc")
def doc() -> str:
    return "doc"
'''


def write_server(tmp: Path) -> Path:
    src = tmp / "deploy_server.py"
    src.write_text(SOURCE)
    return src


def wait_port(port: int, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    for _ in range(600):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text() if log else proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


def launch(src: Path, port: int, log: Path, *args: str, env: dict[str, str] | None = None,
           wait: bool = True) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nimblemcp", "run", str(src), "--transport", "http",
             "--port", str(port), *args],
            stdout=sink, stderr=sink, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    if wait:
        wait_port(port, proc, log)
    return proc


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return proc.returncode


def headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    h = {"content-type": "application/json", "accept": "application/json, text/event-stream",
         "mcp-protocol-version": V, "mcp-method": method, **extra}
    if name is not None:
        h["mcp-name"] = name
    return h


async def call(c: httpx.AsyncClient, url: str, name: str, arguments: dict[str, Any] | None = None,
               *, host: str | None = None, **extra: Any) -> httpx.Response:
    params = {"_meta": META, "name": name, "arguments": arguments or {}, **extra}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    h = headers("tools/call", name, **({"host": host} if host else {}))
    return await c.post(url, content=orjson.dumps(body), headers=h)


def text(response: httpx.Response) -> Any:
    reply = response.json()
    assert "result" in reply, reply
    result = reply["result"]
    return result.get("structuredContent", result["content"][0]["text"])


class Nginx:
    """nginx running the kit's site (`deploy/nginx/nimblemcp.conf`), its upstream
    addresses and listen port rewritten to loopback ones; `extra` is appended to the
    site (more server blocks). `url` is the MCP endpoint through it."""

    def __init__(self, tmp: Path, ports: list[int], extra: str = "") -> None:
        assert NGINX is not None, "nginx is not installed (apt-get install -y nginx-light)"
        self.port = _free_port()
        site = CONF.read_text()
        for i, port in enumerate(ports, 1):
            site = site.replace(f"server mcp{i}:8000", f"server 127.0.0.1:{port}")
        assert "mcp1:8000" not in site
        site = re.sub(r"listen 80;", f"listen 127.0.0.1:{self.port};", site) + extra
        (tmp / "nimblemcp.conf").write_text(site)
        temp = "\n".join(f"  {kind}_temp_path {tmp}/{kind};" for kind in
                         ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        main = tmp / "nginx.conf"
        main.write_text(
            ("user root;\n" if os.getuid() == 0 else "")
            + f"worker_processes 1;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log warn;\n"
            f"events {{ worker_connections 1024; }}\n"
            f"http {{\n  access_log {tmp}/access.log;\n{temp}\n  include {tmp}/nimblemcp.conf;\n}}\n")
        check = subprocess.run([NGINX, "-t", "-p", str(tmp), "-c", str(main)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        self.proc = subprocess.Popen([NGINX, "-p", str(tmp), "-c", str(main), "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, tmp / "error.log")
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=HANG_GUARD)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
