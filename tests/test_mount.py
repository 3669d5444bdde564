"""Issue 19: `server.mount(other, namespace=...)`: prefixed names and URIs, schemas and
annotations kept, list changes and resource updates propagated, the child's lifespan
and ctx.lifespan; over the in-memory client and real HTTP (uvicorn on loopback)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tests._serving import serving

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.testing import connect


def _notes(events: list[str]) -> m.Server:
    @contextlib.asynccontextmanager
    async def lifespan(server: m.Server) -> AsyncIterator[dict[str, Any]]:
        events.append("notes:start")
        yield {"store": {"1": "first note"}}
        events.append("notes:stop")

    notes = m.Server("notes", lifespan=lifespan)

    @notes.tool(annotations={"readOnlyHint": True}, title="Search notes")
    def search(query: str, limit: int = 5, *, ctx: m.Context) -> list[str]:
        """Find notes.

        Args:
            query: words to look for
        """
        store: dict[str, str] = ctx.lifespan["store"]
        return [t for t in store.values() if query in t][:limit]

    @notes.prompt()
    def summarize(topic: str) -> str:
        return f"summarize {topic}"

    @notes.resource("notes://index", mime_type="text/plain")
    def index(ctx: m.Context) -> str:
        return ",".join(ctx.lifespan["store"])

    @notes.resource("notes://note/{id}", complete={"id": lambda value, context: ["1", "2"]})
    def note(id: str, ctx: m.Context) -> str:
        return str(ctx.lifespan["store"][id])

    return notes


def _host(events: list[str]) -> tuple[m.Server, m.Server]:
    @contextlib.asynccontextmanager
    async def lifespan(server: m.Server) -> AsyncIterator[str]:
        events.append("host:start")
        yield "host-value"
        events.append("host:stop")

    host = m.Server("host", lifespan=lifespan)

    @host.tool()
    def hello(ctx: m.Context) -> str:
        return str(ctx.lifespan)

    notes = _notes(events)
    host.mount(notes, namespace="notes")
    return host, notes


async def test_names_uris_schemas_and_annotations() -> None:
    host, notes = _host([])
    assert set(host.tools) == {"hello", "notes_search"}
    mounted, original = host.tools["notes_search"].definition, notes.tools["search"].definition
    assert mounted["name"] == "notes_search"
    assert {k: v for k, v in mounted.items() if k != "name"} == {k: v for k, v in original.items() if k != "name"}
    assert mounted["annotations"] == {"readOnlyHint": True}
    assert mounted["inputSchema"]["properties"]["query"]["description"] == "words to look for"
    assert set(host.prompts) == {"notes_summarize"}
    assert set(host.resources) == {"notes://notes/index"}
    assert set(host.templates) == {"notes://notes/note/{id}"}
    assert host.resources["notes://notes/index"].definition["mimeType"] == "text/plain"
    assert notes.tools["search"].definition["name"] == "search"  # the child is untouched


async def test_calls_reads_prompts_completions_and_lifespans() -> None:
    events: list[str] = []
    host, _ = _host(events)
    async with connect(host) as client:
        assert events == ["host:start", "notes:start"]
        found = await client.call_tool("notes_search", {"query": "first"})
        assert found["structuredContent"] == {"result": ["first note"]}
        assert (await client.call_tool("hello"))["content"][0]["text"] == "host-value"
        index = await client.read_resource("notes://notes/index")
        assert index["contents"][0] == {"uri": "notes://notes/index", "mimeType": "text/plain", "text": "1"}
        one = await client.read_resource("notes://notes/note/1")
        assert one["contents"][0]["uri"] == "notes://notes/note/1"
        assert one["contents"][0]["text"] == "first note"
        with pytest.raises(m.InvalidParams, match="not found"):
            await client.read_resource("notes://note/1")  # the child's own URI is not served
        got = await client.get_prompt("notes_summarize", {"topic": "x"})
        assert got["messages"][0]["content"]["text"] == "summarize x"
        done = await client.complete({"type": "ref/resource", "uri": "notes://notes/note/{id}"}, "id", "")
        assert done["completion"]["values"] == ["1", "2"]
    assert events == ["host:start", "notes:start", "notes:stop", "host:stop"]


async def test_changes_and_updates_propagate() -> None:
    host, notes = _host([])
    kinds: list[str] = []
    host._change_listeners.append(kinds.append)
    changes = host.changes()
    assert changes is not None
    async with changes as events:

        @notes.tool()
        def later() -> str:
            return "late"

        assert "notes_later" in host.tools and kinds == ["tools"]
        notes.remove_tool("later")
        assert "notes_later" not in host.tools
        notes.notify_resource_updated("notes://note/1")
        seen = []
        async with asyncio.timeout(5):
            async for event in events:
                seen.append((event.kind, event.uri))
                if event.kind == "updated":
                    break
        assert ("updated", "notes://notes/note/1") in seen and ("tools", None) in seen


async def test_host_is_ready_once_the_mounted_lifespans_run() -> None:
    host = m.Server("bare-host")
    host.mount(_notes([]), namespace="notes")
    assert not host.ready  # the mounted server has a lifespan to start
    async with host.lifespan_context():
        assert host.ready
    assert m.Server("nothing-to-start").ready


def test_mistakes_are_refused() -> None:
    host, notes = _host([])
    with pytest.raises(ValueError, match="already mounted"):
        host.mount(notes, namespace="again")
    with pytest.raises(ValueError, match="namespace"):
        host.mount(m.Server("x"), namespace="bad name")
    with pytest.raises(ValueError, match="itself"):
        host.mount(host)
    clash = m.Server("clash")

    @clash.tool()
    def hello() -> str:
        return "no"

    with pytest.raises(ValueError, match="hello"):
        host.mount(clash)


async def test_mounted_server_over_http() -> None:
    events: list[str] = []
    host, _ = _host(events)
    async with host.lifespan_context(), serving(host.asgi_app()) as base, Client(base + "/mcp") as client:
        names = [t["name"] for t in await client.list_tools()]
        assert names == ["hello", "notes_search"]
        found = await client.call_tool("notes_search", {"query": "note"})
        assert found["structuredContent"] == {"result": ["first note"]}
        templates = await client.list_resource_templates()
        assert [t["uriTemplate"] for t in templates] == ["notes://notes/note/{id}"]
