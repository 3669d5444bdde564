"""Issue 19 examples, each run the way users run them: `nimblemcp run` over real stdio
and real HTTP (a uvicorn subprocess), and the FastAPI app under `uvicorn`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nimblemcp.client import Client
from nimblemcp.transports.stdio.client import StdioTransport

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _process(args: list[str], port: int, env: dict[str, str], log: Path) -> Iterator[str]:
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, *args], stdout=sink, stderr=sink, env=env, cwd=ROOT)
    try:
        for _ in range(400):
            if proc.poll() is not None:
                raise RuntimeError(f"exited: {log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("did not start")
        yield f"http://127.0.0.1:{port}"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def _client(example: str, transport: str, env: dict[str, str], tmp: Path) -> AsyncIterator[tuple[Client, str | None]]:
    """A Client on `example` served by `nimblemcp run` over stdio or HTTP."""
    target = str(EXAMPLES / example)
    if transport == "stdio":
        async with Client(StdioTransport(sys.executable, ["-m", "nimblemcp", "run", target], env=env)) as client:
            yield client, None
        return
    port = _free_port()
    args = ["-m", "nimblemcp", "run", target, "--transport", "http", "--port", str(port)]
    with _process(args, port, env, tmp / "server.log") as base:
        async with Client(base + "/mcp") as client:
            yield client, base


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_notes_sqlite_lifespan_and_dependencies(tmp_path: Path, transport: str) -> None:
    db_path = tmp_path / "notes.db"
    async with _client("notes_sqlite/server.py", transport, _env(NOTES_DB=str(db_path)), tmp_path) as (client, base):
        tools = {t["name"]: t for t in await client.list_tools()}
        assert set(tools["add_note"]["inputSchema"]["properties"]) == {"title", "body"}
        assert set(tools["check_url"]["inputSchema"]["properties"]) == {"url"}
        added = await client.call_tool("add_note", {"title": "groceries", "body": "milk, eggs"})
        assert added["structuredContent"] == {"result": 2}
        dup = await client.call_tool("add_note", {"title": "groceries", "body": "again"})
        assert dup["isError"] is True and "already exists" in dup["content"][0]["text"]
        found = await client.call_tool("search_notes", {"query": "milk"})
        assert found["structuredContent"] == {"result": ["groceries"]}
        read = await client.read_resource("notes://welcome")
        assert read["contents"][0]["text"] == "Notes live in SQLite."
        if base is not None:  # the shared httpx client from the lifespan, against this very server
            status = await client.call_tool("check_url", {"url": base + "/healthz"})
            assert status["structuredContent"] == {"result": 200}
    with contextlib.closing(sqlite3.connect(db_path)) as db:  # committed by the provider
        assert [r[0] for r in db.execute("SELECT title FROM notes ORDER BY id")] == ["welcome", "groceries"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_middleware_example(tmp_path: Path, transport: str) -> None:
    async with _client("middleware/server.py", transport, _env(READ_ONLY="1"), tmp_path) as (client, _):
        assert (await client.call_tool("add", {"item": "a"}))["structuredContent"] == {"result": 1}
        with pytest.raises(Exception, match="read-only"):
            await client.call_tool("clear", {})
        stats = (await client.call_tool("stats", {}))["structuredContent"]
        assert stats["tools/call"]["count"] >= 2
        limited = 0
        for _ in range(15):
            try:
                await client.call_tool("add", {"item": "b"})
            except Exception as exc:  # the rate limit's -32000
                assert getattr(exc, "code", None) == -32000
                limited += 1
        assert limited > 0


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_composition_example(tmp_path: Path, transport: str) -> None:
    async with _client("composition/server.py", transport, _env(), tmp_path) as (client, _):
        names = sorted(t["name"] for t in await client.list_tools())
        assert names == ["about", "calc_add_numbers", "notes_add"]
        total = await client.call_tool("calc_add_numbers", {"a": 2, "b": 3})
        assert total["structuredContent"] == {"result": 5.0}
        await client.call_tool("notes_add", {"key": "later", "text": "write docs"})
        memo = await client.read_resource("memo://notes/later")
        assert memo["contents"][0]["text"] == "write docs"
        today = await client.read_resource("memo://notes/today")
        assert today["contents"][0]["text"] == "ship the release"
        assert (await client.call_tool("about", {}))["content"][0]["text"] == "notes, calc"


async def test_fastapi_mount_example(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    port = _free_port()
    args = ["-m", "uvicorn", "examples.starlette_mount.app:app", "--port", str(port), "--log-level", "warning"]
    with _process(args, port, _env(), tmp_path / "uvicorn.log") as base:
        async with Client(base + "/notes/mcp") as client:
            assert (await client.call_tool("visit", {}))["structuredContent"] == {"result": 1}
            assert (await client.call_tool("visit", {}))["structuredContent"] == {"result": 2}
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            assert (await http.get("/notes/healthz")).json() == {"status": "ok"}
            assert (await http.get("/notes/readyz")).status_code == 200
            status: dict[str, Any] = (await http.get("/notes/status")).json()
            assert status == {"server": "hosted-notes", "tools": ["visit"]}
