"""`tools/call` through the request path (`server/_dispatch.py`, `server/_invoke.py`):
the same answers with and without middleware around it (results, TOOL-08 isError
results, protocol errors, MRTR answers), the documented result shapes, the request's
arguments left as they came, cancellation, log forwarding, and `Prepared.meta`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from nimblemcp import Context, Server, ToolError
from nimblemcp._port import NoIO
from nimblemcp.errors import InvalidParams
from nimblemcp.server._mrtr import InputRequired

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _server(with_middleware: bool, seen: list[str] | None = None) -> Server:
    server = Server("lane", "1.0.0")

    @server.tool
    async def aecho(text: str) -> str:
        return text

    @server.tool
    def echo(text: str) -> str:
        return text

    @server.tool(run_in_thread=False)
    def inline(text: str) -> str:
        return text.upper()

    @server.tool
    def add(a: int, b: int, scale: float = 1.0) -> int:
        return int((a + b) * scale)

    @server.tool
    def ratio(a: int, b: int) -> float:
        return a / b

    @server.tool
    async def boom(text: str) -> str:
        raise RuntimeError("secret detail")

    @server.tool
    async def refuse(text: str) -> str:
        raise ToolError("no, thanks")

    @server.tool
    async def protocol(text: str) -> str:
        raise InvalidParams("bad thing")

    @server.tool
    async def asks(text: str) -> str:
        raise InputRequired({})

    @server.tool
    async def listed(text: str) -> list[str]:
        return [text, text]

    @server.tool
    async def with_ctx(text: str, ctx: Context) -> str:
        return f"{text}:{ctx.request_id}"

    @server.tool
    async def slow(text: str) -> str:
        await asyncio.sleep(30)
        return text

    if with_middleware:
        async def note(ctx: Context, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
            if seen is not None:
                seen.append(ctx.method)
            return await call_next()

        server.add_middleware(note)
    return server


def _call(name: str, arguments: Any = None, rid: int = 1, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": dict(META), **extra}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


async def _answer(server: Server, message: dict[str, Any]) -> dict[str, Any]:
    return await server.execute(server.prepare(message), NoIO())


def _strip_refs(response: dict[str, Any]) -> dict[str, Any]:
    """The masked error texts carry a random reference id: compare without it."""
    result = response.get("result")
    if result and result.get("isError"):
        for block in result["content"]:
            text = block["text"]
            if "reference" in text:
                block["text"] = text[: text.index("reference")]
    error = response.get("error")
    if error and "reference" in error["message"]:
        error["message"] = error["message"][: error["message"].index("reference")]
    return response


CASES: list[tuple[str, Any]] = [
    ("aecho", {"text": "hi"}),
    ("echo", {"text": "hi"}),
    ("inline", {"text": "hi"}),
    ("add", {"a": 2, "b": 40, "scale": 1.5}),
    ("add", {"a": 2, "b": 40}),
    ("add", {"a": 2.0, "b": 40}),  # converted by the validator, not exact
    ("add", {"a": True, "b": 40}),  # a bool is no integer: isError
    ("add", {"a": 2}),  # missing argument: isError
    ("add", {"a": 2, "b": 3, "extra": 1}),  # unknown arguments are dropped
    ("ratio", {"a": 1, "b": 4}),
    ("ratio", {"a": 4, "b": 2}),
    ("ratio", {"a": 1, "b": 0}),  # ZeroDivisionError: masked isError
    ("aecho", None),  # no arguments at all
    ("aecho", [1]),  # arguments not an object: -32602
    ("boom", {"text": "x"}),
    ("refuse", {"text": "x"}),
    ("protocol", {"text": "x"}),
    ("asks", {"text": "x"}),  # MRTR: a state-only input_required
    ("listed", {"text": "x"}),
    ("with_ctx", {"text": "x"}),
    ("missing", {"text": "x"}),  # unknown tool: -32602
]


@pytest.mark.parametrize(("name", "arguments"), CASES)
def test_the_answers_are_the_same_with_and_without_middleware(name: str, arguments: Any) -> None:
    """TOOL-06/08, MRTR-02: the same request, with and without middleware."""
    seen: list[str] = []
    bare = asyncio.run(_answer(_server(False), _call(name, arguments)))
    general = asyncio.run(_answer(_server(True, seen), _call(name, arguments)))
    assert seen == ["tools/call"]  # the middleware ran
    if "result" in bare and bare["result"].get("resultType") == "input_required":
        # The sealed state differs per seal; its presence and shape do not.
        assert set(bare["result"]) == set(general["result"]) == {"resultType", "requestState", "_meta"}
        return
    assert _strip_refs(bare) == _strip_refs(general)


def test_results_are_the_documented_shapes() -> None:
    """TOOL-06: text, structured scalar output, isError, protocol error."""
    server = _server(False)

    async def run() -> list[dict[str, Any]]:
        return [await _answer(server, m) for m in (
            _call("aecho", {"text": "hi"}), _call("add", {"a": 1, "b": 2}),
            _call("boom", {"text": "x"}), _call("aecho", [1]),
        )]

    text, scalar, failed, refused = asyncio.run(run())
    info = {"io.modelcontextprotocol/serverInfo": server.info}
    assert text == {"jsonrpc": "2.0", "id": 1, "result": {
        "resultType": "complete", "content": [{"type": "text", "text": "hi"}], "_meta": info}}
    assert list(text["result"]) == ["resultType", "content", "_meta"]
    assert scalar["result"] == {
        "resultType": "complete", "content": [{"type": "text", "text": '{"result":3}'}],
        "structuredContent": {"result": 3}, "_meta": info}
    assert failed["result"]["isError"] is True
    assert "secret detail" not in failed["result"]["content"][0]["text"]
    assert refused["error"]["code"] == -32602


def test_arguments_of_the_request_are_not_changed() -> None:
    """The validator may hand the request's own arguments to the tool: never changed."""
    server = _server(False)
    message = _call("add", {"a": 1, "b": 2})
    asyncio.run(_answer(server, message))
    assert message["params"]["arguments"] == {"a": 1, "b": 2}
    message = _call("with_ctx", {"text": "x"})
    asyncio.run(_answer(server, message))
    assert message["params"]["arguments"] == {"text": "x"}


@pytest.mark.parametrize("with_middleware", [False, True])
def test_cancellation_propagates_with_and_without_middleware(with_middleware: bool) -> None:
    """A cancelled call raises CancelledError out of execute and has no response."""
    server = _server(with_middleware)

    async def run() -> None:
        task = asyncio.ensure_future(_answer(server, _call("slow", {"text": "x"})))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert server.dispatcher.busy == 0

    asyncio.run(run())


def test_logs_are_forwarded_and_malformed_input_responses_refused() -> None:
    """LOG-02: a handler's log record reaches the request that asked for logs; MRTR-11:
    malformed `inputResponses` are refused."""
    server = Server("lane", "1.0.0", forward_logs=True)
    got: list[dict[str, Any]] = []

    @server.tool
    async def chatty(text: str) -> str:
        import logging

        logging.getLogger("lane.app").warning("said %s", text)
        return text

    meta = {**META, "io.modelcontextprotocol/logLevel": "debug"}
    message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": "chatty", "arguments": {"text": "hi"}, "_meta": meta}}

    async def run() -> dict[str, Any]:
        return await server.dispatcher.execute(server.prepare(message), got.append)

    response = asyncio.run(run())
    assert response["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert [n["method"] for n in got] == ["notifications/message"]
    bad = _call("aecho", {"text": "x"}, inputResponses=[1])
    answer = asyncio.run(_answer(_server(False), bad))
    assert answer["error"]["code"] == -32602  # malformed inputResponses: refused as before


def test_prepared_meta_reads_like_request_meta() -> None:
    """The port: `prepared.meta` gives the `_meta` fields, as `RequestMeta` names them."""
    server = _server(False)
    meta = {**META, "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "progressToken": 7, "io.modelcontextprotocol/logLevel": "info"}
    req = server.prepare({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"name": "aecho", "_meta": meta}})
    assert (req.id, req.method, req.meta.version) == (9, "tools/call", "2026-07-28")
    assert req.meta.client_info == {"name": "t", "version": "1"}
    assert (req.meta.progress_token, req.meta.log_level, req.meta.raw) == (7, 1, meta)
    plain = server.prepare(_call("aecho", {"text": "x"}))
    assert (plain.meta.client_info, plain.meta.progress_token, plain.meta.log_level) == (None, None, None)
    odd = server.prepare({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "aecho", "_meta": {**META, "io.modelcontextprotocol/clientInfo": "not an object"}}})
    assert odd.meta.client_info is None
