"""Consistent registrations across instances (issue 13).

The rule: a tool, prompt, resource or template registered before serving starts (at
import time, in the lifespan's start-up) is on every instance, because every instance
runs the same code. A runtime `add_*`/`remove_*` while serving with shared backends
(a Redis store or bus) would be served by one instance while every instance's listeners
heard of it, so it raises `RegistrationNotShared`, unless the server declares
`registrations="local"` (each instance makes the change itself, or requests are routed
to it). With the in-process default backends nothing changes.

Two real `nimblemcp run` instances sharing one real Redis prove it end to end; the
in-process tests use the same real Redis through `RedisStore`/`RedisBus`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _deploy import HANG_GUARD, META, headers, launch, stop
from _redis import RedisServer, free_port, shared
from _sse_parser import SSEParser

import nimblemcp as m
from nimblemcp import Backends
from nimblemcp.errors import McpError, RegistrationNotShared
from nimblemcp.server._prompts import PromptEntry
from nimblemcp.server._resources import ResourceEntry, TemplateEntry
from nimblemcp.server._sealing import new_key
from nimblemcp.testing import connect


def hello() -> str:
    return "hello"


def test_the_error_is_public_and_in_the_tree() -> None:
    assert issubclass(RegistrationNotShared, McpError) and issubclass(RegistrationNotShared, RuntimeError)
    assert m.errors.RegistrationNotShared is RegistrationNotShared


def test_registrations_option_is_checked() -> None:
    with pytest.raises(ValueError, match="registrations"):
        m.Server("x", registrations="everywhere")  # type: ignore[arg-type]


async def test_memory_backends_keep_runtime_registration() -> None:
    server = m.Server("solo")
    server.add_tool(hello, name="first")
    async with connect(server) as client:
        server.add_tool(hello)
        assert [t["name"] for t in await client.list_tools()] == ["first", "hello"]
        server.remove_tool("hello")
        assert [t["name"] for t in await client.list_tools()] == ["first"]


async def test_runtime_changes_with_shared_backends_are_refused(redis: RedisServer) -> None:
    async with shared(redis) as (store, bus):
        @contextlib.asynccontextmanager
        async def lifespan(s: m.Server) -> AsyncIterator[None]:
            s.add_tool(hello, name="at_startup")  # lifespan start-up: fine
            yield
            s.remove_tool("at_startup")  # shut-down: fine too

        server = m.Server("shared", lifespan=lifespan, backends=Backends(store=store, bus=bus))
        server.add_tool(hello, name="early")  # import time: fine
        server.add_prompt(PromptEntry(hello, name="early_prompt"))
        async with connect(server) as client:
            with pytest.raises(RegistrationNotShared, match="registrations=\"local\"") as refused:
                server.add_tool(hello, name="late")
            assert (refused.value.kind, refused.value.name) == ("tool", "late")
            assert "RedisStore" in str(refused.value) and "import time" in str(refused.value)
            for change in (
                lambda: server.remove_tool("early"),
                lambda: server.add_prompt(PromptEntry(hello, name="late_prompt")),
                lambda: server.remove_prompt("early_prompt"),
                lambda: server.add_resource(ResourceEntry("test://late", hello)),
                lambda: server.add_template(TemplateEntry("test://items/{id}", lambda id: id)),
            ):
                with pytest.raises(RegistrationNotShared):
                    change()
            assert sorted(server.tools) == ["at_startup", "early"] and "early_prompt" in server.prompts
            assert sorted(t["name"] for t in await client.list_tools()) == ["at_startup", "early"]
        assert sorted(server.tools) == ["early"]
        server.add_tool(hello, name="after")  # no longer serving: fine


async def test_local_registrations_are_allowed(redis: RedisServer) -> None:
    async with shared(redis) as (store, bus):
        server = m.Server("local", registrations="local", backends=Backends(store=store, bus=bus))
        async with connect(server) as client:
            server.add_tool(hello, name="late")
            server.add_resource(ResourceEntry("test://late", hello))
            server.remove_resource("test://late")
            assert [t["name"] for t in await client.list_tools()] == ["late"]


async def test_a_mounted_servers_runtime_change_is_refused_by_its_shared_host(redis: RedisServer) -> None:
    async with shared(redis) as (store, bus):
        host = m.Server("host", backends=Backends(store=store, bus=bus))
        child = m.Server("child")
        host.mount(child, "c")
        async with connect(host):
            with pytest.raises(RegistrationNotShared, match="mounted in 'host'"):
                child.add_tool(hello)
            assert not child.tools and "c_hello" not in host.tools
            with pytest.raises(RegistrationNotShared, match="cannot mount server 'late'"):
                host.mount(m.Server("late"), "late")  # mounting while serving: the same rule
            assert [s.name for s in host.mounted] == ["child"]
        local_host = m.Server("host2", registrations="local", backends=Backends(store=store, bus=bus))
        local_host.mount(child, "c")
        async with connect(local_host) as client:
            child.add_tool(hello)
            assert [t["name"] for t in await client.list_tools()] == ["c_hello"]


# -- two real instances, one real Redis ------------------------------------------------

SOURCE = '''
import contextlib
import os

import nimblemcp as m

ME = os.environ["INSTANCE"]


@contextlib.asynccontextmanager
async def lifespan(server):
    server.add_tool(lambda: "started", name="from_startup")  # every instance does it
    yield


server = m.Server("registrations", lifespan=lifespan,
                  registrations=os.environ.get("REGISTRATIONS", "shared"))


@server.tool
def add_tool(name: str) -> str:
    try:
        server.add_tool(lambda: "late " + ME, name=name)
    except m.errors.RegistrationNotShared as exc:
        return f"refused on {ME}: {exc}"
    return f"added on {ME}"


@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return ME


@server.resource("test://doc")
def doc() -> str:
    return "doc"
'''


class Events:
    def __init__(self, chunks: Any) -> None:
        self.chunks, self.parser, self.pending = chunks, SSEParser(), []

    async def next(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            while not self.pending:
                self.pending.extend(self.parser.feed(await self.chunks.__anext__()))
            return orjson.loads(self.pending.pop(0))  # type: ignore[no-any-return]

        return await asyncio.wait_for(read(), HANG_GUARD)

    async def until_updated(self, uri: str) -> None:
        while (event := await self.next()).get("method") != "notifications/resources/updated" \
                or event["params"]["uri"] != uri:
            pass


async def rpc(c: httpx.AsyncClient, url: str, method: str, params: dict[str, Any],
              name: str | None = None) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": META, **params}}
    r = await c.post(url, content=orjson.dumps(body), headers=headers(method, name))
    reply: dict[str, Any] = r.json()
    assert "result" in reply, reply
    return reply["result"]


async def tool_text(c: httpx.AsyncClient, url: str, name: str, arguments: dict[str, Any]) -> str:
    result = await rpc(c, url, "tools/call", {"name": name, "arguments": arguments}, name)
    return str(result["content"][0]["text"])


async def names(c: httpx.AsyncClient, url: str) -> list[str]:
    return sorted(t["name"] for t in (await rpc(c, url, "tools/list", {}))["tools"])


@contextlib.contextmanager
def two_instances(tmp: Path, redis: RedisServer, registrations: str) -> Iterator[list[str]]:
    src = tmp / "registrations_server.py"
    src.write_text(SOURCE)
    env = {"NIMBLEMCP_STATE_KEYS": new_key(), "NIMBLEMCP_REDIS_URL": redis.url,
           "REGISTRATIONS": registrations}
    procs = []
    try:
        urls = []
        for name in ("A", "B"):
            port = free_port()
            procs.append(launch(src, port, tmp / f"{name}.log", env={**env, "INSTANCE": name}))
            urls.append(f"http://127.0.0.1:{port}/mcp")
        yield urls
        for proc in procs:
            assert stop(proc, signal.SIGINT) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


LISTEN = {"notifications": {"toolsListChanged": True, "resourceSubscriptions": ["test://"]}}


async def test_two_instances_refuse_a_runtime_tool_and_stay_identical(tmp_path: Path, redis: RedisServer) -> None:
    with two_instances(tmp_path, redis, "shared") as (a, b):
        async with httpx.AsyncClient(timeout=HANG_GUARD, headers={"connection": "close"}) as c:
            expected = ["add_tool", "from_startup", "touch"]  # the lifespan's tool on both
            assert await names(c, a) == expected and await names(c, b) == expected
            body = {"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                    "params": {"_meta": META, **LISTEN}}
            async with c.stream("POST", a, content=orjson.dumps(body),
                                headers=headers("subscriptions/listen")) as stream:
                events = Events(stream.aiter_bytes())
                assert (await events.next())["method"] == "notifications/subscriptions/acknowledged"
                for url, marker in ((a, "test://a"), (b, "test://b")):  # start-up events flushed
                    await tool_text(c, url, "touch", {"uri": marker})
                    await events.until_updated(marker)

                answer = await tool_text(c, b, "add_tool", {"name": "late"})
                assert answer.startswith("refused on B: cannot add tool 'late'"), answer
                assert "registrations=\"local\"" in answer
                assert await names(c, a) == expected and await names(c, b) == expected
                # The listener on A heard nothing of it: the next event is the marker.
                await tool_text(c, b, "touch", {"uri": "test://end"})
                end = await events.next()
                assert end["method"] == "notifications/resources/updated", end
                assert end["params"]["uri"] == "test://end"


async def test_two_instances_with_local_registrations_add_on_the_instance_asked(
    tmp_path: Path, redis: RedisServer,
) -> None:
    with two_instances(tmp_path, redis, "local") as (a, b):
        async with httpx.AsyncClient(timeout=HANG_GUARD, headers={"connection": "close"}) as c:
            assert await tool_text(c, b, "add_tool", {"name": "late"}) == "added on B"
            assert "late" in await names(c, b) and "late" not in await names(c, a)
            assert await tool_text(c, a, "add_tool", {"name": "late"}) == "added on A"
            assert await names(c, a) == await names(c, b)
