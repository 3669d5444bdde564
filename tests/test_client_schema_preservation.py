"""JSON Schema 2020-12 keywords survive the client end to end (SEP-1613, SEP-2106; the
conformance scenario `json-schema-2020-12-preservation`): what our server publishes as
a tool's inputSchema is exactly what `Client.list_tools` returns, in both eras, and the
conformance client echoes it back unchanged."""

from __future__ import annotations

import asyncio
import copy
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.transports.http.app import asgi_app

CLIENT = Path(__file__).resolve().parents[1] / "examples" / "conformance" / "client.py"

RICH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://example.com/schemas/contact",
    "$comment": "every keyword below must come back untouched",
    "type": "object",
    "$defs": {
        "address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                    "unevaluatedProperties": False},
        "tag": {"type": "string", "pattern": "^[a-z]+$"},
    },
    "properties": {
        "name": {"type": "string", "minLength": 1, "default": "anonymous"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
                  "items": False},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "contains": {"const": "vip"},
                 "minContains": 1, "maxContains": 3, "uniqueItems": True},
        "extra": {"type": "object", "patternProperties": {"^x-": {"type": "string"}},
                  "propertyNames": {"maxLength": 20}},
        "nothing": {"type": "null"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "oneOf": [{"not": {"required": ["nothing"]}}, {"required": ["nothing"]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "dependentRequired": {"phone": ["name"]},
    "dependentSchemas": {"email": {"properties": {"email": {"minLength": 3}}}},
    "additionalProperties": False,
}


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    echoed: list[dict[str, Any]] = []
    server = m.Server("schema-peer")

    @server.tool(name="json_schema_2020_12_tool", input_schema=copy.deepcopy(RICH_SCHEMA))
    def focal(**contact: Any) -> str:
        """Tool with JSON Schema 2020-12 features"""
        return "ok"

    echo_schema = {"type": "object", "properties": {"schema": {"type": "object"}}, "required": ["schema"]}

    @server.tool(name="json_schema_echo", input_schema=echo_schema)
    def echo(**args: Any) -> str:
        """Echoes a schema back."""
        echoed.append(args["schema"])
        return "echoed"

    uv = uvicorn.Server(uvicorn.Config(asgi_app(server), host="127.0.0.1", port=0, log_level="warning",
                                       lifespan="off"))
    task = asyncio.create_task(uv.serve())
    while not uv.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = uv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp", echoed
    finally:
        uv.should_exit = True
        await task


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_list_tools_returns_the_schema_exactly(served: tuple[str, list[dict[str, Any]]], mode: str) -> None:
    url, _ = served
    async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
        tools = {t["name"]: t for t in await client.list_tools()}
        assert tools["json_schema_2020_12_tool"]["inputSchema"] == RICH_SCHEMA
        # the cached listing is the same data, and calling through it changes nothing
        again = {t["name"]: t for t in await client.list_tools()}
        assert again["json_schema_2020_12_tool"]["inputSchema"] == RICH_SCHEMA


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
async def test_the_conformance_client_echoes_it_unchanged(
    served: tuple[str, list[dict[str, Any]]], version: str,
) -> None:
    url, echoed = served
    env = {**os.environ, "MCP_CONFORMANCE_SCENARIO": "json-schema-2020-12-preservation",
           "MCP_CONFORMANCE_PROTOCOL_VERSION": version}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENT), url, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert echoed == [RICH_SCHEMA]
