"""The tasks extension on the server (CHECKLIST 22: TASK-01..13)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nimblemcp import Context, Server, ToolError
from nimblemcp.errors import InternalError
from nimblemcp.server._tasks import TASKS_EXTENSION
from nimblemcp.testing import TestClient, connect

TASK_CAPS: dict[str, Any] = {"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}}
CONFIRM = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def make_server() -> Server:
    server = Server("tasks")
    server._tasks = None
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

    @server.tool(task="required", defer_task=True)
    async def test_tool_with_task(ctx: Context) -> str:
        name = await ctx.elicit("user_name", "Name?", {"type": "object", "properties": {"name": {"type": "string"}}})
        await ctx.as_task()
        return f"Task done for {name.content['name']}"

    return server


async def poll(client: TestClient, task_id: str, until: set[str]) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            task = await client.request("tasks/get", {"taskId": task_id}, manual=True)
            if task["status"] in until:
                return task
            await asyncio.sleep(0.01)


async def test_task_01_capability_advertised_in_extensions() -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        caps = (await client.discover())["capabilities"]
        assert caps["extensions"] == {TASKS_EXTENSION: {}}
        assert "tasks" not in caps  # no v1 slot (TASK-12)


async def test_task_02_04_create_poll_complete() -> None:
    server = make_server()
    async with connect(server, capabilities=TASK_CAPS) as client:
        created = await client.call_tool("slow_compute", {"seconds": 1}, wait=False, manual=True)
        assert created["resultType"] == "task"
        assert created["status"] == "working" and len(created["taskId"]) >= 20
        assert isinstance(created["ttlMs"], int) and isinstance(created["pollIntervalMs"], int)
        assert "requestState" not in created and "task" not in created
        working = await client.request("tasks/get", {"taskId": created["taskId"]}, manual=True)  # durable (TASK-04)
        assert working["resultType"] == "complete" and working["status"] == "working"
        assert "result" not in working and "error" not in working
        server.gate.set()  # type: ignore[attr-defined]
        done = await poll(client, created["taskId"], {"completed"})
        assert done["result"]["content"][0]["text"] == "computed after 1.0s"
        assert done["result"]["resultType"] == "complete"


async def test_task_02_sync_tools_and_non_declaring_clients_get_plain_results() -> None:
    server = make_server()
    server.gate.set()  # type: ignore[attr-defined]
    async with connect(server, capabilities=TASK_CAPS) as client:
        plain = await client.call_tool("greet", {"name": "Ada", "task": {"ttl": 1}}, wait=False, manual=True)
        assert plain["resultType"] == "complete" and "taskId" not in plain
    async with connect(server) as client:
        sync = await client.call_tool("slow_compute", {"seconds": 0}, wait=False, manual=True)
        assert sync["resultType"] == "complete" and sync["content"][0]["text"] == "computed after 0.0s"


async def test_task_03_required_tool_without_the_extension_is_32021() -> None:
    async with connect(make_server()) as client:
        ex = await client.exchange("tools/call", {"name": "failing_job"})
        assert ex.error["code"] == -32021
        assert ex.error["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}


async def test_task_05_tool_error_completes_protocol_error_fails() -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        broken = await client.call_tool("failing_job", {}, wait=False, manual=True)
        done = await poll(client, broken["taskId"], {"completed", "failed"})
        assert done["status"] == "completed" and done["result"]["isError"] is True
        crashed = await client.call_tool("protocol_error_job", {}, wait=False, manual=True)
        failed = await poll(client, crashed["taskId"], {"completed", "failed"})
        assert failed["status"] == "failed" and "result" not in failed
        assert failed["error"] == {"code": -32603, "message": "backend unavailable"}


async def test_task_07_input_required_and_update() -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        created = await client.call_tool("confirm_delete", {"path": "/tmp/x"}, wait=False, manual=True)
        waiting = await poll(client, created["taskId"], {"input_required"})
        (key,) = waiting["inputRequests"]
        assert waiting["inputRequests"][key]["method"] == "elicitation/create"
        ack = await client.request("tasks/update", {"taskId": created["taskId"], "inputResponses": {
            key: {"action": "accept", "content": {"ok": True}}, "never-asked": {"x": 1}}}, manual=True)
        assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
        done = await poll(client, created["taskId"], {"completed"})
        assert done["result"]["content"][0]["text"] == "deleted"


async def test_task_07_partial_fulfilment_keeps_the_rest_pending() -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        created = await client.call_tool("multi_input", {}, wait=False, manual=True)
        waiting = await poll(client, created["taskId"], {"input_required"})
        keys = sorted(waiting["inputRequests"])
        assert len(keys) == 2
        await client.request("tasks/update", {"taskId": created["taskId"], "inputResponses": {
            keys[0]: {"action": "accept", "content": {"ok": True}}}}, manual=True)
        still = await client.request("tasks/get", {"taskId": created["taskId"]}, manual=True)
        assert still["status"] == "input_required" and list(still["inputRequests"]) == [keys[1]]
        await client.request("tasks/update", {"taskId": created["taskId"], "inputResponses": {
            keys[1]: {"action": "accept", "content": {"ok": False}}}}, manual=True)
        done = await poll(client, created["taskId"], {"completed"})
        assert done["result"]["content"][0]["text"] == "True/False"


async def test_task_08_cancel_is_acknowledged_and_ends_the_task() -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        created = await client.call_tool("slow_compute", {"seconds": 60}, wait=False, manual=True)
        ack = await client.request("tasks/cancel", {"taskId": created["taskId"]}, manual=True)
        assert ack["resultType"] == "complete" and "taskId" not in ack
        done = await poll(client, created["taskId"], {"cancelled"})
        assert "result" not in done


async def test_task_09_gating_and_unknown_ids() -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        ex = await client.exchange("tasks/get", {"taskId": "nope-" * 5})
        assert ex.error["code"] == -32602
        created = await client.call_tool("slow_compute", {"seconds": 1}, wait=False, manual=True)
    async with connect(make_server()) as stranger:
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            ex = await stranger.exchange(method, {"taskId": created["taskId"], "inputResponses": {}})
            assert ex.error["code"] in (-32021, -32601)
    for removed in ("tasks/result", "tasks/list"):
        async with connect(make_server(), capabilities=TASK_CAPS) as client:
            ex = await client.exchange(removed, {"taskId": created["taskId"]})
            assert ex.error["code"] == -32601


async def test_task_13_tasks_are_bound_to_their_subject() -> None:
    server = make_server()
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 1}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": TASK_CAPS}}}
    created = await server.handle(msg, subject="alice")
    assert created is not None
    task_id = created["result"]["taskId"]
    get = {**msg, "method": "tasks/get", "params": {"taskId": task_id, "_meta": msg["params"]["_meta"]}}
    mine = await server.handle(get, subject="alice")
    theirs = await server.handle(get, subject="mallory")
    assert mine is not None and mine["result"]["status"] == "working"
    assert theirs is not None and theirs["error"]["code"] == -32602


async def test_mrtr_rounds_then_escalation_to_a_task() -> None:
    """MRTR composition: round 1 is input_required (no taskId), round 2 a task."""
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        first = await client.call_tool("test_tool_with_task", {}, wait=False, manual=True)
        assert first["resultType"] == "input_required" and "taskId" not in first
        second = await client.request("tools/call", {
            "name": "test_tool_with_task", "requestState": first["requestState"],
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}}, manual=True)
        assert second["resultType"] == "task" and "requestState" not in second
        done = await poll(client, second["taskId"], {"completed"})
        assert "Ada" in done["result"]["content"][0]["text"]


@pytest.mark.parametrize("bad", [None, "x", ["a"]])
async def test_bad_update_params_are_invalid(bad: Any) -> None:
    async with connect(make_server(), capabilities=TASK_CAPS) as client:
        created = await client.call_tool("slow_compute", {"seconds": 1}, wait=False, manual=True)
        ex = await client.exchange("tasks/update", {"taskId": created["taskId"], "inputResponses": bad})
        assert ex.error["code"] == -32602
