"""Sync tools run in the worker threads (server/_workers.py, _invoke.py): a plain one,
one with positional-only parameters and one with a dependency each run off the loop;
every answer (coerced and default values, argument errors, tool errors, masked
exceptions, protocol errors, MRTR pauses, structured output and its check) is the same
with and without middleware; context variables reach the tool and stay in its copy; a
cancelled request drops its call; `Workers.call` keeps the pool's guarantees
(cancelled before start: never run; cancelled while running: result dropped;
StopIteration; no head-of-line blocking); and the same through a real served server."""

from __future__ import annotations

import asyncio
import contextvars
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from _deploy import call, launch, stop

from nimblemcp import Context, Depends, InvalidParams, Server, StateOptions, ToolError
from nimblemcp._port import NoIO
from nimblemcp.server._mrtr import InputRequired
from nimblemcp.server._sealing import new_key
from nimblemcp.server._workers import Workers

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}

REQUEST_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("sync_tools_request", default="unset")


class Point(TypedDict):
    x: int
    y: int


def _where(ctx: Context) -> str:
    return ctx.method


def _server(with_middleware: bool = False) -> Server:
    server = Server("sync-tools", "1.0.0", state=StateOptions(keys=[new_key()]))

    @server.tool
    def add(a: int, b: int, scale: float = 1.0) -> int:
        return int((a + b) * scale)

    @server.tool
    def echo(text: str, times: int = 1) -> str:
        return text * times

    @server.tool
    def worker_name() -> str:
        return threading.current_thread().name

    @server.tool
    def point(x: int, y: int) -> Point:
        return {"x": x, "y": y}

    @server.tool
    def bad_point(x: int) -> Point:
        return {"x": x, "y": "not an int"}  # type: ignore[typeddict-item]

    @server.tool
    def told(why: str) -> str:
        raise ToolError(why)

    @server.tool
    def boom() -> str:
        raise RuntimeError("secret detail")

    @server.tool
    def refuses(n: int) -> str:
        raise InvalidParams(f"n={n} is refused")

    @server.tool
    def pauses() -> str:
        raise InputRequired({})

    @server.tool
    def stops() -> str:
        raise StopIteration

    @server.tool
    def reads_var() -> str:
        seen = REQUEST_VAR.get()
        REQUEST_VAR.set("set by the tool")  # in the worker's copy only
        return seen

    @server.tool
    def only_positional(a: int, /, b: int = 2) -> int:  # wrapped: keeps keywords
        return a * b

    @server.tool
    def with_dep(text: str, where: Annotated[str, Depends(_where)]) -> str:  # wrapped too
        return f"{where}:{text}"

    if with_middleware:
        async def note(ctx: Context, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
            return await call_next()

        server.add_middleware(note)
    return server


def _call(name: str, arguments: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": dict(META)}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


async def _answer(server: Server, message: dict[str, Any]) -> dict[str, Any]:
    return await server.execute(server.prepare(message), NoIO())


def _strip(response: dict[str, Any]) -> dict[str, Any]:
    """The answer without what is random per call (reference ids, sealed state)."""
    result = response.get("result")
    if result:
        if result.get("isError"):
            for block in result["content"]:
                if "reference" in block["text"]:
                    block["text"] = block["text"][: block["text"].index("reference")]
        if "requestState" in result:
            result["requestState"] = "<sealed>"
    error = response.get("error")
    if error and "reference" in error["message"]:
        error["message"] = error["message"][: error["message"].index("reference")]
    return response


# -- which tools get their values by position ------------------------------------------

async def test_a_plain_sync_tool_runs_in_a_worker_thread() -> None:
    server = _server()
    answer = await _answer(server, _call("add", {"a": 2, "b": 3}))
    assert answer["result"]["structuredContent"] == {"result": 5}
    name = await _answer(server, _call("worker_name"))
    assert name["result"]["content"][0]["text"] == "nimblemcp-worker"
    # A function with positional-only parameters, and one with a dependency, too.
    assert (await _answer(server, _call("only_positional", {"a": 4})))["result"]["structuredContent"] == {"result": 8}
    dep = await _answer(server, _call("with_dep", {"text": "t"}))
    assert dep["result"]["content"][0]["text"] == "tools/call:t"


# -- every answer is the same with and without middleware ------------------------------

CASES: list[tuple[str, Any]] = [
    ("add", {"a": 2, "b": 3}),
    ("add", {"a": 2, "b": 3, "scale": 2}),  # an int for a float: checked, passed on
    ("add", {"a": 2, "b": 3, "scale": 0.5}),
    ("add", {"a": 2}),  # a required argument missing: the tool's argument error
    ("add", {"a": "two", "b": 3}),  # the wrong type
    ("add", {"a": True, "b": 3}),  # a bool is not an int here either
    ("add", {"a": 1, "b": 2, "extra": 9}),  # an argument the tool does not take
    ("add", None),  # no `arguments` at all
    ("echo", {"text": "ab", "times": 3}),
    ("echo", {"text": "ab"}),  # the default
    ("point", {"x": 1, "y": 2}),  # structured output, checked
    ("bad_point", {"x": 1}),  # structured output that breaks its schema: isError
    ("told", {"why": "told the model"}),  # ToolError: its text
    ("boom", {}),  # masked, with a reference
    ("refuses", {"n": 3}),  # a protocol error: a JSON-RPC error
    ("pauses", {}),  # MRTR: input_required with a sealed state
    ("stops", {}),  # StopIteration: a tool error, not a hang
    ("only_positional", {"a": 3}),
    ("with_dep", {"text": "x"}),
]


@pytest.mark.parametrize(("name", "arguments"), CASES)
async def test_each_answer_is_the_same_with_and_without_middleware(name: str, arguments: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = _strip(await _answer(_server(), _call(name, arguments)))
    general = _strip(await _answer(_server(with_middleware=True), _call(name, arguments)))
    assert bare == general
    assert bare["id"] == 7


async def test_the_answers_say_what_each_case_is() -> None:
    # The comparison above would hold for two paths broken alike: the outcomes themselves.
    server = _server()

    async def result(name: str, arguments: Any) -> dict[str, Any]:
        return (await _answer(server, _call(name, arguments)))["result"]  # type: ignore[no-any-return]

    assert (await result("add", {"a": 2, "b": 3, "scale": 2}))["structuredContent"] == {"result": 10}
    missing = await result("add", {"a": 2})
    assert missing["isError"] is True and "Invalid arguments for tool add" in missing["content"][0]["text"]
    assert (await result("add", {"a": "two", "b": 3}))["isError"] is True
    assert (await result("echo", {"text": "ab"}))["content"][0]["text"] == "ab"
    assert (await result("point", {"x": 1, "y": 2}))["structuredContent"] == {"x": 1, "y": 2}
    bad = await result("bad_point", {"x": 1})
    assert bad["isError"] is True and "outputSchema" in bad["content"][0]["text"]
    assert (await result("told", {"why": "told the model"}))["content"][0]["text"] == "told the model"
    boom = (await result("boom", {}))["content"][0]["text"]
    assert "secret" not in boom and "reference" in boom
    refused = await _answer(server, _call("refuses", {"n": 3}))
    assert refused["error"]["code"] == -32602 and "n=3 is refused" in refused["error"]["message"]
    paused = await result("pauses", {})
    assert paused["resultType"] == "input_required" and paused["requestState"]
    assert (await result("stops", {}))["isError"] is True


async def test_context_variables_reach_the_tool_and_stay_in_its_copy() -> None:
    server = _server()
    REQUEST_VAR.set("from the request")
    first = await _answer(server, _call("reads_var"))
    assert first["result"]["content"][0]["text"] == "from the request"
    assert REQUEST_VAR.get() == "from the request"  # the tool's own set stayed in its copy
    second = await _answer(server, _call("reads_var"))
    assert second["result"]["content"][0]["text"] == "from the request"


async def test_a_cancelled_request_drops_the_sync_call() -> None:
    server = Server("sync-cancel", "1.0.0")
    started, release = threading.Event(), threading.Event()

    @server.tool
    def hold(n: int) -> str:
        started.set()
        release.wait(10)
        return f"held {n}"

    task = asyncio.ensure_future(_answer(server, _call("hold", {"n": 1})))
    while not started.is_set():
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.sleep(0.05)  # the result comes back to a cancelled future: dropped
    again = await _answer(server, _call("hold", {"n": 2}))
    assert again["result"]["content"][0]["text"] == "held 2"


# -- Workers.call keeps the pool's guarantees ------------------------------------------


async def test_call_runs_positional_values_in_a_worker_with_the_callers_context() -> None:
    pool = Workers(max_workers=2, batch_wait=False)
    loop = asyncio.get_running_loop()
    REQUEST_VAR.set("caller")

    def job(a: int, b: str, c: list[int]) -> tuple[int, str, list[int], str, str]:
        return a, b, c, REQUEST_VAR.get(), threading.current_thread().name

    assert await pool.call(loop, job, [1, "two", [3]]) == (1, "two", [3], "caller", "nimblemcp-worker")
    assert await pool.call(loop, job, (4, "five", [])) == (4, "five", [], "caller", "nimblemcp-worker")

    def fails(why: str) -> None:
        raise ValueError(why)

    with pytest.raises(ValueError, match="told"):
        await pool.call(loop, fails, ["told"])

    def stops() -> None:
        raise StopIteration

    with pytest.raises(RuntimeError, match="StopIteration"):
        await pool.call(loop, stops, ())


async def test_call_skips_a_job_cancelled_before_it_started_and_drops_a_late_result() -> None:
    pool = Workers(max_workers=1, batch_wait=False)
    loop = asyncio.get_running_loop()
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def block(tag: str) -> str:
        started.set()
        release.wait(10)
        ran.append(tag)
        return tag

    first = pool.call(loop, block, ["first"])
    while not started.is_set():
        await asyncio.sleep(0.005)
    queued = pool.call(loop, ran.append, ["never"])  # waits for the one worker
    queued.cancel()
    first.cancel()  # while it runs: its result is dropped in the drain
    release.set()
    after = await pool.call(loop, lambda x: x * 2, [21])
    assert after == 42
    assert ran == ["first"]  # the cancelled queued job never started
    assert pool.skipped == 1


async def test_call_never_queues_behind_a_blocked_job_while_the_pool_has_room() -> None:
    pool = Workers(max_workers=4, batch_wait=False)
    loop = asyncio.get_running_loop()
    release = threading.Event()
    blocked = pool.call(loop, release.wait, [10])
    try:
        async with asyncio.timeout(5):
            assert await pool.call(loop, sum, [[1, 2, 3]]) == 6
            assert await pool.submit(loop, dict, {"k": 1}) == {"k": 1}  # the keyword hand-off too
    finally:
        release.set()
    assert await blocked is True


# -- through a real served server -------------------------------------------------------

SERVER = '''
import nimblemcp as m

server = m.Server("hop7")


@server.tool
def echo(text: str) -> str:
    return text


@server.tool
def add(a: int, b: int, scale: float = 1.0) -> int:
    return int((a + b) * scale)


@server.tool
def boom(n: int) -> str:
    raise RuntimeError(f"secret {n}")


@server.tool
def refuses(n: int) -> str:
    raise m.InvalidParams(f"n={n} is refused")
'''


async def test_a_served_server_answers_sync_tools(tmp_path: Path) -> None:
    src = tmp_path / "hop7_server.py"
    src.write_text(SERVER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = tmp_path / "server.log"
    proc = launch(src, port, log, "--log-level", "warning")
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient(timeout=30) as c:
            answers = await asyncio.gather(*[call(c, url, "echo", {"text": f"t{i}"}) for i in range(40)])
            assert [json.loads(a.text)["result"]["content"][0]["text"] for a in answers] == \
                [f"t{i}" for i in range(40)]
            sums = await asyncio.gather(*[call(c, url, "add", {"a": i, "b": 1, "scale": 2}) for i in range(20)])
            assert [a.json()["result"]["structuredContent"] for a in sums] == \
                [{"result": (i + 1) * 2} for i in range(20)]
            missing = (await call(c, url, "add", {"a": 1})).json()["result"]
            assert missing["isError"] is True and "Invalid arguments for tool add" in missing["content"][0]["text"]
            boom = (await call(c, url, "boom", {"n": 5})).json()["result"]
            assert boom["isError"] is True and "secret" not in boom["content"][0]["text"]
            refused = await call(c, url, "refuses", {"n": 3})
            assert refused.json()["error"]["code"] == -32602
    finally:
        assert stop(proc) == 0
    assert "secret 5" in log.read_text()  # the masked detail went to the log
