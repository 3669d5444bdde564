"""Drive the issue 19 examples with the official Python SDK client (mcp 2.3.0); print JSON.

    python sdk_framework_client.py MODE EXAMPLE URL
    python sdk_framework_client.py MODE EXAMPLE -- COMMAND ARG...

EXAMPLE is "notes_sqlite", "middleware" or "composition". Each step's outcome goes into
one JSON object on stdout, errors included. A stdio server gets the SDK's default
environment plus the JSON object in $INTEROP_SERVER_ENV.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.client import Client
from mcp.client.stdio import StdioServerParameters


def dump(model: Any) -> Any:
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


async def notes_sqlite(client: Client, out: dict[str, Any]) -> None:
    tools = (await client.list_tools()).tools
    out["tools"] = sorted(t.name for t in tools)
    out["add_note_args"] = sorted(next(t for t in tools if t.name == "add_note").input_schema["properties"])
    out["add"] = dump(await client.call_tool("add_note", {"title": "sdk", "body": "from the official client"}))
    out["search"] = dump(await client.call_tool("search_notes", {"query": "official"}))
    out["read"] = dump(await client.read_resource("notes://sdk"))


async def middleware(client: Client, out: dict[str, Any]) -> None:
    out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
    out["add"] = dump(await client.call_tool("add", {"item": "x"}))
    out["stats"] = dump(await client.call_tool("stats", {}))


async def composition(client: Client, out: dict[str, Any]) -> None:
    out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
    out["sum"] = dump(await client.call_tool("calc_add_numbers", {"a": 1, "b": 2}))
    out["memo"] = dump(await client.read_resource("memo://notes/today"))


SCENARIOS: dict[str, Callable[[Client, dict[str, Any]], Awaitable[None]]] = {
    "notes_sqlite": notes_sqlite, "middleware": middleware, "composition": composition,
}


async def main(argv: list[str]) -> dict[str, Any]:
    mode, scenario, *rest = argv
    server: Any
    if rest[0] == "--":
        extra = json.loads(os.environ.get("INTEROP_SERVER_ENV", "{}"))
        server = StdioServerParameters(command=rest[1], args=rest[2:], env=extra)
    else:
        server = rest[0]
    out: dict[str, Any] = {}
    try:
        async with Client(server, mode=mode) as client:
            out["protocol_version"] = client.protocol_version
            await SCENARIOS[scenario](client, out)
    except BaseException as exc:  # report, do not crash: the test prints it
        out["error"] = "".join(traceback.format_exception(exc))[-4000:]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
