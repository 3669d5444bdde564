"""`server/discover`, the four lists, and the prompts and tools that take a Context,
through the request path: the same answers with and without middleware around it, byte
for byte (results, caching hints (CACHE-01/07/10), pagination (PAG-03), protocol
errors, masked errors, MRTR rounds and their state, warnings of dropped questions,
notifications and cancellation).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import orjson
import pytest

from nimblemcp import Context, Depends, ListOptions, Server, StateOptions, ToolError
from nimblemcp._port import NoIO
from nimblemcp.server._mrtr import InputRequired
from nimblemcp.server._sealing import new_key

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _prefix(ctx: Context) -> str:
    return f"{ctx.method}#{ctx.request_id}"


def _server(with_middleware: bool = False, seen: list[str] | None = None, **options: Any) -> Server:
    options.setdefault("state", StateOptions(keys=[new_key()]))
    server = Server("round5", "1.0.0", **options)

    @server.tool
    async def plain(text: str) -> str:
        return text

    @server.tool
    async def actx(text: str, ctx: Context) -> str:
        return f"{text}:{ctx.request_id}:{ctx.method}"

    @server.tool
    def sctx(n: int, ctx: Context) -> int:  # a worker thread, structured output
        return n * 2 if ctx.method == "tools/call" else -1

    @server.tool(run_in_thread=False)
    def ictx(ctx: Context, word: str = "hi") -> list[str]:  # inline
        return [word, str(ctx.request_id)]

    @server.tool
    async def dep(text: str, where: Annotated[str, Depends(_prefix)]) -> str:  # provider-resolved
        return f"{where}:{text}"

    @server.tool
    async def cfail(ctx: Context) -> str:
        raise ToolError("told the model")

    @server.tool
    async def cboom(ctx: Context) -> str:
        raise RuntimeError("secret detail")

    @server.tool
    async def casks(ctx: Context) -> str:
        answer = await ctx.elicit("ok", "Proceed?")
        ctx.state["seen"] = 1
        return f"{answer.action}:{ctx.state}"

    @server.tool
    async def keeps(ctx: Context) -> str:
        if "round" in ctx.state:
            return f"round {ctx.state['round']}"
        ctx.state["round"] = 2
        raise InputRequired({})

    @server.tool
    async def talks(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half")
        return "talked"

    @server.tool(task="optional")
    async def tasked(ctx: Context) -> str:  # a task tool
        return "task"

    @server.prompt
    async def greet(name: str) -> str:
        return f"Hello, {name}!"

    @server.prompt
    async def other(name: str) -> str:
        return name

    @server.prompt
    async def pctx(name: str, ctx: Context) -> str:
        return f"{name}:{ctx.request_id}:{ctx.method}"

    @server.prompt
    def spctx(ctx: Context) -> list[str]:  # a worker thread
        return ["one", str(ctx.request_id)]

    @server.prompt
    async def pctxboom(ctx: Context) -> str:
        raise RuntimeError("secret detail")

    @server.prompt
    async def pctxasks(ctx: Context) -> str:
        if ctx.state.get("k") == 1:
            return "kept"
        ctx.state["k"] = 1
        raise InputRequired({})

    @server.resource("docs://readme")
    async def readme() -> str:
        return "read me"

    @server.resource("docs://two", ttl_ms=5, cache_scope="public")
    async def two() -> str:
        return "two"

    @server.resource("file:///{name}")
    async def file(name: str) -> str:
        return name

    @server.resource("item://{n}")
    async def item(n: int) -> str:
        return str(n)

    if with_middleware:
        async def note(ctx: Context, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
            if seen is not None:
                seen.append(ctx.method)
            return await call_next()

        server.add_middleware(note)
    return server


def _request(method: str, params: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**(params or {}), "_meta": dict(META)}}


def _call(name: str, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    message = _request("tools/call", params)
    message["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    return message


class _IO(NoIO):
    """A RequestIO with a subject (an authenticated request) and kept notifications."""

    __slots__ = ("sent", "subject")

    def __init__(self, subject: str | None = None) -> None:
        self.subject = subject  # type: ignore[misc,assignment]
        self.sent: list[dict[str, Any]] = []

    def emit(self, message: dict[str, Any], /) -> None:
        self.sent.append(message)


async def _answer(server: Server, message: dict[str, Any], io: Any = None) -> dict[str, Any]:
    return await server.execute(server.prepare(message), io or NoIO())


def _strip_refs(response: dict[str, Any]) -> dict[str, Any]:
    result = response.get("result")
    if result and result.get("isError"):
        for block in result["content"]:
            if "reference" in block["text"]:
                block["text"] = block["text"][: block["text"].index("reference")]
    error = response.get("error")
    if error and "reference" in error["message"]:
        error["message"] = error["message"][: error["message"].index("reference")]
    return response


LISTS = ["tools/list", "resources/list", "resources/templates/list", "prompts/list"]

PLAIN_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    # (request, server options)
    (_request("server/discover"), {}),
    (_request("server/discover"), {"instructions": "Be brief."}),
    *[(_request(m), {}) for m in LISTS],
    *[(_request(m), {"lists": ListOptions(page_size=1)}) for m in LISTS],
    (_request("tools/list", {"cursor": None}), {"lists": ListOptions(page_size=1)}),
    (_request("tools/list", {"cursor": "None"}), {"lists": ListOptions(page_size=1)}),  # PAG-03: not the first page
    (_request("tools/list", {"cursor": 3}), {"lists": ListOptions(page_size=1)}),  # not a string: -32602
    (_request("tools/list", {"cursor": "bm90IGEgY3Vyc29y"}), {"lists": ListOptions(page_size=1)}),  # invalid: -32602
    (_request("prompts/list", {"cursor": "bzox"}), {"lists": ListOptions(page_size=1)}),  # "o:1": the second page
    (_request("prompts/list", {"cursor": "bzo5OQ=="}), {"lists": ListOptions(page_size=1)}),  # "o:99": past the end
    (_request("tools/list"), {"lists": ListOptions(cache_hints={"tools/list": (60_000, "public")})}),
    (_request("server/discover"), {"lists": ListOptions(cache_hints={"server/discover": (1, "private")})}),
]


@pytest.mark.parametrize("subject", [None, "alice"])
@pytest.mark.parametrize(("message", "options"), PLAIN_CASES,
                         ids=lambda v: f"{v['method']}:{v['params'].get('cursor')}" if "method" in v else str(v))
def test_lists_and_discover_answer_alike_with_and_without_middleware(message: dict[str, Any], options: dict[str, Any],
                                              subject: str | None) -> None:
    """The same request with and without a middleware,
    anonymous and authenticated (the private cache scope, CACHE-07/10)."""
    seen: list[str] = []
    bare = asyncio.run(_answer(_server(**options), message, _IO(subject)))
    general = asyncio.run(_answer(_server(True, seen, **options), message, _IO(subject)))
    assert seen == [message["method"]]  # the middleware ran
    assert orjson.dumps(bare) == orjson.dumps(general)


def test_lists_and_discover_are_the_documented_shapes() -> None:
    server = _server(lists=ListOptions(page_size=2), instructions="Be brief.")
    discover = asyncio.run(_answer(server, _request("server/discover")))["result"]
    assert list(discover) == ["supportedVersions", "capabilities", "instructions", "_meta", "resultType",
                              "ttlMs", "cacheScope"]
    assert discover["resultType"] == "complete"
    assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "round5"
    first = asyncio.run(_answer(server, _request("tools/list")))["result"]
    assert [t["name"] for t in first["tools"]] == ["plain", "actx"]
    assert list(first) == ["tools", "nextCursor", "_meta", "resultType", "ttlMs", "cacheScope"]
    second = asyncio.run(_answer(server, _request("tools/list", {"cursor": first["nextCursor"]})))["result"]
    assert [t["name"] for t in second["tools"]] == ["sctx", "ictx"]
    private = asyncio.run(_answer(server, _request("tools/list"), _IO("alice")))["result"]
    assert private["cacheScope"] == "private"
    # The cached page itself is never changed by the shaping: the anonymous answer again.
    again = asyncio.run(_answer(server, _request("tools/list")))["result"]
    assert again == first
    refused = asyncio.run(_answer(server, _request("tools/list", {"cursor": "None"})))
    assert refused["error"]["code"] == -32602

def test_lists_answer_with_load_shedding_and_log_forwarding_configured() -> None:
    """Load shedding configured, or a log level with forwarding on: lists and discover
    answer as usual and leave nothing counted as running."""
    shed = _server(max_inflight=4)
    answer = asyncio.run(_answer(shed, _request("tools/list")))
    assert "result" in answer
    logs = _server(forward_logs=True)
    message = _request("server/discover")
    message["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = "info"
    answer = asyncio.run(_answer(logs, message))
    assert "result" in answer
    assert shed.dispatcher.busy == 0 and logs.dispatcher.busy == 0


def test_a_failing_list_is_masked_with_and_without_middleware(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """An unexpected error inside a list answer is the masked -32603, logged alike."""
    answers = []
    for with_middleware in (False, True):
        server = _server(with_middleware)

        def broken(*args: Any) -> dict[str, Any]:
            raise RuntimeError("secret detail")

        monkeypatch.setattr(server.dispatcher, "_page", broken)
        answers.append(asyncio.run(_answer(server, _request("tools/list"))))
    assert answers[0]["error"]["code"] == answers[1]["error"]["code"] == -32603
    assert "secret" not in str(answers)
    assert _strip_refs(answers[0]) == _strip_refs(answers[1])
    assert sum("handler for tools/list failed" in r.getMessage() for r in caplog.records) == 2


CTX_CASES: list[dict[str, Any]] = [
    _call("actx", {"text": "a"}),
    _call("sctx", {"n": 21}),
    _call("ictx", {}),
    _call("ictx", {"word": "yo"}),
    _call("dep", {"text": "x"}),
    _call("actx", {}),  # missing argument: isError (TOOL-08)
    _call("actx", {"text": 3}),  # wrong type: isError
    _call("sctx", {"n": "x"}),
    _call("cfail", {}),
    _call("cboom", {}),  # masked
    _call("tasked", {}),
    _call("actx", None),  # no arguments at all
    _call("actx", ["a"]),  # not an object: -32602
    _call("missing", {}),  # unknown tool: -32602
]


PROMPT_CASES: list[dict[str, Any]] = [
    _request("prompts/get", {"name": "pctx", "arguments": {"name": "Ada"}}),
    _request("prompts/get", {"name": "pctx", "arguments": {}}),  # missing: -32602
    _request("prompts/get", {"name": "pctx", "arguments": {"name": 1}}),  # not a string: -32602
    _request("prompts/get", {"name": "spctx"}),
    _request("prompts/get", {"name": "pctxboom"}),  # masked -32603
]


@pytest.mark.parametrize("message", PROMPT_CASES, ids=lambda m: str(m["params"]))
def test_context_prompts_answer_alike_with_and_without_middleware(message: dict[str, Any]) -> None:
    seen: list[str] = []
    bare = asyncio.run(_answer(_server(), message))
    general = asyncio.run(_answer(_server(True, seen), message))
    assert seen == ["prompts/get"]
    assert orjson.dumps(_strip_refs(bare)) == orjson.dumps(_strip_refs(general))


def test_context_prompts_keep_their_state() -> None:
    server = _server()
    answer = asyncio.run(_answer(server, _request("prompts/get", {"name": "pctx", "arguments": {"name": "A"}})))
    assert answer["result"]["messages"][0]["content"]["text"] == "A:1:prompts/get"
    asked = asyncio.run(_answer(server, _request("prompts/get", {"name": "pctxasks"})))["result"]
    assert asked["resultType"] == "input_required"
    state = asked["requestState"]
    # The state the handler wrote rides in the sealed requestState: the next round opens it.
    again = asyncio.run(_answer(server, _request("prompts/get", {"name": "pctxasks", "requestState": state})))
    assert again["result"]["messages"][0]["content"]["text"] == "kept"
    assert server.dispatcher.busy == 0


@pytest.mark.parametrize("message", CTX_CASES, ids=lambda m: f"{m['params']['name']}:{m['params'].get('arguments')}")
def test_context_tools_answer_alike_with_and_without_middleware(message: dict[str, Any]) -> None:
    seen: list[str] = []
    bare = asyncio.run(_answer(_server(), message))
    general = asyncio.run(_answer(_server(True, seen), message))
    assert seen == ["tools/call"]
    assert orjson.dumps(_strip_refs(bare)) == orjson.dumps(_strip_refs(general))


def test_context_tools_see_their_request() -> None:
    server = _server()
    answer = asyncio.run(_answer(server, _call("actx", {"text": "a"})))
    assert answer["result"]["content"][0]["text"] == "a:1:tools/call"
    asyncio.run(_answer(server, _call("plain", {"text": "a"})))
    asyncio.run(_answer(server, _call("dep", {"text": "a"})))
    assert server.dispatcher.busy == 0


def test_notifications_of_a_context_tool_reach_the_request_s_io() -> None:
    message = _call("talks", {})
    message["params"]["_meta"]["progressToken"] = "p1"
    sent = []
    for with_middleware in (False, True):
        io = _IO()
        answer = asyncio.run(_answer(_server(with_middleware), message, io))
        assert answer["result"]["content"][0]["text"] == "talked"
        sent.append(io.sent)
    assert sent[0] == sent[1]
    assert sent[0] and sent[0][0]["method"] == "notifications/progress"


def test_mrtr_rounds_of_a_context_tool_keep_its_state() -> None:
    """MRTR-10/11: the state a Context tool wrote rides in its requestState; the next
    round reads it."""
    server = _server()
    first = asyncio.run(_answer(server, _call("keeps", {})))
    assert first["result"]["resultType"] == "input_required"
    state = first["result"]["requestState"]
    second = asyncio.run(_answer(server, _call("keeps", {}, requestState=state)))
    assert second["result"]["content"][0]["text"] == "round 2"
    asked = asyncio.run(_answer(server, _call("casks", {})))["result"]
    assert asked["resultType"] == "input_required"
    assert list(asked["inputRequests"]) == ["ok"]
    general = asyncio.run(_answer(_server(True), _call("casks", {})))["result"]
    assert list(general) == list(asked)
    assert general["inputRequests"] == asked["inputRequests"]


def test_dropped_questions_warn() -> None:
    server = Server("round5w", "1.0.0")

    @server.tool
    async def forgetful(ctx: Context) -> str:
        ctx.elicit("confirm", "Sure?")  # never awaited
        return "done"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answer = asyncio.run(_answer(server, _call("forgetful", {})))
    assert answer["result"]["content"][0]["text"] == "done"
    assert any("never awaited" in str(w.message) for w in caught)


@pytest.mark.parametrize("with_middleware", [False, True])
def test_cancelling_a_context_tool_marks_its_context(with_middleware: bool) -> None:
    server = _server(with_middleware)
    seen: list[Context] = []
    started = asyncio.Event()

    @server.tool
    async def slow(ctx: Context) -> str:
        seen.append(ctx)
        started.set()
        await asyncio.sleep(10)
        return "never"

    async def main() -> None:
        task = asyncio.ensure_future(_answer(server, _call("slow", {})))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen[0].cancelled
    assert server.dispatcher.busy == 0
