"""The official Python SDK's client (mcp 2.3.0) lists and calls the tools that
`nimblemcp run --openapi` makes from the Swagger Petstore document (issue 35, item 1):
the real pet store (tests/_petstore.py) in one process, the MCP server in another, the
peer's client in a third (tests/interop/sdk_openapi_client.py). The peer sends the
header `api_key` on every MCP request; `--forward-headers api_key` passes it on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from _peers import INTEROP, free_port, mcp_python, running
from _petstore import API_KEY, OPERATIONS

HERE = Path(__file__).parent


def sdk_client(url: str, api_key: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(mcp_python()), str(INTEROP / "sdk_openapi_client.py"), url, api_key],
                          capture_output=True, text=True, timeout=180, env=env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"the SDK client failed:\n{done.stdout}\n{done.stderr}"
    out: dict[str, Any] = json.loads(lines[-1])
    assert "error" not in out, out["error"]
    return out


def text(result: dict[str, Any]) -> str:
    return "".join(block["text"] for block in result["content"] if block["type"] == "text")


def test_the_official_client_calls_the_petstore_through_nimblemcp_run_openapi() -> None:
    store_port, mcp_port = free_port(), free_port()
    api = f"http://127.0.0.1:{store_port}/api/v3"
    command = [sys.executable, "-m", "nimblemcp", "run", "--openapi", f"{api}/openapi.yaml", "--base-url", api,
               "--transport", "http", "--port", str(mcp_port), "--forward-headers", "api_key"]
    with running([sys.executable, str(HERE / "_petstore.py"), str(store_port)], store_port, "the pet store"), \
            running(command, mcp_port, "nimblemcp run --openapi"):
        out = sdk_client(f"http://127.0.0.1:{mcp_port}/mcp", API_KEY)
        wrong_key = sdk_client(f"http://127.0.0.1:{mcp_port}/mcp", "wrong-key")
    assert out["server_name"] == "Swagger Petstore - OpenAPI 3.0"
    assert list(out["tools"]) == OPERATIONS
    assert out["tools"]["getPetById"]["outputSchema"]["required"] == ["name", "photoUrls"]
    # The SDK validates structuredContent against each outputSchema: these passed.
    added = out["addPet"]["structuredContent"]
    assert added["name"] == "Fido" and added["category"] == {"id": 1, "name": "Dogs"}
    assert out["getPetById"]["structuredContent"] == added
    assert out["missing"]["isError"] is True
    assert text(out["missing"]) == 'HTTP 404 Not Found from GET /api/v3/pet/424242: {"code":404,"message":"Pet not found"}'
    assert [p["name"] for p in json.loads(text(out["findPetsByStatus"]))] == ["Fido"]
    assert {p["name"] for p in json.loads(text(out["findPetsByTags"]))} == {"Rex", "Tom"}
    assert out["getInventory"].get("isError") is not True
    assert out["getInventory"]["structuredContent"]["pending"] == 1
    assert out["updatePetWithForm"]["structuredContent"]["status"] == "sold"
    assert text(out["deletePet"]) == "Pet deleted"
    assert out["deleted"]["isError"] is True and "HTTP 404" in text(out["deleted"])
    assert json.loads(text(out["loginUser"])) == "logged in user session: ada"
    # The same calls with a key the store refuses: the forwarded header is what opened it.
    assert wrong_key["getInventory"]["isError"] is True and "HTTP 401" in text(wrong_key["getInventory"])
    assert wrong_key["deletePet"]["isError"] is True and "HTTP 401" in text(wrong_key["deletePet"])
