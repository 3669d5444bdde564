"""`prompts/get` and `resources/read` through the request path: the same answers with
and without middleware around it (results, caching hints, protocol errors and their
messages, masked internal errors, MRTR answers, notifications, cancellation), whether
the function takes a Context or not, for mounted entries too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import orjson
import pytest

from nimblemcp import Context, Depends, ListOptions, Server
from nimblemcp._port import NoIO
from nimblemcp.server._mrtr import InputRequired

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _server(with_middleware: bool = False, seen: list[str] | None = None, **options: Any) -> Server:
    server = Server("lane4", "1.0.0", **options)

    @server.prompt
    async def greet(name: str, greeting: str = "Hello") -> str:
        """Greet someone."""
        return f"{greeting}, {name}!"

    @server.prompt
    def sgreet(name: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": {"type": "text", "text": name}},
                {"role": "assistant", "content": {"type": "text", "text": "ok"}}]

    @server.prompt
    async def pboom(name: str) -> str:
        raise RuntimeError("secret detail")

    @server.prompt
    async def pwrong(name: str) -> int:
        return 42  # not a prompt value: TypeError, masked -32603

    @server.prompt
    async def pasks(name: str) -> str:
        raise InputRequired({})

    @server.prompt
    async def pctx(name: str, ctx: Context) -> str:
        return f"{name}:{ctx.request_id}:{ctx.method}"

    @server.resource("docs://readme", mime_type="text/markdown")
    async def readme() -> str:
        return "# read me"

    @server.resource("docs://sync")
    def sync_doc() -> bytes:
        return b"\x00\x01"

    @server.resource("docs://cached", ttl_ms=5000)
    async def cached() -> str:
        return "fresh"

    @server.resource("docs://scoped", cache_scope="public")
    async def scoped() -> str:
        return "shared"

    @server.resource("docs://boom")
    async def rboom() -> str:
        raise RuntimeError("secret detail")

    @server.resource("docs://wrong")
    async def rwrong() -> int:
        return 42  # TypeError: masked -32603

    @server.resource("docs://asks")
    async def rasks() -> str:
        raise InputRequired({})

    @server.resource("docs://ctx")
    async def rctx(ctx: Context) -> str:
        return f"{ctx.request_id}:{ctx.method}"

    @server.resource("file:///{name}")
    async def file(name: str) -> str:
        return f"file {name}"

    @server.resource("item://{n}", ttl_ms=10, cache_scope="private")
    def item(n: int) -> dict[str, Any]:
        return {"uri": f"item://{n}", "text": str(n * 2)}

    @server.resource("ctx://{key}")
    async def with_ctx(key: str, ctx: Context) -> str:
        return f"{key}:{ctx.request_id}:{ctx.method}"

    if with_middleware:
        async def note(ctx: Context, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
            if seen is not None:
                seen.append(ctx.method)
            return await call_next()

        server.add_middleware(note)
    return server


def _request(method: str, params: dict[str, Any], rid: int = 1, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": meta or dict(META)}}


def _prompt(name: Any, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, **extra}
    if arguments is not None:
        params["arguments"] = arguments
    return _request("prompts/get", params)


def _read(uri: Any, **extra: Any) -> dict[str, Any]:
    return _request("resources/read", {"uri": uri, **extra})


async def _answer(server: Server, message: dict[str, Any], io: Any = None) -> dict[str, Any]:
    return await server.execute(server.prepare(message), io or NoIO())


def _strip_refs(response: dict[str, Any]) -> dict[str, Any]:
    """The masked error texts carry a random reference id: compare without it."""
    result = response.get("result")
    if result and result.get("isError"):
        for block in result["content"]:
            if "reference" in block["text"]:
                block["text"] = block["text"][: block["text"].index("reference")]
    error = response.get("error")
    if error and "reference" in error["message"]:
        error["message"] = error["message"][: error["message"].index("reference")]
    return response


CASES: list[dict[str, Any]] = [
    _prompt("greet", {"name": "Ada"}),
    _prompt("greet", {"name": "Ada", "greeting": "Hi"}),
    _prompt("greet", {"name": "Ada", "unknown": "dropped"}),
    _prompt("greet", {}),  # missing required argument: -32602
    _prompt("greet"),  # no arguments at all: -32602 (missing)
    _prompt("greet", {"name": 1}),  # not a string: -32602
    _prompt("greet", ["Ada"]),  # not an object: -32602
    _prompt("sgreet", {"name": "Bo"}),  # sync: the worker thread
    _prompt("pboom", {"name": "x"}),  # masked -32603
    _prompt("pwrong", {"name": "x"}),  # masked -32603
    _prompt("pasks", {"name": "x"}),  # MRTR: state-only input_required
    _prompt("pctx", {"name": "x"}),  # takes a Context
    _prompt("missing", {"name": "x"}),  # unknown prompt: -32602
    _prompt(7, {"name": "x"}),  # name not a string: -32602
    _read("docs://readme"),
    _read("docs://sync"),
    _read("docs://cached"),
    _read("docs://scoped"),
    _read("docs://boom"),
    _read("docs://wrong"),
    _read("docs://asks"),
    _read("docs://ctx"),
    _read("file:///notes.txt"),
    _read("file:///a%20b"),
    _read("file:///..%2Fetc"),  # traversal: -32602 Invalid resource URI
    _read("item://21"),
    _read("item://x"),  # not an int: -32602
    _read("ctx://k"),  # a template that takes a Context
    _read("docs://nothing"),  # resource not found: -32602
    _read(3),  # uri not a string: -32602
]


@pytest.mark.parametrize("message", CASES, ids=lambda m: f"{m['method']}:{m['params'].get('name') or m['params'].get('uri')}")
def test_the_answers_are_the_same_with_and_without_middleware(message: dict[str, Any]) -> None:
    """The same request with and without a middleware."""
    seen: list[str] = []
    bare = asyncio.run(_answer(_server(), message))
    general = asyncio.run(_answer(_server(True, seen), message))
    assert seen == [message["method"]]  # the middleware ran
    if "result" in bare and bare["result"].get("resultType") == "input_required":
        # The sealed state differs per seal; its presence and shape do not.
        assert set(bare["result"]) == set(general["result"]) == {"resultType", "requestState", "_meta"}
        return
    # The same bytes on the wire: the same keys in the same order.
    assert orjson.dumps(_strip_refs(bare)) == orjson.dumps(_strip_refs(general))

def test_answers_are_the_documented_shapes() -> None:
    """PROMPT/RES results and CACHE-01 hints."""
    server = _server()
    info = {"io.modelcontextprotocol/serverInfo": server.info}

    async def run() -> list[dict[str, Any]]:
        return [await _answer(server, m) for m in (
            _prompt("greet", {"name": "Ada"}), _read("docs://readme"), _read("item://21"),
            _read("docs://nothing"), _prompt("greet", {}),
        )]

    prompt, readme, item, missing, refused = asyncio.run(run())
    assert prompt["result"] == {
        "resultType": "complete", "description": "Greet someone.",
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hello, Ada!"}}], "_meta": info}
    assert readme["result"]["contents"] == [
        {"uri": "docs://readme", "mimeType": "text/markdown", "text": "# read me"}]
    assert readme["result"]["resultType"] == "complete" and readme["result"]["_meta"] == info
    assert "ttlMs" in readme["result"] and "cacheScope" in readme["result"]
    assert item["result"]["contents"] == [{"uri": "item://21", "text": "42"}]
    assert (item["result"]["ttlMs"], item["result"]["cacheScope"]) == (10, "private")
    assert missing["error"] == {"code": -32602, "message": "Resource not found", "data": {"uri": "docs://nothing"}}
    assert refused["error"] == {
        "code": -32602, "message": "Missing required argument(s) for prompt greet: name"}


def test_the_context_of_a_found_template_is_the_request_s() -> None:
    """A template taking a Context sees its own request."""
    server = _server()
    message = _read("ctx://k")
    message["id"] = 41
    answer = asyncio.run(_answer(server, message))
    assert answer["result"]["contents"][0]["text"] == "k:41:resources/read"
    message = _prompt("pctx", {"name": "p"})
    message["id"] = 42
    answer = asyncio.run(_answer(server, message))
    assert answer["result"]["messages"][0]["content"]["text"] == "p:42:prompts/get"


def test_a_subject_scopes_cache_hints_with_and_without_middleware() -> None:
    """CACHE-07: an authenticated answer is private unless the server said otherwise."""

    class Subject(NoIO):
        subject = "alice"

    answers = []
    for with_middleware in (False, True):
        server = _server(with_middleware)
        answer = asyncio.run(_answer(server, _read("docs://readme"), Subject()))
        assert answer["result"]["cacheScope"] == "private"
        scoped = asyncio.run(_answer(server, _read("docs://scoped"), Subject()))
        assert scoped["result"]["cacheScope"] == "public"
        templated = asyncio.run(_answer(server, _read("file:///a"), Subject()))
        assert templated["result"]["cacheScope"] == "private"
        answers.append([orjson.dumps(a) for a in (answer, scoped, templated)])
    assert answers[0] == answers[1]
    explicit = Server("lane4", "1.0.0", lists=ListOptions(cache_hints={"resources/read": (60_000, "public")}))

    @explicit.resource("docs://x")
    async def x() -> str:
        return "x"

    shared = asyncio.run(_answer(explicit, _read("docs://x"), Subject()))
    assert (shared["result"]["ttlMs"], shared["result"]["cacheScope"]) == (60_000, "public")


def test_log_forwarding_forwards_a_handler_s_records() -> None:
    """A request with a log level on a forwarding server still gets its notifications."""
    server = Server("lane4", "1.0.0", forward_logs=True)

    @server.prompt
    async def chatty(name: str) -> str:
        logging.getLogger("lane4.app").warning("said %s", name)
        return name

    @server.resource("log://x")
    async def noisy() -> str:
        logging.getLogger("lane4.app").warning("read")
        return "x"

    meta = {**META, "io.modelcontextprotocol/logLevel": "debug"}
    got: list[dict[str, Any]] = []

    async def run(message: dict[str, Any]) -> dict[str, Any]:
        return await server.dispatcher.execute(server.prepare(message), got.append)

    prompt = asyncio.run(run(_request("prompts/get", {"name": "chatty", "arguments": {"name": "hi"}}, meta=meta)))
    read = asyncio.run(run(_request("resources/read", {"uri": "log://x"}, meta=meta)))
    assert prompt["result"]["messages"][0]["content"]["text"] == "hi"
    assert read["result"]["contents"][0]["text"] == "x"
    assert [n["method"] for n in got] == ["notifications/message", "notifications/message"]
    quiet = asyncio.run(run(_request("prompts/get", {"name": "chatty", "arguments": {"name": "hi"}})))
    assert quiet["result"]["messages"][0]["content"]["text"] == "hi"
    assert len(got) == 2  # no log level asked: nothing forwarded


def test_mrtr_rounds_resume() -> None:
    """A request carrying inputResponses or requestState is checked as before."""
    server = _server()
    bad = asyncio.run(_answer(server, _prompt("greet", {"name": "x"}, inputResponses=[1])))
    assert bad["error"]["code"] == -32602
    bad = asyncio.run(_answer(server, _read("docs://readme", requestState="forged")))
    assert bad["error"] == {"code": -32602, "message": "Invalid or expired requestState"}


def test_a_state_from_a_first_round_resumes_the_request() -> None:
    """MRTR-11: the requestState a first round returned is bound to its request."""
    server = Server("lane4", "1.0.0")
    rounds: list[int] = []

    @server.resource("ask://once")
    async def once() -> str:
        rounds.append(1)
        if len(rounds) == 1:
            raise InputRequired({})
        return "done"

    first = asyncio.run(_answer(server, _read("ask://once")))
    assert first["result"]["resultType"] == "input_required"
    state = first["result"]["requestState"]
    second = asyncio.run(_answer(server, _read("ask://once", requestState=state)))
    assert second["result"]["contents"][0]["text"] == "done"
    other = asyncio.run(_answer(server, _read("docs://x", requestState=state)))
    assert other["error"]["code"] == -32602  # bound to its own URI


def test_mounted_entries_run_with_their_own_server() -> None:
    """A mounted prompt or resource (a subclass entry) keeps `ctx.server` the child's."""
    child = Server("child", "1.0.0")

    @child.prompt
    async def hello(name: str, ctx: Context) -> str:
        return f"{name}@{ctx.server.name}"

    @child.prompt
    async def plain(name: str) -> str:
        return f"plain {name}"

    @child.resource("kid://{key}")
    async def kid(key: str, ctx: Context) -> str:
        return f"{key}@{ctx.server.name}"

    @child.resource("kid://fixed")
    async def fixed() -> str:
        return "fixed"

    host = Server("host", "1.0.0")
    host.mount(child, namespace="c")
    answers = asyncio.run(_many(host, [
        _prompt("c_hello", {"name": "x"}), _prompt("c_plain", {"name": "y"}),
        _read("kid://c/k"), _read("kid://c/fixed"),
    ]))
    assert answers[0]["result"]["messages"][0]["content"]["text"] == "x@child"
    assert answers[1]["result"]["messages"][0]["content"]["text"] == "plain y"
    assert answers[2]["result"]["contents"] == [{"uri": "kid://c/k", "mimeType": "text/plain", "text": "k@child"}]
    assert answers[3]["result"]["contents"] == [
        {"uri": "kid://c/fixed", "mimeType": "text/plain", "text": "fixed"}]


async def _many(server: Server, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [await _answer(server, m) for m in messages]


@pytest.mark.parametrize("with_middleware", [False, True])
@pytest.mark.parametrize("kind", ["prompt", "resource", "template"])
def test_cancellation_propagates_with_and_without_middleware(with_middleware: bool, kind: str) -> None:
    """A cancelled request raises CancelledError out of execute and has no response."""
    server = _server(with_middleware)

    @server.prompt
    async def slow_prompt(name: str) -> str:
        await asyncio.sleep(30)
        return name

    @server.resource("slow://fixed")
    async def slow_fixed() -> str:
        await asyncio.sleep(30)
        return "x"

    @server.resource("slow://t/{key}")
    async def slow_template(key: str) -> str:
        await asyncio.sleep(30)
        return key

    message = {"prompt": _prompt("slow_prompt", {"name": "x"}), "resource": _read("slow://fixed"),
               "template": _read("slow://t/k")}[kind]

    async def run() -> None:
        task = asyncio.ensure_future(_answer(server, message))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert server.dispatcher.busy == 0

    asyncio.run(run())


def test_internal_errors_are_logged_alike(caplog: pytest.LogCaptureFixture) -> None:
    """The masked -32603 of a failing prompt or resource logs its reference, with and
    without middleware."""
    for with_middleware in (False, True):
        caplog.clear()
        server = _server(with_middleware)
        with caplog.at_level(logging.ERROR, logger="nimblemcp.server"):
            answer = asyncio.run(_answer(server, _read("docs://boom")))
        ref = answer["error"]["message"].split("reference ")[1].rstrip(")")
        assert answer["error"]["code"] == -32603
        assert "secret detail" not in answer["error"]["message"]
        records = [r for r in caplog.records if ref in r.getMessage()]
        assert len(records) == 1 and records[0].exc_info is not None
        assert "secret detail" in str(records[0].exc_info[1])


# -- tools of every parameter kind ----------------------------------------------------


def prefix(ctx: Context) -> str:
    """A provider (`Depends`): module level, so the postponed annotation resolves."""
    return f"[{ctx.method}]"


def _tools_server(with_middleware: bool = False) -> Server:
    server = Server("pos", "1.0.0")

    @server.tool
    async def defaults(a: int, b: str = "b", c: float = 1.5, d: bool = False, e: str | None = None) -> str:
        return f"{a}|{b}|{c}|{d}|{e}"

    @server.tool(run_in_thread=False)
    def inline_defaults(a: int, b: int = 2) -> int:
        return a * 10 + b

    @server.tool
    async def kwonly(a: int, *, b: int = 3, c: str) -> str:
        return f"{a}|{b}|{c}"

    @server.tool
    async def posonly(a: int, b: int = 5, /) -> str:
        return f"{a}|{b}"

    @server.tool
    async def with_ctx(a: int, ctx: Context, b: int = 1) -> str:
        return f"{a}|{b}|{ctx.method}"

    @server.tool
    async def with_dep(a: int, p: Annotated[str, Depends(prefix)], b: int = 1) -> str:
        return f"{p}{a}|{b}"

    @server.tool
    async def listy(items: list[int], label: str = "n") -> str:
        return f"{label}={sum(items)}"

    if with_middleware:
        async def note(ctx: Context, call_next: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
            return await call_next()

        server.add_middleware(note)
    return server


POSITIONAL_CASES: list[tuple[str, Any]] = [
    ("defaults", {"a": 1}),
    ("defaults", {"a": 1, "e": "x", "c": 2, "d": True, "b": "y"}),  # any order; 2 -> 2.0
    ("defaults", {"a": "1"}),  # wrong type: isError naming the argument
    ("defaults", {"b": "y"}),  # missing required: isError
    ("defaults", {"a": 1, "zzz": 1}),  # unknown: dropped
    ("inline_defaults", {"a": 4}),
    ("inline_defaults", {"a": 4, "b": 7}),
    ("kwonly", {"a": 1, "c": "z"}),
    ("kwonly", {"a": 1, "b": 9, "c": "z"}),
    ("kwonly", {"a": 1}),  # missing keyword-only: isError
    ("posonly", {"a": 1}),  # positional-only
    ("posonly", {"a": 1, "b": 2}),
    ("with_ctx", {"a": 1, "b": 2}),
    ("with_dep", {"a": 1}),
    ("with_dep", {"a": 1, "b": 4}),
    ("listy", {"items": [1, 2, 3]}),
    ("listy", {"items": [1, "x"]}),
]


@pytest.mark.parametrize(("name", "arguments"), POSITIONAL_CASES)
def test_tools_of_every_parameter_kind_answer_alike_with_and_without_middleware(name: str, arguments: Any) -> None:
    """Defaults, keyword-only and positional-only parameters, a Context, a dependency."""
    message = _request("tools/call", {"name": name, "arguments": arguments})
    bare = asyncio.run(_answer(_tools_server(), message))
    general = asyncio.run(_answer(_tools_server(True), message))
    assert _strip_refs(bare) == _strip_refs(general)
    assert message["params"]["arguments"] == arguments  # the request is never changed
