"""Talking to real `nimblemcp run` instances about tasks over HTTP (tasks extension).

Shared by the tests that start instances and watch their tasks from outside:
`test_tasks_scaleout.py` (leases, cancel across instances) and `test_tasks_shutdown.py`
(tasks when an instance stops). Requests carry the tasks extension in their
`_meta` capabilities and the routing headers of `_deploy.headers` (TASK-11: the task id
is the `Mcp-Name` of `tasks/*`).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
from _deploy import headers
from _sse_parser import SSEParser

from nimblemcp.server._tasks import TASKS_EXTENSION

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
HANG_GUARD = 30.0  # only so a failure cannot hang the run


class Instance:
    """One running `nimblemcp run` process and where it serves."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.name, self.proc, self.port, self.log = name, proc, port, log
        self.url = f"http://127.0.0.1:{port}/mcp"


async def rpc(c: httpx.AsyncClient, url: str, method: str, params: dict[str, Any], name: str | None) -> dict[str, Any]:
    """The result of one request (asserted to be a result, not an error)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    r = await c.post(url, content=orjson.dumps(body), headers=headers(method, name))
    reply: dict[str, Any] = r.json()
    assert "result" in reply, reply
    return reply["result"]  # type: ignore[no-any-return]


async def get_task(c: httpx.AsyncClient, inst: Instance, task_id: str) -> dict[str, Any]:
    return await rpc(c, inst.url, "tasks/get", {"taskId": task_id}, task_id)


async def wait_for_file(path: Path) -> None:
    """Until a mark file has its content: `write_text` creates the file empty before it
    writes, so a reader that only waits for the name can read ''."""
    async with asyncio.timeout(HANG_GUARD):
        while not (path.exists() and path.stat().st_size):
            await asyncio.sleep(0.02)


class Notes:
    """JSON messages of a listen's SSE stream, one at a time."""

    def __init__(self, chunks: Any) -> None:
        self.chunks, self.parser = chunks, SSEParser()
        self.pending: list[bytes] = []

    async def next(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            while not self.pending:
                self.pending.extend(self.parser.feed(await self.chunks.__anext__()))
            return orjson.loads(self.pending.pop(0))  # type: ignore[no-any-return]

        return await asyncio.wait_for(read(), HANG_GUARD)
