"""Tasks on the Client (TASK-02/06/07/08/11) against our own server: in-memory and over
real HTTP (uvicorn on 127.0.0.1). Gates (asyncio.Events) decide when a task may finish,
so no test depends on timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from _serving import HeaderRecorder, serving

from nimblemcp import Context, Server, ToolError
from nimblemcp.client import (
    TASKS_EXTENSION,
    Client,
    InputRequestRefused,
    TaskCancelled,
    TaskPolicy,
    TasksNotDeclared,
)
from nimblemcp.errors import ClientError, InternalError, MissingClientCapability, RequestTimeout
from nimblemcp.transports.client.memory import MemoryTransport
from nimblemcp.transports.http.app import asgi_app

CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def make_server() -> Server:
    server = Server("client-tasks")
    server.tasks.poll_interval_ms = 10
    gate = asyncio.Event()
    server.gate = gate  # type: ignore[attr-defined]

    @server.tool
    def greet(name: str) -> str:
        return f"Hello, {name}!"

    @server.tool(task="optional")
    async def slow_compute(seconds: float) -> str:
        await gate.wait()
        return f"computed after {seconds}s"

    @server.tool(task="required")
    async def failing_job() -> str:
        raise ToolError("the job broke")

    @server.tool(task="optional")
    async def protocol_error_job() -> str:
        raise InternalError("backend unavailable")

    @server.tool(task="optional")
    async def confirm_delete(path: str, ctx: Context) -> str:
        answer = await ctx.elicit("confirm", f"Delete {path}?", CONFIRM)
        return "deleted" if answer.accepted and answer.content["ok"] else "kept"

    @server.tool(task="optional")
    async def multi_input(ctx: Context) -> str:
        a, b = ctx.gather(ctx.elicit("first", "First?", CONFIRM), ctx.elicit("second", "Second?", CONFIRM))
        return f"{a.content['ok']}/{b.content['ok']}"

    @server.tool(task="optional")
    async def two_rounds(ctx: Context) -> str:
        a = await ctx.elicit("first", "First?", CONFIRM)
        b = await ctx.elicit("second", "Second?", CONFIRM)
        return f"{a.content['ok']}/{b.content['ok']}"

    return server


def methods(transport: MemoryTransport) -> list[str]:
    return [m.get("method", "") for m in transport.sent]


class Statuses:
    """An `on_task_status` callback that lets a test wait for a status."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.events: dict[str, asyncio.Event] = {}
        self.task_id: str | None = None

    def __call__(self, task: dict[str, Any]) -> None:
        self.seen.append(task["status"])
        self.task_id = task["taskId"]
        self.event(task["status"]).set()

    def event(self, status: str) -> asyncio.Event:
        return self.events.setdefault(status, asyncio.Event())


async def test_slow_tool_completes_and_declares_the_extension() -> None:
    server = make_server()
    transport = MemoryTransport(server)
    statuses = Statuses()
    async with Client(transport, tasks=True, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        call = asyncio.create_task(client.call_tool("slow_compute", {"seconds": 2},
                                                    on_task_status=statuses))
        await statuses.event("working").wait()
        server.gate.set()  # type: ignore[attr-defined]
        result = await call
    assert result["content"][0]["text"] == "computed after 2.0s"
    assert statuses.seen == ["working", "completed"]
    sent = methods(transport)
    assert "tasks/get" in sent and "notifications/cancelled" not in sent
    for message in transport.sent:  # declared on every modern request (TASK-01)
        caps = message["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert caps["extensions"] == {TASKS_EXTENSION: {}}
    gets = [m["params"]["taskId"] for m in transport.sent if m["method"] == "tasks/get"]
    assert gets and set(gets) == {statuses.task_id}


async def test_tool_error_completes_and_protocol_error_raises() -> None:
    async with Client(make_server(), tasks=True, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        broken = await client.call_tool("failing_job", {})
        assert broken["isError"] is True and broken["content"][0]["text"] == "the job broke"
        with pytest.raises(InternalError, match="backend unavailable") as caught:
            await client.call_tool("protocol_error_job", {})
        assert caught.value.code == -32603


async def test_input_required_is_answered_by_on_elicit() -> None:
    server = make_server()
    transport = MemoryTransport(server)
    asked: list[dict[str, Any]] = []

    def on_elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"ok": True}

    statuses = Statuses()
    async with Client(transport, tasks=True, on_elicit=on_elicit, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        result = await client.call_tool("confirm_delete", {"path": "/tmp/x"}, on_task_status=statuses)
    assert result["content"][0]["text"] == "deleted"
    assert [a["message"] for a in asked] == ["Delete /tmp/x?"]
    assert "input_required" in statuses.seen and statuses.seen[-1] == "completed"
    updates = [m["params"] for m in transport.sent if m["method"] == "tasks/update"]
    assert len(updates) == 1
    (key,) = updates[0]["inputResponses"]
    assert updates[0]["inputResponses"][key] == {"action": "accept", "content": {"ok": True}}


async def test_all_keys_of_a_poll_are_answered_concurrently() -> None:
    both_asked = asyncio.Event()
    pending: list[str] = []

    async def on_elicit(params: dict[str, Any]) -> dict[str, Any]:
        pending.append(params["message"])
        if len(pending) == 2:
            both_asked.set()
        await both_asked.wait()  # would hang if the two were asked one after the other
        return {"ok": params["message"] == "First?"}

    async with Client(make_server(), tasks=True, on_elicit=on_elicit, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        result = await asyncio.wait_for(client.call_tool("multi_input", {}), 30)
    assert result["content"][0]["text"] == "True/False"
    assert sorted(pending) == ["First?", "Second?"]


async def test_partial_answers_leave_the_rest_to_the_callbacks() -> None:
    asked: list[str] = []

    def on_elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["message"])
        return {"ok": False}

    async with Client(make_server(), tasks=True, on_elicit=on_elicit, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        created = await client.call_tool("multi_input", {}, wait=False)
        assert created["resultType"] == "task" and created["status"] == "working"
        while (task := await client.get_task(created))["status"] != "input_required":
            await asyncio.sleep(0.01)
        first = next(k for k, v in task["inputRequests"].items() if v["params"]["message"] == "First?")
        await client.update_task(created["taskId"], {first: {"action": "accept", "content": {"ok": True}}})
        result = await client.wait_task(created["taskId"])
    assert result["content"][0]["text"] == "True/False"
    assert asked == ["Second?"]


async def test_a_key_still_listed_after_its_answer_is_not_answered_again() -> None:
    """TASK-07 (eventual consistency): the server acks an update but applies it two polls
    later; the client keeps polling and never answers that key twice."""
    server = make_server()
    manager = server.tasks
    real_update, real_get = manager.update, manager.get
    deferred: list[tuple[Any, dict[str, Any]]] = []
    gets_since = [0]

    async def slow_update(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        deferred.append((ctx, params))
        gets_since[0] = 0
        return {"resultType": "complete"}

    async def get(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        gets_since[0] += 1
        if deferred and gets_since[0] > 2:
            await real_update(*deferred.pop())
        return await real_get(ctx, params)

    manager.update, manager.get = slow_update, get  # type: ignore[method-assign]
    asked: list[str] = []

    def on_elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params["message"])
        return {"ok": True}

    async with Client(server, tasks=True, on_elicit=on_elicit, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        result = await asyncio.wait_for(client.call_tool("two_rounds", {}), 30)
    assert result["content"][0]["text"] == "True/True"
    assert asked == ["First?", "Second?"]


async def test_caller_cancellation_cancels_the_task() -> None:
    server = make_server()
    transport = MemoryTransport(server)
    statuses = Statuses()
    async with Client(transport, tasks=True, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        call = asyncio.create_task(client.call_tool("slow_compute", {"seconds": 9},
                                                    on_task_status=statuses))
        await statuses.event("working").wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert statuses.task_id is not None
        task = await client.get_task(statuses.task_id)
        assert task["status"] == "cancelled"
    sent = methods(transport)
    assert sent.count("tasks/cancel") == 1
    assert "notifications/cancelled" not in sent  # TASK-08


async def test_task_timeout_and_refused_input_cancel_the_task() -> None:
    def refuse(params: dict[str, Any]) -> None:
        raise InputRequestRefused("not now")

    transport = MemoryTransport(make_server())
    async with Client(transport, tasks=True, on_elicit=refuse, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        with pytest.raises(RequestTimeout):
            await client.call_tool("slow_compute", {"seconds": 9}, task_timeout=0.2)
        with pytest.raises(InputRequestRefused, match="not now"):
            await client.call_tool("confirm_delete", {"path": "/x"})
        cancelled = [m["params"]["taskId"] for m in transport.sent if m["method"] == "tasks/cancel"]
        assert len(set(cancelled)) == 2
        for task_id in cancelled:
            assert (await client.get_task(task_id))["status"] == "cancelled"


async def test_a_task_cancelled_elsewhere_raises_task_cancelled() -> None:
    async with Client(make_server(), tasks=True, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        created = await client.call_tool("slow_compute", {"seconds": 1}, wait=False)
        await client.cancel_task(created)
        with pytest.raises(TaskCancelled) as caught:
            await client.wait_task(created)
        assert caught.value.task_id == created["taskId"]


async def test_non_task_tool_is_unchanged() -> None:
    transport = MemoryTransport(make_server())
    async with Client(transport, tasks=True) as client:
        result = await client.call_tool("greet", {"name": "Ada"}, wait=False)
    assert result["resultType"] == "complete" and result["content"][0]["text"] == "Hello, Ada!"
    assert not [m for m in methods(transport) if m.startswith("tasks/")]


async def test_without_tasks_an_optional_task_tool_answers_plainly() -> None:
    server = make_server()
    server.gate.set()  # type: ignore[attr-defined]
    transport = MemoryTransport(server)
    async with Client(transport) as client:
        result = await client.call_tool("slow_compute", {"seconds": 0})
        assert result["resultType"] == "complete" and result["content"][0]["text"] == "computed after 0.0s"
        assert "extensions" not in client.capabilities
        with pytest.raises(TasksNotDeclared):
            await client.get_task("anything")
        with pytest.raises(MissingClientCapability) as caught:
            await client.call_tool("failing_job", {})  # task="required" (TASK-03)
        assert caught.value.required == {"extensions": {TASKS_EXTENSION: {}}}


class _Declares(MemoryTransport):
    """Declares the tasks extension behind the Client's back (for RT-03)."""

    def send(self, request: dict[str, Any], *, param_headers: Mapping[str, Any] | None = None) -> Any:
        meta = request["params"]["_meta"]
        caps = dict(meta["io.modelcontextprotocol/clientCapabilities"])
        caps["extensions"] = {TASKS_EXTENSION: {}}
        meta["io.modelcontextprotocol/clientCapabilities"] = caps
        return super().send(request, param_headers=param_headers)


async def test_result_type_task_is_unrecognized_when_not_declared() -> None:
    async with Client(_Declares(make_server())) as client:
        with pytest.raises(ClientError, match="unrecognized resultType 'task'"):
            await client.call_tool("slow_compute", {"seconds": 1})


def test_poll_interval_is_clamped() -> None:
    client = Client(make_server(), tasks=True, task_policy=TaskPolicy(poll_floor=0.05, poll_cap=2.0))
    assert client._interval({"pollIntervalMs": 300}) == 0.3
    assert client._interval({"pollIntervalMs": 0}) == 0.05  # never a busy loop
    assert client._interval({"pollIntervalMs": 10_000_000}) == 2.0
    assert client._interval({}) == 1.0
    with pytest.raises(ValueError):
        Client(make_server(), task_policy=TaskPolicy(poll_floor=0))


# -- over HTTP ---------------------------------------------------------------------------


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, Server, HeaderRecorder]]:
    server = make_server()
    recorder = HeaderRecorder(asgi_app(server))
    async with serving(recorder) as base:
        yield f"{base}/mcp", server, recorder


async def test_http_task_with_input_and_mcp_name(served: tuple[str, Server, HeaderRecorder]) -> None:
    url, server, recorder = served
    statuses = Statuses()
    async with Client(url, tasks=True, on_elicit=lambda p: {"ok": True}, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        assert (await client.call_tool("confirm_delete", {"path": "/a"}))["content"][0]["text"] == "deleted"
        call = asyncio.create_task(client.call_tool("slow_compute", {"seconds": 3}, on_task_status=statuses))
        await statuses.event("working").wait()
        server.gate.set()  # type: ignore[attr-defined]
        assert (await call)["content"][0]["text"] == "computed after 3.0s"
    task_headers = [h for h in recorder.headers if h.get("mcp-method", "").startswith("tasks/")]
    assert {h["mcp-method"] for h in task_headers} == {"tasks/get", "tasks/update"}
    for headers in task_headers:  # TASK-11: Mcp-Name is the task id (the server checks it too)
        assert len(headers["mcp-name"]) >= 20


async def test_http_caller_cancellation_sends_tasks_cancel(served: tuple[str, Server, HeaderRecorder]) -> None:
    url, _, recorder = served
    statuses = Statuses()
    async with Client(url, tasks=True, task_policy=TaskPolicy(poll_floor=0.01)) as client:
        call = asyncio.create_task(client.call_tool("slow_compute", {"seconds": 5}, on_task_status=statuses))
        await statuses.event("working").wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert statuses.task_id is not None
        assert (await client.get_task(statuses.task_id))["status"] == "cancelled"
    cancels = [h for h in recorder.headers if h.get("mcp-method") == "tasks/cancel"]
    assert [h["mcp-name"] for h in cancels] == [statuses.task_id]
