"""Smoke test of examples/conformance/client.py against our own server on uvicorn.

Runs the program as the suite does (a subprocess, URL last, scenario in the env) and
checks that the server really received what the scenario asks for.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn

import nimblemcp as m
from nimblemcp.transports.http.app import asgi_app

CLIENT = Path(__file__).resolve().parents[1] / "examples" / "conformance" / "client.py"


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, list[tuple[int, int]]]]:
    calls: list[tuple[int, int]] = []
    server = m.Server("conformance-peer")

    @server.tool()
    def add_numbers(a: int, b: int) -> str:
        calls.append((a, b))
        return f"The sum of {a} and {b} is {a + b}"

    config = uvicorn.Config(asgi_app(server), host="127.0.0.1", port=0, log_level="warning",
                            lifespan="off")
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv.serve())
    while not uv.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = uv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp", calls
    finally:
        uv.should_exit = True
        await task


async def run_client(url: str, scenario: str) -> tuple[int, str]:
    env = {**os.environ, "MCP_CONFORMANCE_SCENARIO": scenario,
           "MCP_CONFORMANCE_PROTOCOL_VERSION": "2026-07-28"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENT), url, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_tools_call_scenario(served: tuple[str, list[tuple[int, int]]]) -> None:
    url, calls = served
    code, err = await run_client(url, "tools_call")
    assert code == 0, err
    assert calls == [(5, 3)]


async def test_unknown_scenarios_fail_fast(served: tuple[str, list[tuple[int, int]]]) -> None:
    url, calls = served
    code, err = await run_client(url, "no-such-scenario")
    assert code != 0 and "not supported" in err
    assert calls == []
