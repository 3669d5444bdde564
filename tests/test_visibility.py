"""Tags and enable/disable (issue 35, item 3): `Server(include_tags=, exclude_tags=)`,
`tags=` on tools, prompts, resources and templates, `server.enable/disable` at run time
with `list_changed` to listeners, the same on every instance sharing a Redis (and on
one started later), and lists that show only what the caller's scopes allow.

Real servers: `nimblemcp run --transport http` processes on loopback (two, then a third,
on one real Redis), our Client and the official `mcp` SDK's; uvicorn in-process for the
scopes (tokens from `StaticTokens`)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import _peers
import pytest
from _deploy import launch, stop
from _redis import RedisServer, free_port
from tests._serving import serving

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.client import Client
from nimblemcp.errors import McpError
from nimblemcp.testing import connect
from nimblemcp.transports.auth.bearer import AccessToken, StaticTokens
from nimblemcp.transports.client.http import HttpTransport

DEADLINE = 30.0  # only so a failure cannot hang the run

SOURCE = '''
import nimblemcp as m

server = m.Server("tagged", exclude_tags={"internal"})


@server.tool(tags={"beta"})
def forecast(city: str) -> str:
    """Tomorrow's weather."""
    return f"sunny in {city}"


@server.tool(tags={"stable"})
def echo(text: str) -> str:
    return text


@server.tool(tags={"internal"})
def debug_dump() -> str:
    return "secrets"


@server.tool(tags={"admin"})
def switch(on: bool, tool: str = "", tag: str = "") -> str:
    """Turn a tool (or every component of a tag) on or off, on every instance."""
    flip = server.enable if on else server.disable
    flip(tool=tool or None, tags={tag} if tag else None)
    return "ok"


@server.prompt(tags={"beta"})
def plan(goal: str) -> str:
    return f"Plan for {goal}"


@server.resource("notes://beta", tags={"beta"})
def beta_notes() -> str:
    return "beta notes"


@server.resource("notes://{name}", tags={"stable"})
def note(name: str) -> str:
    return f"note {name}"
'''


async def tool_names(client: Client) -> set[str]:
    return {t["name"] for t in await client.list_tools(cache=False)}


def test_include_and_exclude_tags_choose_what_is_served() -> None:
    server = m.Server("s", include_tags={"public"}, exclude_tags={"internal"})

    @server.tool(tags={"public"})
    def a() -> str:
        return "a"

    @server.tool(tags={"public", "internal"})
    def b() -> str:
        return "b"

    @server.tool
    def c() -> str:
        return "c"

    @server.prompt(tags={"public"})
    def p() -> str:
        return "p"

    @server.prompt
    def q() -> str:
        return "q"

    async def check() -> None:
        async with connect(server) as client:
            assert await tool_names(client) == {"a"}
            assert [x["name"] for x in await client.list_prompts(cache=False)] == ["p"]
            for hidden in ("b", "c"):
                with pytest.raises(McpError) as info:
                    await client.call_tool(hidden, {})
                assert info.value.code == -32602 and f"Unknown tool: {hidden}" in str(info.value)
            server.enable(tool="b")  # the configuration's exclusion outranks a switch
            assert await tool_names(client) == {"a"}
            assert (await client.call_tool("a", {}))["content"][0]["text"] == "a"

    asyncio.run(check())


def test_tags_are_checked_and_unknown_names_refused() -> None:
    server = m.Server("s")
    with pytest.raises(TypeError, match="collection of strings"):
        server.tool(name="t", tags="beta")(lambda: "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty string"):
        server.tool(name="t", tags={""})(lambda: "x")

    @server.tool
    def known() -> str:
        return "k"

    with pytest.raises(KeyError, match="no tool 'typo' is registered"):
        server.disable(tool="typo")
    with pytest.raises(KeyError, match="no resource"):
        server.disable(resource="notes://nothing")
    with pytest.raises(TypeError, match="needs tool="):
        server.disable()


def test_a_switch_by_name_outranks_one_by_tag_and_completion_follows() -> None:
    server = m.Server("s")

    @server.tool(tags={"beta"})
    def one() -> str:
        return "1"

    @server.tool(tags={"beta"})
    def two() -> str:
        return "2"

    @server.prompt(tags={"beta"}, complete={"topic": lambda value, ctx: ["alpha", "beta"]})
    def ask(topic: str) -> str:
        return topic

    @server.resource("docs://{page}", tags={"beta"})
    def page(page: str) -> str:
        return page

    async def check() -> None:
        async with connect(server) as client:
            server.disable(tags={"beta"})
            assert await tool_names(client) == set()
            assert await client.list_resource_templates(cache=False) == []
            server.enable(tool="two")
            assert await tool_names(client) == {"two"}
            ref = {"type": "ref/prompt", "name": "ask"}
            refused = await client.exchange("completion/complete", {
                "ref": ref, "argument": {"name": "topic", "value": "a"}})
            assert refused.error["code"] == -32602
            read = await client.exchange("resources/read", {"uri": "docs://intro"})
            assert read.error["code"] == -32602
            server.enable(tags={"beta"})
            assert await tool_names(client) == {"one", "two"}
            done = await client.exchange("completion/complete", {
                "ref": ref, "argument": {"name": "topic", "value": "a"}})
            assert done.result["completion"]["values"] == ["alpha", "beta"]
            assert (await client.read_resource("docs://intro"))["contents"][0]["text"] == "intro"

    asyncio.run(check())


def test_a_disabled_mounted_tool_leaves_the_host_and_comes_back() -> None:
    host, child = m.Server("host"), m.Server("child")

    @child.tool(tags={"beta"})
    def search(q: str) -> str:
        return q

    host.mount(child, namespace="notes")

    async def check() -> None:
        async with connect(host) as client:
            assert await tool_names(client) == {"notes_search"}
            child.disable(tool="search")  # the child's switch reaches the host's copy
            assert await tool_names(client) == set()
            child.enable(tool="search")
            host.disable(tags={"beta"})  # the host filters by the child's tags
            assert await tool_names(client) == set()
            host.enable(tool="notes_search")
            assert (await client.call_tool("notes_search", {"q": "x"}))["content"][0]["text"] == "x"

    asyncio.run(check())


# -- real processes, one Redis ---------------------------------------------------------------


class Instance:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def cluster(tmp_path: Path, fresh_redis: RedisServer) -> Iterator[tuple[Path, dict[str, str], list[Instance]]]:
    src = tmp_path / "tagged.py"
    src.write_text(SOURCE)
    env = {"NIMBLEMCP_REDIS_URL": fresh_redis.url}
    instances: list[Instance] = []
    try:
        yield src, env, instances
    finally:
        for inst in instances:
            stop(inst.proc, signal.SIGINT)


def start(src: Path, env: dict[str, str], instances: list[Instance], name: str) -> Instance:
    port = free_port()
    log = src.parent / f"{name}.log"
    inst = Instance(launch(src, port, log, env=env), port, log)
    instances.append(inst)
    return inst


@asynccontextmanager
async def client_of(inst: Instance) -> AsyncIterator[Client]:
    async with Client(HttpTransport(inst.url)) as client:
        yield client


async def eventually(check: Any) -> None:
    async with asyncio.timeout(DEADLINE):
        while not await check():
            await asyncio.sleep(0.05)


async def test_switches_reach_every_instance_and_one_started_later(
        cluster: tuple[Path, dict[str, str], list[Instance]]) -> None:
    src, env, instances = cluster
    a, b = start(src, env, instances, "a"), start(src, env, instances, "b")
    async with client_of(a) as on_a, client_of(b) as on_b:
        assert await tool_names(on_b) == {"forecast", "echo", "switch"}  # "internal" excluded
        async with on_b.listen(tools=True, prompts=True, resources_list=True) as events:
            async def next_kind() -> str:
                async for event in events:
                    if event.kind != "acknowledged":
                        return event.kind
                raise AssertionError("the listen ended")

            async with asyncio.timeout(DEADLINE):  # B listens before A switches
                assert (await anext(aiter(events))).kind == "acknowledged"
            await on_a.call_tool("switch", {"on": False, "tag": "beta"})  # made on A
            kinds = set()
            async with asyncio.timeout(DEADLINE):
                while kinds != {"tools_changed", "prompts_changed", "resources_changed"}:
                    kinds.add(await next_kind())
            # B serves the change as soon as its listeners hear of it
            assert await tool_names(on_b) == {"echo", "switch"}
            assert await on_b.list_prompts(cache=False) == []
            assert [r["uri"] for r in await on_b.list_resources(cache=False)] == []
            with pytest.raises(McpError) as info:
                await on_b.call_tool("forecast", {"city": "Oslo"})
            assert info.value.code == -32602
            assert (await on_b.call_tool("echo", {"text": "still serving"}))["content"][0]["text"] == "still serving"

            await on_b.call_tool("switch", {"on": True, "tool": "forecast"})  # made on B
            await eventually(lambda: _has(on_a, "forecast"))
            assert (await on_a.call_tool("forecast", {"city": "Oslo"}))["content"][0]["text"] == "sunny in Oslo"
            assert await next_kind() == "tools_changed"  # once, from B
    c = start(src, env, instances, "c")  # started later: reads the switches from Redis
    async with client_of(c) as on_c:
        assert await tool_names(on_c) == {"forecast", "echo", "switch"}
        assert await on_c.list_prompts(cache=False) == []


async def _has(client: Client, name: str) -> bool:
    return name in await tool_names(client)


async def test_the_official_sdk_client_sees_the_served_list(
        cluster: tuple[Path, dict[str, str], list[Instance]]) -> None:
    src, _, instances = cluster
    inst = start(src, {}, instances, "solo")  # no Redis: one instance
    async with client_of(inst) as ours:
        await ours.call_tool("switch", {"on": False, "tool": "echo"})
    seen = _peers.sdk_http_probe(inst.url)
    assert sorted(t["name"] for t in seen["tools"]) == ["forecast", "switch"]


# -- lists by scope --------------------------------------------------------------------------

RESOURCE = "http://127.0.0.1/mcp"
TOKENS = StaticTokens({
    "admin": AccessToken("alice", frozenset({"mcp:use", "repo:admin"}), (RESOURCE,)),
    "user": AccessToken("bob", frozenset({"mcp:use"}), (RESOURCE,)),
})


def _scoped() -> m.Server:
    server = m.Server("scoped")

    @server.tool
    def whoami(ctx: m.Context) -> str:
        return ctx.principal.subject if ctx.principal else "nobody"

    @server.tool
    def delete_repo(name: str) -> str:
        return f"{name} deleted"

    @server.prompt
    def audit() -> str:
        return "audit"

    @server.resource("repo://{name}/secrets")
    def secrets(name: str) -> str:
        return name

    @server.resource("repo://main/readme")
    def readme() -> str:
        return "readme"

    @server.resource("repo://main/secrets")
    def main_secrets() -> str:
        return "s"

    server.require_scopes(["repo:admin"], tool="delete_repo")
    server.require_scopes(["repo:admin"], prompt="audit")
    server.require_scopes(["repo:admin"], resource="repo://{name}/secrets")
    return server


async def test_lists_show_only_what_the_callers_scopes_allow() -> None:
    app = _scoped().asgi_app(auth={
        "verifier": TOKENS, "resource": RESOURCE, "authorization_servers": ["https://as.example"],
        "required_scopes": ["mcp:use"]}, security=HttpSecurity(allowed_hosts=["*"]))
    async with serving(app) as base:
        seen: dict[str, tuple[set[str], set[str], set[str], set[str]]] = {}
        for token in ("user", "admin", "user"):  # pages are cached per scope set: not leaked
            transport = HttpTransport(base + "/mcp", headers={"authorization": f"Bearer {token}"})
            async with Client(transport) as client:
                seen[token] = (
                    await tool_names(client),
                    {p["name"] for p in await client.list_prompts(cache=False)},
                    {r["uri"] for r in await client.list_resources(cache=False)},
                    {t["uriTemplate"] for t in await client.list_resource_templates(cache=False)},
                )
        assert seen["user"] == ({"whoami"}, set(), {"repo://main/readme"}, set())
        assert seen["admin"] == ({"whoami", "delete_repo"}, {"audit"},
                                 {"repo://main/readme", "repo://main/secrets"}, {"repo://{name}/secrets"})


async def test_lists_without_a_token_hide_what_needs_scopes() -> None:
    async with connect(_scoped()) as client:
        assert await tool_names(client) == {"whoami"}
        assert (await client.call_tool("whoami", {}))["content"][0]["text"] == "nobody"

