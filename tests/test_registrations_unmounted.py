"""Runtime registrations where no lifespan runs (issue 13; `RegistrationNotShared`):
a framework that mounts the ASGI app without running the server's lifespan (a plain
Starlette `Mount`, no `lifespan=server.lifespan_context`) still serves it, so the first
request it serves makes the server count as serving. With shared backends (a real
Redis) an `add_*`/`remove_*` after that is refused, exactly as once the lifespan has
started; before it (import time) it is allowed. `registrations="local"` and in-process
backends keep runtime registration; a lifespan's shut-down may still change the registry.
Real uvicorn on loopback, raw httpx, a real `redis-server`; and real processes: a host
app under the `uvicorn` command against `nimblemcp run`, refused in the same words."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from _deploy import HANG_GUARD, META, headers, stop, wait_port
from _redis import RedisServer, free_port, shared
from _serving import serving

import nimblemcp as m
from nimblemcp import Backends
from nimblemcp.errors import RegistrationNotShared
from nimblemcp.server._resources import ResourceEntry
from nimblemcp.server._sealing import new_key


def hello() -> str:
    return "hello"


def make(name: str, **options: Any) -> m.Server:
    server = m.Server(name, **options)

    @server.tool
    def add_tool(tool: str) -> str:
        try:
            server.add_tool(hello, name=tool)
        except RegistrationNotShared:
            return "refused"
        return "added"

    return server


def mounted(server: m.Server) -> Any:
    """The server's app under `/api` of a Starlette host that never runs its lifespan."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    return Starlette(routes=[Mount("/api", app=server.asgi_app())])


async def call(c: httpx.AsyncClient, url: str, name: str, arguments: dict[str, Any]) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"_meta": META, "name": name, "arguments": arguments}}
    r = await c.post(url, content=orjson.dumps(body), headers=headers("tools/call", name))
    reply = r.json()
    assert "result" in reply, reply
    return str(reply["result"]["content"][0]["text"])


async def test_the_first_served_request_counts_as_serving(redis: RedisServer) -> None:
    async with shared(redis) as (store, bus):
        server = make("unmounted", backends=Backends(store=store, bus=bus))
        async with serving(mounted(server)) as base, httpx.AsyncClient(timeout=HANG_GUARD) as c:
            server.add_tool(hello, name="before_any_request")  # not serving yet: as at import time
            assert not server._lifespan.started  # no lifespan ran, none will
            url = f"{base}/api/mcp"
            assert await call(c, url, "add_tool", {"tool": "from_a_request"}) == "refused"
            with pytest.raises(RegistrationNotShared, match="is serving with shared backends") as refused:
                server.add_tool(hello, name="late")
            assert (refused.value.kind, refused.value.name) == ("tool", "late")
            for change in (lambda: server.remove_tool("before_any_request"),
                           lambda: server.add_resource(ResourceEntry("test://late", hello))):
                with pytest.raises(RegistrationNotShared):
                    change()
            assert sorted(server.tools) == ["add_tool", "before_any_request"]


async def test_local_registrations_and_memory_backends_still_register_at_runtime(redis: RedisServer) -> None:
    async with shared(redis) as (store, bus):
        local = make("local", registrations="local", backends=Backends(store=store, bus=bus))
        memory = make("memory")
        for server in (local, memory):
            async with serving(mounted(server)) as base, httpx.AsyncClient(timeout=HANG_GUARD) as c:
                url = f"{base}/api/mcp"
                assert await call(c, url, "add_tool", {"tool": "from_a_request"}) == "added"
                server.add_tool(hello, name="late")
                assert {"from_a_request", "late"} <= set(server.tools)


async def test_the_lifespans_shut_down_may_still_change_the_registry(redis: RedisServer) -> None:
    seen: list[str] = []
    async with shared(redis) as (store, bus):
        @contextlib.asynccontextmanager
        async def lifespan(s: m.Server) -> AsyncIterator[None]:
            s.add_tool(hello, name="at_startup")
            yield
            try:
                s.remove_tool("at_startup")  # the shut-down is no longer serving
                seen.append("removed")
            except RegistrationNotShared as exc:
                seen.append(f"refused: {exc}")

        server = make("with-lifespan", lifespan=lifespan, backends=Backends(store=store, bus=bus))
        config = uvicorn.Config(server.asgi_app(), host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        uv = uvicorn.Server(config)
        task = asyncio.create_task(uv.serve())
        while not uv.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        port = uv.servers[0].sockets[0].getsockname()[1]
        try:
            async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
                assert await call(c, f"http://127.0.0.1:{port}/mcp", "add_tool", {"tool": "x"}) == "refused"
        finally:
            uv.should_exit = True
            await task
        assert seen == ["removed"]
        assert "at_startup" not in server.tools and not server.served
        server.add_tool(hello, name="after")  # no longer serving: fine


async def test_a_2024_sse_stream_counts_as_serving_too(redis: RedisServer) -> None:
    """Also: the 2024-11-05 endpoints answer under the host's mount point."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    async with shared(redis) as (store, bus):
        server = make("unmounted-sse", backends=Backends(store=store, bus=bus))
        host = Starlette(routes=[Mount("/api", app=server.asgi_app(legacy_sse=True))])
        async with serving(host) as base, httpx.AsyncClient(timeout=HANG_GUARD) as c:
            server.add_tool(hello, name="before_any_request")
            async with c.stream("GET", f"{base}/api/sse", headers={"accept": "text/event-stream"}) as stream:
                assert stream.status_code == 200
                chunks = stream.aiter_bytes()
                first = await chunks.__anext__()
                assert first.startswith(b"event: endpoint")
                with pytest.raises(RegistrationNotShared):
                    server.add_tool(hello, name="late")
                # Served under the host's mount point: the endpoint it names answers.
                endpoint = first.split(b"data: ", 1)[1].strip().decode()
                assert endpoint.startswith("/api/messages/?session_id=")
                init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                        "params": {"protocolVersion": "2024-11-05", "capabilities": {},
                                   "clientInfo": {"name": "t", "version": "1"}}}
                assert (await c.post(base + endpoint, json=init)).status_code == 202
                answer = await chunks.__anext__()
                while b'"id":1' not in answer:  # the list change of "before_any_request" may come first
                    answer = await chunks.__anext__()
                assert b"event: message" in answer and b'"protocolVersion":"2024-11-05"' in answer


HOSTED = """
import nimblemcp as m
from nimblemcp.errors import RegistrationNotShared

server = m.Server("reg")


def hello() -> str:
    return "hello"


@server.tool
def add_tool(tool: str) -> str:
    try:
        server.add_tool(hello, name=tool)
    except RegistrationNotShared as exc:
        return f"refused: {exc}"
    return "added"


def host():
    from starlette.applications import Starlette
    from starlette.routing import Mount

    return Starlette(routes=[Mount("/api", app=server.asgi_app())])  # its lifespan never runs
"""


async def test_refused_alike_under_a_host_process_and_under_nimblemcp_run(tmp_path: Path, redis: RedisServer) -> None:
    """Real processes (issue 34): the same server module served by `nimblemcp run` and
    mounted in a Starlette host that `uvicorn` runs (no lifespan for the server), both on
    one real Redis from the environment: a runtime registration is refused by both, in
    the same words."""
    (tmp_path / "reg_server.py").write_text(HOSTED)
    env = {**os.environ, "NIMBLEMCP_REDIS_URL": redis.url, "NIMBLEMCP_STATE_KEYS": new_key(),
           "PYTHONUNBUFFERED": "1"}
    run_port, host_port = free_port(), free_port()
    logs = [tmp_path / "run.log", tmp_path / "host.log"]
    commands = [
        [sys.executable, "-m", "nimblemcp", "run", "reg_server.py", "--transport", "http", "--port", str(run_port)],
        [sys.executable, "-m", "uvicorn", "reg_server:host", "--factory", "--port", str(host_port),
         "--log-level", "warning"],
    ]
    procs = []
    try:
        for argv, log in zip(commands, logs, strict=True):
            with log.open("wb") as sink:
                procs.append(subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=sink, stderr=sink))
        for proc, port, log in zip(procs, (run_port, host_port), logs, strict=True):
            wait_port(port, proc, log)
        async with httpx.AsyncClient(timeout=HANG_GUARD) as c:
            under_run = await call(c, f"http://127.0.0.1:{run_port}/mcp", "add_tool", {"tool": "late"})
            hosted = await call(c, f"http://127.0.0.1:{host_port}/api/mcp", "add_tool", {"tool": "late"})
        assert under_run.startswith("refused: cannot add tool 'late' while 'reg' is serving with shared backends")
        assert hosted == under_run
    finally:
        for proc in procs:
            stop(proc)
