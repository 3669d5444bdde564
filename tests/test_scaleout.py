"""Scale-out: two real `nimblemcp run --transport http` instances that share nothing but
`NIMBLEMCP_STATE_KEYS` and one real Redis (`NIMBLEMCP_REDIS_URL`), reached alternately,
directly or through a round-robin TCP proxy written here (a new connection per request,
so nothing is sticky). Proves: an MRTR round started on one instance completes on the
other; a one-time requestState used on A is refused on B (-32602); a state handle made
on A reads on B; a listen on A hears list changes and resource updates caused on B.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _deploy import launch, wait_port
from _redis import RedisServer, free_port
from _sse_parser import SSEParser

from nimblemcp.server._sealing import new_key

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}
SID = "io.modelcontextprotocol/subscriptionId"
HANG_GUARD = 30.0  # only so a failure cannot hang the run

SOURCE = '''
import os

import nimblemcp as m

ME = os.environ["SCALEOUT_INSTANCE"]
server = m.Server("scaleout", registrations="local")  # add_tool below changes one instance on purpose
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@server.tool
async def wizard(ctx: m.Context) -> str:
    ctx.state["ran_on"] = [*ctx.state.get("ran_on", []), ME]
    name = await ctx.elicit("name", "Name?", NAME)
    colour = await ctx.elicit("colour", "Colour?", NAME)
    return f"{name.content['name']}/{colour.content['name']} ran on " + ",".join(ctx.state["ran_on"])


@server.tool(one_time=True)
async def pay(amount: int, ctx: m.Context) -> str:
    ok = await ctx.elicit("confirm", f"Pay {amount}?", {"type": "object", "properties": {}})
    return f"paid {amount} on {ME}" if ok.accepted else "cancelled"


@server.tool
async def make_basket(items: list[str], ctx: m.Context) -> str:
    return await ctx.handles.create({"items": items, "by": ME})


@server.tool
async def read_basket(handle: str, ctx: m.Context) -> dict:
    return {**await ctx.handles.get(handle), "read_on": ME}


@server.tool
def add_tool(name: str) -> str:
    server.add_tool(lambda: "hi", name=name)
    return ME


@server.tool
def touch(uri: str) -> str:
    server.notify_resource_updated(uri)
    return ME


@server.resource("test://doc")
def doc() -> str:
    return "doc"
'''


class Instance:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int) -> None:
        self.name, self.proc, self.port = name, proc, port
        self.url = f"http://127.0.0.1:{port}/mcp"


def _launch(src: Path, name: str, env: dict[str, str], log: Path, instances: list[Instance]) -> None:
    port = free_port()
    proc = launch(src, port, log, env={**env, "SCALEOUT_INSTANCE": name}, wait=False)
    instances.append(Instance(name, proc, port))  # listed first: stopped even if it never listens
    wait_port(port, proc, log)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Instance]]:
    tmp = tmp_path_factory.mktemp("scaleout")
    redis = RedisServer()
    redis.start()
    src = tmp / "scaleout_server.py"
    src.write_text(SOURCE)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NIMBLEMCP_STATE_KEYS": new_key(),
           "NIMBLEMCP_REDIS_URL": redis.url}
    instances: list[Instance] = []
    try:
        for name in ("A", "B"):
            _launch(src, name, env, tmp / f"{name}.log", instances)
        yield instances
        for inst in instances:  # graceful exit: the bus thread must not hold shutdown
            inst.proc.send_signal(signal.SIGINT)
            assert inst.proc.wait(timeout=HANG_GUARD) == 0, (tmp / f"{inst.name}.log").read_text()
    finally:
        for inst in instances:
            if inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()
        redis.close()


class RoundRobinProxy:
    """Loopback TCP proxy: connection n goes to backend n mod len(backends)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.picks: list[int] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/mcp"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = self.ports[len(self.picks) % len(self.ports)]
        self.picks.append(port)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while chunk := await src.read(65536):
                    dst.write(chunk)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # A new connection per request: round-robin per request, as a load balancer without
    # sticky sessions would do.
    async with httpx.AsyncClient(timeout=HANG_GUARD, headers={"connection": "close"}) as c:
        yield c


def _headers(method: str, name: str | None = None) -> dict[str, str]:
    h = {"content-type": "application/json", "accept": "application/json, text/event-stream",
         "mcp-protocol-version": V, "mcp-method": method}
    if name is not None:
        h["mcp-name"] = name
    return h


async def call(c: httpx.AsyncClient, url: str, name: str, arguments: dict[str, Any] | None = None,
               **extra: Any) -> dict[str, Any]:
    """A tools/call; the whole JSON-RPC response (result or error)."""
    params = {"_meta": META, "name": name, "arguments": arguments or {}, **extra}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    r = await c.post(url, content=orjson.dumps(body), headers=_headers("tools/call", name))
    reply: dict[str, Any] = r.json()
    assert r.status_code == (400 if "error" in reply else 200), r.text  # HTTP mirrors the outcome
    return reply


def text(response: dict[str, Any]) -> Any:
    result = response["result"]
    return result.get("structuredContent", result["content"][0]["text"])


async def test_mrtr_rounds_continue_on_whichever_instance_the_balancer_picks(
        cluster: list[Instance], http: httpx.AsyncClient) -> None:
    proxy = RoundRobinProxy([i.port for i in cluster])
    url = await proxy.start()
    try:
        first = (await call(http, url, "wizard"))["result"]
        assert first["resultType"] == "input_required" and set(first["inputRequests"]) == {"name"}
        answers = {"name": {"action": "accept", "content": {"name": "Ada"}}}
        second = (await call(http, url, "wizard", inputResponses=answers,
                             requestState=first["requestState"]))["result"]
        assert second["resultType"] == "input_required" and set(second["inputRequests"]) == {"colour"}
        answers["colour"] = {"action": "accept", "content": {"name": "teal"}}
        done = await call(http, url, "wizard", inputResponses=answers, requestState=second["requestState"])
        assert text(done) == "Ada/teal ran on A,B,A"  # three rounds, alternating instances
        assert proxy.picks == [cluster[0].port, cluster[1].port, cluster[0].port]
    finally:
        await proxy.close()


async def test_mrtr_round_started_on_a_completes_on_b(cluster: list[Instance], http: httpx.AsyncClient) -> None:
    a, b = cluster
    first = (await call(http, a.url, "wizard"))["result"]
    answers = {"name": {"action": "accept", "content": {"name": "Bo"}},
               "colour": {"action": "accept", "content": {"name": "red"}}}
    done = await call(http, b.url, "wizard", inputResponses=answers, requestState=first["requestState"])
    assert text(done) == "Bo/red ran on A,B"


async def test_one_time_request_state_replayed_on_the_other_instance_is_refused(
        cluster: list[Instance], http: httpx.AsyncClient) -> None:
    a, b = cluster
    first = (await call(http, a.url, "pay", {"amount": 7}))["result"]
    assert first["resultType"] == "input_required"
    retry = {"inputResponses": {"confirm": {"action": "accept", "content": {}}},
             "requestState": first["requestState"]}
    assert text(await call(http, a.url, "pay", {"amount": 7}, **retry)) == "paid 7 on A"
    replay = await call(http, b.url, "pay", {"amount": 7}, **retry)
    assert replay["error"]["code"] == -32602
    again = await call(http, a.url, "pay", {"amount": 7}, **retry)
    assert again["error"]["code"] == -32602


async def test_one_time_request_state_used_first_on_b_is_refused_on_a(
        cluster: list[Instance], http: httpx.AsyncClient) -> None:
    a, b = cluster
    first = (await call(http, a.url, "pay", {"amount": 9}))["result"]
    retry = {"inputResponses": {"confirm": {"action": "accept", "content": {}}},
             "requestState": first["requestState"]}
    results = await asyncio.gather(call(http, a.url, "pay", {"amount": 9}, **retry),
                                   call(http, b.url, "pay", {"amount": 9}, **retry))
    # Racing the same state at both instances: exactly one pays.
    assert sorted("error" in r for r in results) == [False, True]
    assert [r["error"]["code"] for r in results if "error" in r] == [-32602]


async def test_state_handle_created_on_a_reads_on_b(cluster: list[Instance], http: httpx.AsyncClient) -> None:
    a, b = cluster
    handle = text(await call(http, a.url, "make_basket", {"items": ["tea", "jam"]}))
    assert text(await call(http, b.url, "read_basket", {"handle": handle})) == {
        "items": ["tea", "jam"], "by": "A", "read_on": "B"}
    unknown = await call(http, b.url, "read_basket", {"handle": "x" * 22})
    assert unknown["result"]["isError"] is True


class Events:
    """JSON messages of an SSE response, one at a time."""

    def __init__(self, chunks: Any) -> None:
        self.chunks = chunks
        self.parser = SSEParser()
        self.pending: list[bytes] = []

    async def next(self) -> dict[str, Any]:
        async def read() -> dict[str, Any]:
            while not self.pending:
                self.pending.extend(self.parser.feed(await self.chunks.__anext__()))
            return orjson.loads(self.pending.pop(0))  # type: ignore[no-any-return]

        return await asyncio.wait_for(read(), HANG_GUARD)

    async def until_updated(self, uri: str) -> None:
        while True:
            event = await self.next()
            if event.get("method") == "notifications/resources/updated" and event["params"]["uri"] == uri:
                return


async def test_listen_on_a_hears_changes_caused_on_b(cluster: list[Instance], http: httpx.AsyncClient) -> None:
    a, b = cluster
    body = {"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen",
            "params": {"_meta": META, "notifications": {"toolsListChanged": True,
                                                          "resourceSubscriptions": ["test://"]}}}
    async with http.stream("POST", a.url, content=orjson.dumps(body),
                           headers=_headers("subscriptions/listen")) as stream:
        assert stream.status_code == 200
        events = Events(stream.aiter_bytes())
        ack = await events.next()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"]["resourceSubscriptions"] == ["test://"]
        # Flush whatever either instance published at start-up (tool registrations):
        # each instance's events reach Redis in order, so its marker comes after them.
        assert text(await call(http, a.url, "touch", {"uri": "test://marker-a"})) == "A"
        await events.until_updated("test://marker-a")
        assert text(await call(http, b.url, "touch", {"uri": "test://marker-b"})) == "B"
        await events.until_updated("test://marker-b")

        assert text(await call(http, b.url, "add_tool", {"name": "late"})) == "B"
        changed = await events.next()
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"][SID] == "L1"
        assert text(await call(http, b.url, "touch", {"uri": "test://doc"})) == "B"
        updated = await events.next()
        assert updated["method"] == "notifications/resources/updated"
        assert updated["params"]["uri"] == "test://doc" and updated["params"]["_meta"][SID] == "L1"
        await call(http, b.url, "touch", {"uri": "other://not-subscribed"})
        assert text(await call(http, b.url, "touch", {"uri": "test://end"})) == "B"
        # Exactly once: nothing (no duplicate, no unsubscribed URI) before the end marker.
        end = await events.next()
        assert end["method"] == "notifications/resources/updated" and end["params"]["uri"] == "test://end"
