"""A real public OpenAPI document (the Swagger Petstore 3.0, vendored with its licence
under tests/fixtures/petstore/) served as MCP tools (issue 35, item 1), calling a small
pet store that answers it (tests/_petstore.py) in its own process on a loopback port:
in-process through `Server.from_openapi`, and without code through
`nimblemcp run --openapi URL --base-url URL` over stdio and HTTP.

The official SDK's client against the same command: tests/test_openapi_interop.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _peers import free_port, running
from _petstore import API_KEY, DOCUMENT, OPERATIONS

from nimblemcp import Client, Server
from nimblemcp.openapi import GET_AS_RESOURCES
from nimblemcp.testing import connect
from nimblemcp.transports.client.http import HttpTransport


@pytest.fixture(scope="module")
def petstore() -> Iterator[str]:
    """The pet store in its own process; yields its API root, http://127.0.0.1:PORT/api/v3."""
    port = free_port()
    with running([sys.executable, str(Path(__file__).parent / "_petstore.py"), str(port)], port, "the pet store"):
        yield f"http://127.0.0.1:{port}/api/v3"


def by_name(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in tools}


async def test_the_document_becomes_nineteen_tools(petstore: str) -> None:
    server = Server.from_openapi(DOCUMENT, base_url=petstore)
    assert server.name == "Swagger Petstore - OpenAPI 3.0"
    async with connect(server) as client:
        listed = await client.list_tools()
    assert [t["name"] for t in listed] == OPERATIONS
    tools = by_name(listed)
    add = tools["addPet"]
    assert add["description"] == "Add a new pet to the store."
    # The body (a $ref to Pet) spread into arguments; Category and Tag inlined.
    assert set(add["inputSchema"]["properties"]) == {"id", "name", "category", "photoUrls", "tags", "status"}
    assert add["inputSchema"]["required"] == ["name", "photoUrls"]
    assert add["inputSchema"]["properties"]["category"]["properties"]["name"] == {"type": "string",
                                                                                   "examples": ["Dogs"]}
    assert add["outputSchema"]["type"] == "object" and add["outputSchema"]["required"] == ["name", "photoUrls"]
    by_status = tools["findPetsByStatus"]
    assert by_status["description"] == ("Finds Pets by status.\n\n"
                                        "Multiple status values can be provided with comma separated strings.")
    assert by_status["inputSchema"]["properties"]["status"]["enum"] == ["available", "pending", "sold"]
    assert "outputSchema" not in by_status and "outputSchema" not in tools["loginUser"]  # array, string
    delete = tools["deletePet"]
    assert set(delete["inputSchema"]["properties"]) == {"petId", "api_key"}
    assert delete["inputSchema"]["required"] == ["petId"]
    assert delete["annotations"] == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True,
                                     "openWorldHint": True}
    assert tools["getPetById"]["annotations"]["readOnlyHint"] is True
    assert tools["uploadFile"]["inputSchema"]["properties"]["body"] == {"type": "string", "format": "binary"}
    assert tools["getInventory"]["outputSchema"] == {
        "type": "object", "additionalProperties": {"type": "integer", "format": "int32"}}


async def test_calls_reach_the_store_and_its_errors_come_back(petstore: str) -> None:
    keyed = httpx.AsyncClient(base_url=petstore, headers={"api_key": API_KEY})
    for http in (None, keyed):
        server = Server.from_openapi(DOCUMENT, base_url=None if http else petstore, http=http)
        async with connect(server) as client:
            made = await client.call_tool("addPet", {"name": "Fido", "photoUrls": [], "status": "pending",
                                                     "tags": [{"id": 9, "name": "new"}]})
            pet = made["structuredContent"]
            assert pet["name"] == "Fido" and isinstance(pet["id"], int)
            assert json.loads(made["content"][0]["text"]) == pet
            got = await client.call_tool("getPetById", {"petId": pet["id"]})
            assert got["structuredContent"] == pet
            tagged = await client.call_tool("findPetsByTags", {"tags": ["good", "new"]})
            names = {p["name"] for p in json.loads(tagged["content"][0]["text"])}
            assert {"Rex", "Fido"} <= names  # both values of the exploded query array arrived
            renamed = await client.call_tool("updatePetWithForm", {"petId": pet["id"], "name": "Fido II"})
            assert renamed["structuredContent"]["name"] == "Fido II"
            upload = await client.call_tool("uploadFile", {"petId": pet["id"], "body": "12345",
                                                           "additionalMetadata": "photo"})
            assert upload["structuredContent"]["message"] == "5 bytes photo"
            no_name = await client.call_tool("updatePet", {"id": pet["id"], "photoUrls": []})
            assert no_name["isError"] is True  # the document's schema says a pet has a name: no request sent
            assert no_name["content"][0]["text"] == ("Invalid arguments for tool updatePet: arguments: "
                                                     "'name' is a required property")
            deleted = await client.call_tool("deletePet", {"petId": pet["id"]})
            if http is None:  # the store wants its api_key header
                assert deleted["isError"] is True and "401" in deleted["content"][0]["text"]
                assert (await client.call_tool("deletePet", {"petId": pet["id"], "api_key": API_KEY})) \
                    ["content"][0]["text"] == "Pet deleted"
            else:  # the caller's client carries it
                assert deleted["content"][0]["text"] == "Pet deleted"
            # A path value stays in its segment: no climbing to another endpoint.
            climb = await client.call_tool("getUserByName", {"username": ".."})
            assert climb["isError"] is True and "'..' is not a value for a path parameter" in climb["content"][0]["text"]
            slashed = await client.call_tool("getUserByName", {"username": "x/../../pet/1"})
            assert slashed["content"][0]["text"] == "HTTP 404 Not Found from GET /api/v3/user/x%2F..%2F..%2Fpet%2F1: Not Found"
            gone = await client.call_tool("getPetById", {"petId": pet["id"]})
            assert gone["isError"] is True
            assert gone["content"][0]["text"] == (f"HTTP 404 Not Found from GET /api/v3/pet/{pet['id']}: "
                                                  '{"code":404,"message":"Pet not found"}')
    await keyed.aclose()


async def test_get_operations_as_resources(petstore: str) -> None:
    server = Server.from_openapi(DOCUMENT, base_url=petstore, routes=GET_AS_RESOURCES)
    async with connect(server) as client:
        resources = sorted(r["uri"] for r in await client.list_resources())
        templates = sorted(t["uriTemplate"] for t in await client.list_resource_templates())
        tools = {t["name"] for t in await client.list_tools()}
        pet = json.loads((await client.read_resource("api://pet/1"))["contents"][0]["text"])
        user = await client.read_resource("api://user/user1")
        logout = await client.read_resource("api://user/logout")
    # GETs without required query parameters are resources; those with path parameters templates.
    assert resources == ["api://pet/findByStatus", "api://pet/findByTags", "api://store/inventory",
                         "api://user/login", "api://user/logout"]
    assert templates == ["api://pet/{petId}", "api://store/order/{orderId}", "api://user/{username}"]
    assert "getPetById" not in tools and "addPet" in tools
    assert pet["name"] == "Rex"
    assert user["contents"][0]["mimeType"] == "application/json" and '"firstName":"Ada"' in user["contents"][0]["text"]
    assert logout["contents"] == [{"uri": "api://user/logout", "mimeType": "text/plain", "text": "User logged out"}]


def test_nimblemcp_run_openapi_over_stdio(petstore: str) -> None:
    import asyncio

    async def run() -> dict[str, Any]:
        command = [sys.executable, "-m", "nimblemcp", "run", "--openapi", str(DOCUMENT), "--base-url", petstore]
        async with Client(command) as client:
            return {"tools": [t["name"] for t in await client.list_tools()],
                    "pet": await client.call_tool("getPetById", {"petId": 1}),
                    "info": client.server_info}

    out = asyncio.run(run())
    assert out["tools"] == OPERATIONS
    assert out["pet"]["structuredContent"]["name"] == "Rex"
    assert out["info"]["name"] == "Swagger Petstore - OpenAPI 3.0"


async def test_nimblemcp_run_openapi_url_over_http_forwards_named_headers(petstore: str) -> None:
    port = free_port()
    command = [sys.executable, "-m", "nimblemcp", "run", "--openapi", f"{petstore}/openapi.yaml",
               "--base-url", petstore, "--transport", "http", "--port", str(port), "--forward-headers", "api_key"]
    with running(command, port, "nimblemcp run --openapi"):
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(HttpTransport(url, headers={"api_key": API_KEY})) as client:
            inventory = await client.call_tool("getInventory", {})
        async with Client(url) as client:
            refused = await client.call_tool("getInventory", {})
    assert isinstance(inventory["structuredContent"].get("available"), int)
    assert refused["isError"] is True and "HTTP 401" in refused["content"][0]["text"]


def test_nimblemcp_run_says_what_is_missing(tmp_path: Path) -> None:
    import subprocess

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "nimblemcp", "run", *args], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode != 0
        return done.stderr.strip().splitlines()[-1]

    assert run() == "nimblemcp: run needs a server (path/to/server.py[:object]) or --openapi URL_OR_FILE"
    assert run("server.py", "--openapi", str(DOCUMENT)) == "nimblemcp: give a server (server.py) or --openapi, not both"
    (tmp_path / "no_server.json").write_text(json.dumps({"openapi": "3.1.0", "info": {}, "paths": {}}))
    assert run("--openapi", str(tmp_path / "no_server.json")) == (
        f"nimblemcp: --openapi {tmp_path / 'no_server.json'}: the document names no absolute server URL to call: "
        "give base_url= (nimblemcp run: --base-url)")
