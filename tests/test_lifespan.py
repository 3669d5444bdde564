"""Issue 19: `Server(lifespan=...)` runs under every way of serving, and its value
reaches handlers as `ctx.lifespan`; a failing start-up is a clear error and a non-zero exit.

Real processes: `nimblemcp run` over stdio and HTTP, `server.run()` from a script,
uvicorn on loopback (ASGI lifespan), a Starlette/FastAPI host, and `testing.connect`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.errors import StartupError
from nimblemcp.testing import connect
from nimblemcp.transports.stdio.client import StdioTransport

SERVER = """
import contextlib, os, sys
from pathlib import Path
import nimblemcp as m

LOG = Path(os.environ["LIFESPAN_LOG"])

@contextlib.asynccontextmanager
async def lifespan(server):
    if os.environ.get("LIFESPAN_FAIL"):
        raise ConnectionError("database is unreachable")
    print("lifespan print goes to stderr")
    with LOG.open("a") as f:
        f.write("start\\n")
    try:
        yield {"db": "open", "server": server.name}
    finally:
        with LOG.open("a") as f:
            f.write("stop\\n")

server = m.Server("life", lifespan=lifespan)

@server.tool()
def which(ctx: m.Context) -> str:
    return ctx.lifespan["db"] + "/" + ctx.lifespan["server"]

if __name__ == "__main__":
    server.run(sys.argv[1] if len(sys.argv) > 1 else "stdio",
               **({"port": int(sys.argv[2])} if len(sys.argv) > 2 else {}))
"""


def _script(tmp: Path) -> tuple[Path, dict[str, str]]:
    src = tmp / "life_server.py"
    src.write_text(SERVER)
    log = tmp / "lifespan.log"
    return src, {**os.environ, "LIFESPAN_LOG": str(log), "PYTHONUNBUFFERED": "1"}


def _events(tmp: Path) -> list[str]:
    log = tmp / "lifespan.log"
    return log.read_text().split() if log.exists() else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("how", ["nimblemcp-run", "server.run"])
async def test_lifespan_over_stdio(tmp_path: Path, how: str) -> None:
    src, env = _script(tmp_path)
    args = ["-m", "nimblemcp", "run", str(src)] if how == "nimblemcp-run" else [str(src)]
    transport = StdioTransport(sys.executable, args, env=env)
    async with Client(transport) as client:
        result = await client.call_tool("which", {})
        assert result["content"][0]["text"] == "open/life"
        assert _events(tmp_path) == ["start"]
    for _ in range(100):
        if _events(tmp_path) == ["start", "stop"]:
            break
        time.sleep(0.05)
    assert _events(tmp_path) == ["start", "stop"]


def _start_http(src: Path, env: dict[str, str], port: int, how: str, log: Path) -> subprocess.Popen[bytes]:
    args = (["-m", "nimblemcp", "run", str(src), "--transport", "http", "--port", str(port)]
            if how == "nimblemcp-run" else [str(src), "http", str(port)])
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, *args], stdout=sink, stderr=sink, env=env)


def _wait_port(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


@pytest.mark.parametrize("how", ["nimblemcp-run", "server.run"])
async def test_lifespan_over_http(tmp_path: Path, how: str) -> None:
    src, env = _script(tmp_path)
    port = _free_port()
    log = tmp_path / "server.log"
    proc = _start_http(src, env, port, how, log)
    try:
        _wait_port(proc, port, log)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            result = await client.call_tool("which", {})
            assert result["content"][0]["text"] == "open/life"
        assert _events(tmp_path) == ["start"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _events(tmp_path) == ["start", "stop"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("how", ["nimblemcp-run", "server.run"])
def test_startup_failure_is_a_clear_error_and_nonzero_exit(tmp_path: Path, transport: str, how: str) -> None:
    src, env = _script(tmp_path)
    env["LIFESPAN_FAIL"] = "1"
    if how == "nimblemcp-run":
        args = ["-m", "nimblemcp", "run", str(src), "--transport", transport, "--port", str(_free_port())]
    else:
        args = [str(src), transport] + ([str(_free_port())] if transport == "http" else [])
    done = subprocess.run([sys.executable, *args], capture_output=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
    err = done.stderr.decode()
    assert done.returncode != 0, err
    assert "database is unreachable" in err
    assert "life" in err and "failed to start" in err
    assert "KeyError" not in err


@contextlib.asynccontextmanager
async def _uvicorn(app: Any) -> AsyncIterator[str]:
    """Serve `app` on loopback with the ASGI lifespan on."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    served = uvicorn.Server(config)
    import asyncio

    task = asyncio.create_task(served.serve())
    while not served.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.01)
    port = served.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        await task


def _in_process_server(events: list[str]) -> m.Server:
    @contextlib.asynccontextmanager
    async def lifespan(server: m.Server) -> AsyncIterator[dict[str, str]]:
        events.append("start")
        yield {"db": "open"}
        events.append("stop")

    server = m.Server("inproc", lifespan=lifespan)

    @server.tool()
    async def which(ctx: m.Context) -> str:
        return str(ctx.lifespan["db"])

    return server


async def test_asgi_app_under_uvicorn_runs_the_lifespan() -> None:
    events: list[str] = []
    server = _in_process_server(events)
    async with _uvicorn(server.asgi_app()) as base:
        assert events == ["start"]
        async with Client(base + "/mcp") as client:
            assert (await client.call_tool("which", {}))["content"][0]["text"] == "open"
    assert events == ["start", "stop"]


async def test_lifespan_failure_under_uvicorn_stops_startup() -> None:
    @contextlib.asynccontextmanager
    async def broken(server: m.Server) -> AsyncIterator[None]:
        raise OSError("no pool")
        yield

    server = m.Server("broken", lifespan=broken)
    config = uvicorn.Config(server.asgi_app(), host="127.0.0.1", port=0, log_level="critical", lifespan="on")
    served = uvicorn.Server(config)
    with pytest.raises(SystemExit) as info:  # uvicorn's own start-up failure exit
        await served.serve()
    assert info.value.code != 0
    assert not served.started


async def test_starlette_host_lifespan_runs_the_server_lifespan() -> None:
    starlette = pytest.importorskip("starlette.applications")
    from starlette.routing import Mount

    events: list[str] = []
    server = _in_process_server(events)
    host = starlette.Starlette(routes=[Mount("/notes", app=server.asgi_app())],
                               lifespan=server.lifespan_context)
    async with _uvicorn(host) as base:
        assert events == ["start"]
        async with Client(base + "/notes/mcp") as client:
            assert (await client.call_tool("which", {}))["content"][0]["text"] == "open"
    assert events == ["start", "stop"]


async def test_testing_connect_runs_the_lifespan_and_entries_nest() -> None:
    events: list[str] = []
    server = _in_process_server(events)
    async with server.lifespan_context() as value:
        assert value == {"db": "open"}
        async with connect(server) as client:
            assert (await client.call_tool("which"))["content"][0]["text"] == "open"
        assert events == ["start"]  # the outer entry keeps it running
    assert events == ["start", "stop"]


async def test_lifespan_not_started_says_how_to_start_it() -> None:
    server = _in_process_server([])
    with pytest.raises(RuntimeError, match="lifespan_context"):
        server.lifespan_state  # noqa: B018
    assert m.Server("plain").lifespan_state is None


async def test_lifespan_start_failure_is_startup_error() -> None:
    @contextlib.asynccontextmanager
    async def broken(server: m.Server) -> AsyncIterator[None]:
        raise KeyError("DATABASE_URL")
        yield

    server = m.Server("broken", lifespan=broken)
    with pytest.raises(StartupError, match="'broken' failed to start") as info:
        async with connect(server):
            pass
    assert isinstance(info.value.__cause__, KeyError)
