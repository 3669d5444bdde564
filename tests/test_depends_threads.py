"""Issue 37 ("Also"): sync dependency providers run where sync tools run, in the worker
threads, not on the event loop (as FastAPI runs them).

A real stdio server process whose provider blocks in `time.sleep` until the test
drops a gate file: while it waits, other requests on the same connection are
answered, and a sync generator provider's cleanup (after `yield`) runs in a worker
too. Built-in providers and `Depends(..., run_in_thread=False)` stay inline.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import nimblemcp as m
from nimblemcp import Depends, get_headers, get_lifespan, get_principal
from nimblemcp.client import Client
from nimblemcp.server._depends import _Plan
from nimblemcp.testing import connect
from nimblemcp.transports.stdio.client import StdioTransport

HANG = 30.0  # a guard against a hung test, never a measurement

SERVER = '''
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import nimblemcp as m
from nimblemcp import Depends

GATE = Path({gate!r})
LOOP_THREAD = threading.get_ident()


def wait_for_gate() -> str:
    # A provider that blocks, as one opening a database connection does.
    while not GATE.exists():
        time.sleep(0.01)
    return "on the loop" if threading.get_ident() == LOOP_THREAD else "in a worker"


def connection() -> Iterator[str]:
    opened = threading.get_ident()
    yield f"opened {{'on the loop' if opened == LOOP_THREAD else 'in a worker'}}"
    closed = threading.get_ident()
    Path(str(GATE) + ".closed").write_text("on the loop" if closed == LOOP_THREAD else "in a worker")


server = m.Server("threads")


@server.tool()
async def blocked(where: Annotated[str, Depends(wait_for_gate)]) -> str:
    return where


@server.tool()
async def with_connection(conn: Annotated[str, Depends(connection)]) -> str:
    return conn


@server.tool()
async def ping() -> str:
    return "pong"


if __name__ == "__main__":
    LOOP_THREAD = threading.get_ident()
    server.run()
'''


async def test_a_blocking_sync_provider_does_not_stall_other_requests(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    source = tmp_path / "threads_server.py"
    source.write_text(SERVER.format(gate=str(gate)))
    async with Client(StdioTransport(sys.executable, [str(source)])) as client:
        slow = asyncio.create_task(client.call_tool("blocked", {}))
        await asyncio.sleep(0.2)  # let the provider start blocking (it holds either way)
        # Answered while the provider is still blocked: the event loop is free.
        pong = await asyncio.wait_for(client.call_tool("ping", {}), HANG)
        assert pong["content"][0]["text"] == "pong"
        assert not slow.done()  # still waiting for the gate
        gate.write_text("open")
        done = await asyncio.wait_for(slow, HANG)
        assert done["content"][0]["text"] == "in a worker"
        conn = await asyncio.wait_for(client.call_tool("with_connection", {}), HANG)
        assert conn["content"][0]["text"] == "opened in a worker"
    # The generator's code after `yield` ran in a worker too.
    assert (tmp_path / "gate.closed").read_text() == "in a worker"


def test_built_in_providers_and_the_opt_out_stay_inline() -> None:
    def quick() -> int:
        return 1

    assert all(_Plan(Depends(p)).inline for p in (get_lifespan, get_headers, get_principal))
    assert _Plan(Depends(quick, run_in_thread=False)).inline
    assert not _Plan(Depends(quick)).inline


LOOP_STEPS: list[tuple[str, bool]] = []
LOOP_THREAD: list[int] = []


def tracked_resource() -> Iterator[str]:
    LOOP_STEPS.append(("open", threading.get_ident() in LOOP_THREAD))
    try:
        yield "r"
    finally:
        LOOP_STEPS.append(("close", threading.get_ident() in LOOP_THREAD))


async def test_a_sync_generator_provider_cleans_up_in_a_worker_even_when_the_tool_fails() -> None:
    LOOP_THREAD[:] = [threading.get_ident()]
    LOOP_STEPS.clear()
    server = m.Server("gen")

    @server.tool()
    async def fails(r: Annotated[str, Depends(tracked_resource)]) -> str:
        raise RuntimeError("boom")

    async with connect(server) as client:
        result = await client.call_tool("fails", {})
    assert result["isError"] is True
    assert LOOP_STEPS == [("open", False), ("close", False)]  # both off the loop thread
