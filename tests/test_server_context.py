"""The per-request Context: progress (PROG-02/03), logs (LOG-02/03), threads, cancellation."""

from __future__ import annotations

import asyncio
import threading

import nimblemcp as m
from nimblemcp.testing import connect
from nimblemcp.types import LOG_LEVEL


def ctx_server(record: dict[str, object]) -> m.Server:
    server = m.Server("ctx")

    @server.tool()
    async def steps(ctx: m.Context) -> str:
        for p in (1, 2, 2, 1.5, 3, 10):
            await ctx.report_progress(p, 10, f"at {p}")
        return "done"

    @server.tool()
    def sync_steps(ctx: m.Context) -> str:
        record["thread"] = threading.get_ident()
        ctx.report_progress(1)
        ctx.report_progress(2, message="two")
        ctx.warning("careful")
        return "done"

    @server.tool()
    async def logs(ctx: m.Context) -> str:
        record["thread"] = threading.get_ident()
        for level in ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"):
            ctx.log(level, {"level": level}, logger="t")
        return "done"

    @server.tool()
    async def who(ctx: m.Context) -> dict[str, object]:
        return {"version": ctx.protocol_version, "caps": ctx.client_capabilities,
                "info": ctx.client_info, "token": ctx.progress_token, "level": ctx.log_level,
                "method": ctx.method, "id": ctx.request_id}

    return server


async def test_prog_03_progress_strictly_increasing_and_only_with_token() -> None:
    """PROG-03: non-increasing values are dropped; PROG-01: no token -> no progress."""
    async with connect(ctx_server({})) as c:
        with_token = await c.exchange("tools/call", {"name": "steps"}, meta=c.meta(progressToken=7))
        without = await c.exchange("tools/call", {"name": "steps"})
    values = [n["params"]["progress"] for n in with_token.notifications]
    assert values == [1, 2, 3, 10]
    assert all(n["params"]["progressToken"] == 7 for n in with_token.notifications)
    assert with_token.notifications[0]["params"] == {"progressToken": 7, "progress": 1, "total": 10, "message": "at 1"}
    assert with_token.result["content"][0]["text"] == "done"
    assert without.notifications == []
    assert without.result["content"][0]["text"] == "done"


async def test_prog_01_string_token_echoed_as_string() -> None:
    """BASE-11 for progress tokens: "7" stays a string."""
    async with connect(ctx_server({})) as c:
        ex = await c.exchange("tools/call", {"name": "steps"}, meta=c.meta(progressToken="7"))
    assert {type(n["params"]["progressToken"]) for n in ex.notifications} == {str}


async def test_log_02_03_logs_only_with_level_and_at_or_above_it() -> None:
    """LOG-02: no logLevel -> no notifications/message; LOG-03: only >= the level."""
    async with connect(ctx_server({})) as c:
        none = await c.exchange("tools/call", {"name": "logs"})
        warn = await c.exchange("tools/call", {"name": "logs"}, meta=c.meta(**{LOG_LEVEL: "warning"}))
        debug = await c.exchange("tools/call", {"name": "logs"}, meta=c.meta(**{LOG_LEVEL: "debug"}))
    assert none.notifications == []
    assert [n["params"]["level"] for n in warn.notifications] == [
        "warning", "error", "critical", "alert", "emergency"]
    assert len(debug.notifications) == 8
    assert debug.notifications[0] == {"jsonrpc": "2.0", "method": "notifications/message",
                                      "params": {"level": "debug", "data": {"level": "debug"}, "logger": "t"}}


async def test_sync_handler_runs_in_worker_thread_and_reports_progress() -> None:
    """Sync tools run off the loop thread and can still emit progress and logs, in order."""
    record: dict[str, object] = {}
    async with connect(ctx_server(record)) as c:
        ex = await c.exchange("tools/call", {"name": "sync_steps"},
                              meta=c.meta(progressToken="p", **{LOG_LEVEL: "info"}))
        loop_thread = threading.get_ident()
        sync_thread = record["thread"]
        await c.exchange("tools/call", {"name": "logs"})
        async_thread = record["thread"]
    assert sync_thread != loop_thread
    assert async_thread == loop_thread
    assert [n["method"] for n in ex.notifications] == [
        "notifications/progress", "notifications/progress", "notifications/message"]
    assert ex.notifications[1]["params"] == {"progressToken": "p", "progress": 2, "message": "two"}
    assert ex.result["content"][0]["text"] == "done"


async def test_base_08_context_comes_from_this_request_only() -> None:
    """BASE-08 / META-05: the context reflects exactly this request's `_meta`."""
    async with connect(ctx_server({})) as c:
        first = await c.call_tool("who", meta={"progressToken": 5, LOG_LEVEL: "error"})
        second = await c.call_tool("who")
    a, b = first["structuredContent"], second["structuredContent"]
    assert a["token"] == 5 and a["level"] == "error" and a["method"] == "tools/call"
    assert a["version"] == "2026-07-28" and a["caps"] == {}
    assert a["info"] == {"name": "nimblemcp-testing", "version": "0"}
    assert b["token"] is None and b["level"] is None
    assert b["id"] != a["id"]


async def test_canc_03_cancelled_handler_sees_flag_and_sends_nothing_more() -> None:
    """CANC-03: a cancelled request emits nothing further; sync code can poll `cancelled`."""
    server = m.Server("c")
    started = threading.Event()
    release = threading.Event()
    seen: dict[str, object] = {}

    @server.tool()
    def slow(ctx: m.Context) -> str:
        started.set()
        release.wait(30)
        seen["cancelled"] = ctx.cancelled
        ctx.report_progress(1)
        return "late"

    notes: list[dict[str, object]] = []
    prepared = server.dispatcher.prepare({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "slow", "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": 1}}})
    task = asyncio.create_task(server.dispatcher.execute(prepared, notes.append))
    await asyncio.to_thread(started.wait, 30)
    task.cancel()
    try:
        await task
        raise AssertionError("the task should have been cancelled")
    except asyncio.CancelledError:
        pass
    release.set()
    for _ in range(1000):  # let the worker thread finish (no timing assertion)
        if "cancelled" in seen:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)
    assert seen["cancelled"] is True
    assert notes == []


async def test_sync_tool_can_opt_out_of_the_worker_thread() -> None:
    """`run_in_thread=False`: a never-blocking sync tool runs on the loop thread."""
    import threading

    from nimblemcp import Server
    from nimblemcp.testing import connect

    server = Server("inline")
    seen: dict[str, int] = {}

    @server.tool(run_in_thread=False)
    def quick(text: str) -> str:
        seen["quick"] = threading.get_ident()
        return text

    @server.tool
    def threaded(text: str) -> str:
        seen["threaded"] = threading.get_ident()
        return text

    async with connect(server) as client:
        assert (await client.call_tool("quick", {"text": "a"}))["content"][0]["text"] == "a"
        await client.call_tool("threaded", {"text": "b"})
    assert seen["quick"] == threading.get_ident()
    assert seen["threaded"] != threading.get_ident()
