"""Task status notifications on `subscriptions/listen` (tasks extension, SEP-2663):
the `taskIds` filter, its capability gate (-32021), the acknowledgement, the current
state sent after the ack, a notification per status change with the full task state,
and no leak of another subject's tasks. In memory and over real HTTP (uvicorn)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _serving import serving

from nimblemcp import Context, Server
from nimblemcp.client import Client, ListenEvent
from nimblemcp.errors import MissingClientCapability
from nimblemcp.transports.auth.bearer import AccessToken, BearerAuth, StaticTokens
from nimblemcp.transports.client.http import HttpTransport
from nimblemcp.transports.client.memory import MemoryTransport
from nimblemcp.transports.http.app import asgi_app

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def make_server() -> Server:
    server = Server("task-events")
    server.tasks.poll_interval_ms = 10
    gate = asyncio.Event()
    server.gate = gate  # type: ignore[attr-defined]

    @server.tool(task="optional")
    async def slow_compute(seconds: float) -> str:
        await gate.wait()
        return f"computed after {seconds}s"

    @server.tool(task="optional")
    async def confirm_delete(path: str, ctx: Context) -> str:
        answer = await ctx.elicit("confirm", f"Delete {path}?", CONFIRM)
        return "deleted" if answer.accepted and answer.content["ok"] else "kept"

    return server


async def next_task_event(events: Any, status: str) -> ListenEvent:
    while True:
        event = await asyncio.wait_for(events.next(["task_status"]), 5)
        assert event.raw is not None
        if event.raw["params"]["status"] == status:
            return event


async def test_listen_for_a_task_to_completion_in_memory() -> None:
    server = make_server()
    async with Client(MemoryTransport(server), tasks=True) as client:
        created = await client.call_tool("slow_compute", {"seconds": 1}, wait=False)
        task_id = created["taskId"]
        async with client.listen(tasks=[task_id, "no-such-task"]) as events:
            assert events.acknowledged == {"taskIds": [task_id]}
            assert events.declined == {"taskIds": ["no-such-task"]}
            first = await next_task_event(events, "working")  # the state right after the ack
            assert first.task_id == task_id
            server.gate.set()  # type: ignore[attr-defined]
            done = await next_task_event(events, "completed")
            params = done.raw["params"]  # type: ignore[index]
            assert params["taskId"] == task_id
            assert params["result"]["content"][0]["text"] == "computed after 1.0s"
            assert params["_meta"]["io.modelcontextprotocol/subscriptionId"] == events.subscription_id
            # identical to what tasks/get answers now
            got = await client.get_task(task_id)
            assert {k: v for k, v in params.items() if k != "_meta"} == \
                {k: v for k, v in got.items() if k not in ("resultType", "_meta")}


async def test_input_required_and_resume_are_notified_over_http() -> None:
    server = make_server()
    async with serving(asgi_app(server)) as base, Client(f"{base}/mcp", tasks=True, on_elicit=lambda p: {"ok": True}) as client:
        created = await client.call_tool("confirm_delete", {"path": "a.txt"}, wait=False)
        task_id = created["taskId"]
        async with client.listen(tasks=[task_id]) as events:
            assert events.acknowledged == {"taskIds": [task_id]}
            asking = await next_task_event(events, "input_required")
            requests = asking.raw["params"]["inputRequests"]  # type: ignore[index]
            key = next(iter(requests))
            assert requests[key]["method"] == "elicitation/create"
            await client.update_task(task_id, {key: {"action": "accept", "content": {"ok": True}}})
            done = await next_task_event(events, "completed")
            assert done.raw["params"]["result"]["content"][0]["text"] == "deleted"  # type: ignore[index]


async def test_task_ids_need_the_extension_declared() -> None:
    server = make_server()
    async with Client(MemoryTransport(server), tasks=True) as owner:
        task_id = (await owner.call_tool("slow_compute", {"seconds": 1}, wait=False))["taskId"]
        async with Client(MemoryTransport(server), tasks=False) as plain:
            with pytest.raises(MissingClientCapability) as info:
                async with plain.listen(tasks=[task_id], reconnect=False):
                    pass
            assert info.value.required == {"extensions": {"io.modelcontextprotocol/tasks": {}}}
            # without taskIds the same client may listen as before
            async with plain.listen(tools=True) as events:
                assert "taskIds" not in (events.acknowledged or {})
        server.gate.set()  # type: ignore[attr-defined]


async def test_tasks_of_another_subject_are_not_honoured() -> None:
    server = make_server()
    ids: dict[str, str] = {}
    resource = "http://127.0.0.1/mcp"
    tokens = StaticTokens({"ta": AccessToken("alice", audience=(resource,)),
                           "tm": AccessToken("mallory", audience=(resource,))})
    app = BearerAuth(asgi_app(server), verifier=tokens, resource=resource,
                     authorization_servers=["http://127.0.0.1/as"])

    async with serving(app) as base:
        async with Client(HttpTransport(f"{base}/mcp", headers={"authorization": "Bearer ta"}), tasks=True) as alice:
            ids["a"] = (await alice.call_tool("slow_compute", {"seconds": 1}, wait=False))["taskId"]
        async with Client(HttpTransport(f"{base}/mcp", headers={"authorization": "Bearer tm"}),
                                tasks=True) as mallory, \
                mallory.listen(tasks=[ids["a"]]) as events:
            assert events.acknowledged == {"taskIds": []}
            server.gate.set()  # type: ignore[attr-defined]
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(events.next(["task_status"]), 0.5)
