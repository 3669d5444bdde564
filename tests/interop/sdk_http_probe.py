"""The official Python SDK's client (mcp 2.3.0) against a Streamable HTTP URL: its tools
as listed and, when a tool is named, that call's result; one JSON object on stdout.
Run with the interop venv's python (tests/_peers.py installs it):
    python sdk_http_probe.py URL [TOOL ARGUMENTS_JSON]
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, tool: str | None, arguments: dict[str, Any]) -> dict[str, Any]:
    async with Client(streamable_http_client(url)) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool(tool, arguments) if tool else None
        return {"tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools],
                "result": result.model_dump(mode="json", by_alias=True, exclude_none=True) if result else None}


if __name__ == "__main__":
    named = sys.argv[2] if len(sys.argv) > 2 else None
    print(json.dumps(asyncio.run(main(sys.argv[1], named, json.loads(sys.argv[3]) if named else {}))))
