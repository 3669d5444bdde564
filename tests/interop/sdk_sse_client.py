"""Drive a nimblemcp server's 2024-11-05 HTTP+SSE transport (`/sse`) with the official
Python SDK (mcp 2.3.0: `mcp.client.sse.sse_client` + `ClientSession`); print JSON.

Run with the interop venv's python (tests/_peers.py installs it):

    python sdk_sse_client.py URL        # e.g. http://127.0.0.1:PORT/sse

The target is tests/interop/nimble_server.py. Each step's outcome goes into one JSON
object on stdout, errors included, so the test can say which step failed and why.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client


def dump(model: Any) -> Any:
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"colour": "teal"})


async def main(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}

    async def step(name: str, fn: Callable[[], Awaitable[Any]]) -> None:
        try:
            out[name] = dump(await fn())
        except Exception:
            out[name] = {"error": traceback.format_exc()[-2000:]}

    async with sse_client(url) as (read, write), ClientSession(read, write, elicitation_callback=on_elicit) as s:
        init = await s.initialize()
        out["protocol_version"] = init.protocol_version
        out["server_name"] = init.server_info.name
        await step("tools", lambda: _names(s))
        await step("add", lambda: s.call_tool("add", {"a": 2, "b": 40}))
        progress: list[Any] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append([p, total, message])

        await step("slow_count", lambda: s.call_tool("slow_count", {"n": 3}, progress_callback=on_progress))
        out["progress"] = progress
        await step("ask_colour", lambda: s.call_tool("ask_colour", {}))
        await step("readme", lambda: s.read_resource("notes://readme"))
    return out


async def _names(s: ClientSession) -> list[str]:
    return sorted(t.name for t in (await s.list_tools()).tools)


if __name__ == "__main__":
    try:
        result = asyncio.run(main(sys.argv[1]))
    except Exception:
        result = {"error": traceback.format_exc()[-3000:]}
    print(json.dumps(result))
