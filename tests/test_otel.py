"""OpenTelemetry (issue 14): our client's CLIENT span per request is the parent of our
server's SERVER span (`Tracing()` middleware), across real HTTP (uvicorn on loopback)
and stdio, with the MCP semantic-convention attributes; and a process that does not
trace never imports OpenTelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nimblemcp import Server, ToolError
from nimblemcp.middleware import Tracing
from nimblemcp.testing import connect

SCENARIO = Path(__file__).parent / "fixtures" / "otel_scenario.py"


def run_scenario(mode: str) -> dict[str, list[dict[str, Any]]]:
    done = subprocess.run([sys.executable, str(SCENARIO), mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("mode", ["http", "stdio", "http-legacy"])
def test_server_spans_are_children_of_the_client_spans(mode: str) -> None:
    spans = run_scenario(mode)
    client = {s["attributes"]["jsonrpc.request.id"]: s for s in spans["client"] if s["kind"] == "CLIENT"}
    app = next(s for s in spans["client"] if s["name"] == "app")
    server = [s for s in spans["server"] if s["kind"] == "SERVER"]
    calls = [s for s in server if s["attributes"]["mcp.method.name"] == "tools/call"]
    assert [s["name"] for s in calls] == ["tools/call add", "tools/call fail", "tools/call missing"]
    for span in server:
        parent = client[span["attributes"]["jsonrpc.request.id"]]
        assert span["parent_id"] == parent["span_id"]
        assert span["trace_id"] == parent["trace_id"] == app["trace_id"]
        assert span["attributes"]["mcp.protocol.version"] == parent["attributes"]["mcp.protocol.version"]
    for span in calls:
        assert client[span["attributes"]["jsonrpc.request.id"]]["parent_id"] == app["span_id"]
    add, fail, missing = calls
    assert add["attributes"]["gen_ai.tool.name"] == "add"
    assert add["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert add["status"] == "UNSET" and "error.type" not in add["attributes"]
    assert fail["attributes"]["error.type"] == "tool_error" and fail["status"] == "ERROR"
    assert missing["attributes"]["error.type"] == "-32602"
    assert missing["attributes"]["rpc.response.status_code"] == "-32602"
    assert client[missing["attributes"]["jsonrpc.request.id"]]["attributes"]["error.type"] == "-32602"
    if mode.startswith("http"):
        assert add["attributes"]["network.transport"] == "tcp"
    else:
        assert "network.transport" not in add["attributes"]
    if mode == "http-legacy":  # a 2025-11-25 session: its id, hashed (it is a credential)
        assert add["attributes"]["mcp.protocol.version"] == "2025-11-25"
        labels = {s["attributes"]["mcp.session.id"] for s in server}
        assert len(labels) == 1 and len(labels.pop()) == 16
    else:
        assert add["attributes"]["mcp.protocol.version"] == "2026-07-28"
        assert all("mcp.session.id" not in s["attributes"] for s in server)


def recorded_server() -> tuple[Server, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = Server("traced", middleware=[Tracing(provider)])

    @server.tool
    def boom() -> str:
        """Fails unexpectedly."""
        raise RuntimeError("kaput")

    @server.tool
    def nope() -> str:
        """A tool error."""
        raise ToolError("nope")

    @server.prompt
    def greet(name: str) -> str:
        """A greeting."""
        return f"Hello {name}"

    @server.resource("memo://one")
    def one() -> str:
        """A memo."""
        return "1"

    return server, exporter


async def test_explicit_traceparent_parents_the_server_span_and_names_follow_the_conventions() -> None:
    server, exporter = recorded_server()
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with connect(server) as client:
        await client.call_tool("nope", {}, traceparent=parent)
        await client.get_prompt("greet", {"name": "Ada"})
        await client.read_resource("memo://one")
        result = await client.call_tool("boom", {})
    spans = {s.name: s for s in exporter.get_finished_spans()}
    nope = spans["tools/call nope"]
    assert nope.parent is not None and format(nope.parent.span_id, "016x") == "b7ad6b7169203331"
    assert format(nope.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert nope.attributes is not None and nope.attributes["error.type"] == "tool_error"
    assert spans["prompts/get greet"].attributes == {
        "mcp.method.name": "prompts/get", "gen_ai.prompt.name": "greet",
        "jsonrpc.request.id": spans["prompts/get greet"].attributes["jsonrpc.request.id"],  # type: ignore[index]
        "mcp.protocol.version": "2026-07-28",
    }
    read = spans["resources/read"]
    assert read.attributes is not None and read.attributes["mcp.resource.uri"] == "memo://one"
    assert read.parent is None  # nothing to join: a root span
    boom = spans["tools/call boom"]
    assert result["isError"] is True  # the server masks the failure as a tool error result
    assert boom.attributes is not None and boom.attributes["error.type"] == "tool_error"


def test_no_opentelemetry_import_without_tracing() -> None:
    """The cost of not tracing is zero: a server and a client doing a tools/call never
    import OpenTelemetry."""
    code = (
        "import asyncio, sys\n"
        "from nimblemcp import Server\n"
        "from nimblemcp.testing import connect\n"
        "import nimblemcp.middleware\n"
        "s = Server('plain')\n"
        "@s.tool\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
        "async def main():\n"
        "    async with connect(s) as c:\n"
        "        assert (await c.call_tool('add', {'a': 1, 'b': 2}))['structuredContent']['result'] == 3\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
