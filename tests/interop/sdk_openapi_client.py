"""Drive a server made from the Swagger Petstore document (`nimblemcp run --openapi`)
with the official Python SDK client (mcp 2.3.0); print one JSON object.

Run with the interop venv's python (tests/_peers.py installs it):

    python sdk_openapi_client.py URL API_KEY

Every MCP request carries the header `api_key: API_KEY`, which the server passes on to
the pet store (`--forward-headers api_key`). Each step's outcome goes into the JSON,
errors included, so the test can say which step failed and why.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

from mcp.client import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def dump(model: Any) -> Any:
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


async def main(url: str, api_key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    http = create_mcp_http_client(headers={"api_key": api_key})
    try:
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            out["server_name"] = client.server_info.name if client.server_info else None
            tools = (await client.list_tools()).tools
            out["tools"] = {t.name: dump(t) for t in tools}
            out["addPet"] = dump(await client.call_tool(
                "addPet", {"name": "Fido", "photoUrls": ["http://example.com/fido.png"], "status": "pending",
                           "category": {"id": 1, "name": "Dogs"}}))
            new_id = out["addPet"]["structuredContent"]["id"]
            out["getPetById"] = dump(await client.call_tool("getPetById", {"petId": new_id}))
            out["missing"] = dump(await client.call_tool("getPetById", {"petId": 424242}))
            out["findPetsByStatus"] = dump(await client.call_tool("findPetsByStatus", {"status": "pending"}))
            out["findPetsByTags"] = dump(await client.call_tool("findPetsByTags", {"tags": ["good", "cat"]}))
            out["getInventory"] = dump(await client.call_tool("getInventory", {}))
            out["updatePetWithForm"] = dump(await client.call_tool(
                "updatePetWithForm", {"petId": new_id, "status": "sold"}))
            out["deletePet"] = dump(await client.call_tool("deletePet", {"petId": new_id}))
            out["deleted"] = dump(await client.call_tool("getPetById", {"petId": new_id}))
            out["loginUser"] = dump(await client.call_tool("loginUser", {"username": "ada", "password": "x"}))
    except BaseException as exc:  # report, do not crash: the test prints it
        out["error"] = "".join(traceback.format_exception(exc))[-4000:]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
