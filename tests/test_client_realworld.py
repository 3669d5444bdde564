"""The client against servers that misbehave the way real ones do (issue 17, issue 12's
client items): raw ASGI apps under a real uvicorn on loopback answer with redirects,
429/503 + `Retry-After`, a bare 401 challenge, oversized bodies and SSE events,
expired legacy sessions and logs outside any request.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from _serving import serving

from nimblemcp.client import (
    AuthorizationRequired,
    Client,
    Limits,
    MessageTooLarge,
    RedirectNotFollowed,
    RetryPolicy,
    ServerBusy,
)
from nimblemcp.errors import ClientError, UnsupportedProtocolVersion
from nimblemcp.transports.client.http import HttpTransport

Send = Callable[[dict[str, Any]], Awaitable[None]]
TOOLS = [{"name": "echo", "inputSchema": {"type": "object"}}]
DISCOVERED = {"resultType": "complete", "supportedVersions": ["2026-07-28"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "0"}}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def message(self) -> dict[str, Any]:
        return json.loads(self.body) if self.body else {}


@dataclass
class Reply:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    chunks: list[bytes] | None = None  # sent as separate body messages (SSE)


def jsonrpc(rid: Any, result: dict[str, Any]) -> Reply:
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
    return Reply(200, [("content-type", "application/json")], body)


def sse(*messages: dict[str, Any]) -> Reply:
    chunks = [b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages]
    return Reply(200, [("content-type", "text/event-stream")], chunks=chunks)


def answer(message: dict[str, Any]) -> Reply:
    """What a well-behaved minimal 2026-07-28 server answers."""
    if "id" not in message:
        return Reply(202)
    method, rid = message["method"], message["id"]
    params = message.get("params") or {}
    if method == "server/discover":
        return jsonrpc(rid, DISCOVERED)
    if method == "tools/list":
        return jsonrpc(rid, {"resultType": "complete", "tools": TOOLS, "ttlMs": 0, "cacheScope": "private"})
    if method == "tools/call":
        return jsonrpc(rid, {"resultType": "complete",
                             "content": [{"type": "text", "text": json.dumps(params.get("arguments"))}]})
    return jsonrpc(rid, {"resultType": "complete"})


class RawPeer:
    """An ASGI app that hands every request to `script` (default: `answer`) and keeps
    what it saw."""

    def __init__(self, script: Callable[[Seen], Reply | None] | None = None) -> None:
        self.script = script
        self.seen: list[Seen] = []

    async def __call__(self, scope: Any, receive: Any, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            chunk = await receive()
            body += chunk.get("body", b"")
            if not chunk.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        seen = Seen(scope["method"], scope["path"], headers, body)
        self.seen.append(seen)
        reply = self.script(seen) if self.script is not None else None
        if reply is None:
            reply = answer(seen.message) if scope["method"] == "POST" else Reply(405)
        await send({"type": "http.response.start", "status": reply.status,
                    "headers": [(k.encode(), v.encode()) for k, v in reply.headers]})
        if reply.chunks is None:
            await send({"type": "http.response.body", "body": reply.body})
            return
        for part in reply.chunks:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def posts(self, method: str | None = None) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST"
                and (method is None or s.message.get("method") == method)]


@pytest.fixture
async def served() -> AsyncIterator[Callable[[RawPeer], Any]]:
    """`url = await served(peer)`: serve a RawPeer for the test's duration."""
    stack: list[Any] = []

    async def start(peer: RawPeer) -> str:
        context = serving(peer, log_level="critical")
        stack.append(context)
        return await context.__aenter__()

    yield start
    for context in reversed(stack):
        await context.__aexit__(None, None, None)


# -- redirects -----------------------------------------------------------------------


async def test_same_origin_307_is_followed_with_method_and_body(served: Any) -> None:
    def script(seen: Seen) -> Reply | None:
        if seen.path == "/mcp":
            return Reply(307, [("location", "/mcp/")])
        return None

    peer = RawPeer(script)
    base = await served(peer)
    async with Client(f"{base}/mcp") as client:
        result = await client.call_tool("echo", {"text": "kept"})
        assert json.loads(result["content"][0]["text"]) == {"text": "kept"}
        assert client.transport.url == f"{base}/mcp"  # type: ignore[attr-defined]  # 307: temporary
    hops = [(s.method, s.path) for s in peer.seen if s.message.get("method") == "tools/call"]
    assert hops == [("POST", "/mcp"), ("POST", "/mcp/")]
    first, second = (s for s in peer.seen if s.message.get("method") == "tools/call")
    assert first.body == second.body  # the same bytes, method kept
    assert second.headers["mcp-method"] == "tools/call"


async def test_308_is_followed_and_remembered(served: Any) -> None:
    peer = RawPeer(lambda seen: Reply(308, [("location", "/v2/mcp")]) if seen.path == "/mcp" else None)
    base = await served(peer)
    async with Client(f"{base}/mcp") as client:
        assert [t["name"] for t in await client.list_tools(cache=False)] == ["echo"]
        await client.list_tools(cache=False)
        assert client.transport.url == f"{base}/v2/mcp"  # type: ignore[attr-defined]
    assert [s.path for s in peer.posts()].count("/mcp") == 1  # later requests go straight there


async def test_cross_origin_redirect_is_refused_and_credentials_stay(served: Any) -> None:
    other = RawPeer()
    elsewhere = await served(other)
    port = elsewhere.rsplit(":", 1)[1]
    target = f"http://localhost:{port}/mcp"  # another host name is another origin
    peer = RawPeer(lambda seen: Reply(307, [("location", target)]))
    base = await served(peer)
    transport = HttpTransport(f"{base}/mcp", headers={"Authorization": "Bearer secret"})
    async with Client(transport, mode="modern") as client:
        with pytest.raises(RedirectNotFollowed) as caught:
            await client.list_tools()
    assert caught.value.location == target and caught.value.status == 307
    assert target in str(caught.value) and "another origin" in str(caught.value)
    assert other.seen == []  # nothing, least of all the token, went to the other origin


async def test_redirect_loop_stops_at_the_limit_and_names_the_target(served: Any) -> None:
    def script(seen: Seen) -> Reply:
        hop = int(seen.path.rsplit("/", 1)[1] or 0) if seen.path.startswith("/hop/") else 0
        return Reply(308, [("location", f"/hop/{hop + 1}")])

    peer = RawPeer(script)
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern", limits=Limits(max_redirects=2)) as client:
        with pytest.raises(RedirectNotFollowed) as caught:
            await client.list_tools()
    assert caught.value.location == f"{base}/hop/3"
    assert "max_redirects" in str(caught.value) and f"{base}/hop/3" in str(caught.value)
    assert len(peer.seen) == 3


async def test_a_method_changing_redirect_is_not_followed(served: Any) -> None:
    peer = RawPeer(lambda seen: Reply(302, [("location", "/elsewhere")]))
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern") as client:
        with pytest.raises(RedirectNotFollowed) as caught:
            await client.list_tools()
    assert caught.value.location == f"{base}/elsewhere" and f"{base}/elsewhere" in str(caught.value)
    assert [s.path for s in peer.seen] == ["/mcp"]


# -- 429 / 503 and Retry-After ---------------------------------------------------------


def busy_once(status: int, value: str, method: str = "tools/list") -> Callable[[Seen], Reply | None]:
    state = {"left": 1}

    def script(seen: Seen) -> Reply | None:
        if seen.message.get("method") == method and state["left"]:
            state["left"] -= 1
            return Reply(status, [("retry-after", value), ("content-type", "text/plain")], b"slow down")
        return None

    return script


async def test_429_retry_after_seconds_is_waited_for_idempotent_requests(served: Any) -> None:
    peer = RawPeer(busy_once(429, "1"))
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern") as client:
        started = time.monotonic()
        tools = await client.list_tools()
        waited = time.monotonic() - started
    assert [t["name"] for t in tools] == ["echo"]
    assert 0.9 <= waited < 5
    ids = [s.message["id"] for s in peer.posts("tools/list")]
    assert len(ids) == 2 and ids[0] != ids[1]  # re-sent with a new id


async def test_503_retry_after_http_date_is_waited_for(served: Any) -> None:
    when = email.utils.formatdate(time.time() + 2, usegmt=True)
    peer = RawPeer(busy_once(503, when, "resources/read"))
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern") as client:
        started = time.monotonic()
        await client.read_resource("file:///a")
        waited = time.monotonic() - started
    assert 0.9 <= waited < 5  # an HTTP-date has whole seconds
    assert len(peer.posts("resources/read")) == 2


async def test_a_call_gets_the_delay_on_the_error(served: Any) -> None:
    peer = RawPeer(busy_once(429, "7", "tools/call"))
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern") as client:
        with pytest.raises(ServerBusy) as caught:
            await client.call_tool("echo", {})
    assert caught.value.status == 429 and caught.value.retry_after == 7
    assert "retry after 7 s" in str(caught.value)
    assert len(peer.posts("tools/call")) == 1  # not idempotent: not re-sent


async def test_a_delay_beyond_the_bound_is_not_waited_for(served: Any) -> None:
    peer = RawPeer(busy_once(503, "120"))
    base = await served(peer)
    policy = RetryPolicy(max_retry_after=10)
    async with Client(f"{base}/mcp", mode="modern", retry_policy=policy) as client:
        started = time.monotonic()
        with pytest.raises(ServerBusy) as caught:
            await client.list_tools()
        assert time.monotonic() - started < 2
    assert caught.value.retry_after == 120 and caught.value.status == 503
    assert len(peer.posts("tools/list")) == 1


async def test_busy_without_retry_after_backs_off_and_gives_up_at_max_retries(served: Any) -> None:
    peer = RawPeer(lambda seen: Reply(503) if seen.message.get("method") == "tools/list" else None)
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern", retry_policy=RetryPolicy(max_retries=2, retry_backoff=0.01)) as client:
        with pytest.raises(ServerBusy) as caught:
            await client.list_tools()
    assert caught.value.retry_after is None
    assert len(peer.posts("tools/list")) == 3


# -- 401 without auth ---------------------------------------------------------------------


async def test_401_without_auth_says_what_to_do(served: Any) -> None:
    meta = "https://auth.example/.well-known/oauth-protected-resource/mcp"
    challenge = f'Bearer resource_metadata="{meta}", scope="files:read files:write"'
    peer = RawPeer(lambda seen: Reply(401, [("www-authenticate", challenge)]))
    base = await served(peer)
    async with Client(f"{base}/mcp") as client:
        with pytest.raises(AuthorizationRequired) as caught:
            await client.list_tools()
    error = caught.value
    assert error.status == 401 and error.scheme == "Bearer"
    assert error.resource_metadata == meta and error.scope == "files:read files:write"
    text = str(error)
    assert "requires authorization" in text and challenge in text and "auth=" in text
    assert "b''" not in text


async def test_401_without_a_challenge_still_says_so(served: Any) -> None:
    peer = RawPeer(lambda seen: Reply(401))
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern") as client:
        with pytest.raises(AuthorizationRequired) as caught:
            await client.list_tools()
    assert caught.value.scheme is None and caught.value.resource_metadata is None
    assert "requires authorization" in str(caught.value) and "no WWW-Authenticate" in str(caught.value)


# -- the size cap -------------------------------------------------------------------------

LIMIT = 64 * 1024


def oversized(kind: str) -> Callable[[Seen], Reply | None]:
    def script(seen: Seen) -> Reply | None:
        message = seen.message
        if message.get("method") != "tools/call" or message["params"]["name"] != "big":
            return None
        text = "x" * (LIMIT * 4)
        payload = {"jsonrpc": "2.0", "id": message["id"],
                   "result": {"resultType": "complete", "content": [{"type": "text", "text": text}]}}
        data = json.dumps(payload).encode()
        if kind == "json":
            return Reply(200, [("content-type", "application/json")], data)
        if kind == "chunked":  # no Content-Length: the cap is met while reading
            return Reply(200, [("content-type", "application/json")],
                         chunks=[data[i:i + 8192] for i in range(0, len(data), 8192)])
        event = b"event: message\ndata: " + data + b"\n\n"
        return Reply(200, [("content-type", "text/event-stream")],
                     chunks=[event[i:i + 8192] for i in range(0, len(event), 8192)])

    return script


@pytest.mark.parametrize("kind", ["json", "chunked", "sse"])
async def test_http_messages_over_the_cap_fail_and_the_client_stays_usable(served: Any, kind: str) -> None:
    peer = RawPeer(oversized(kind))
    base = await served(peer)
    async with Client(f"{base}/mcp", mode="modern", limits=Limits(max_message_bytes=LIMIT)) as client:
        with pytest.raises(MessageTooLarge) as caught:
            await client.call_tool("big", {})
        assert caught.value.limit == LIMIT
        assert str(LIMIT) in str(caught.value) and "max_message_bytes" in str(caught.value)
        # the same connection pool still serves the next requests
        for _ in range(3):
            result = await client.call_tool("small", {"n": 1})
            assert result["content"][0]["text"] == '{"n": 1}'


async def test_messages_under_the_cap_and_many_small_events_pass(served: Any) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "x", "progress": 1}}

    def script(seen: Seen) -> Reply | None:
        message = seen.message
        if message.get("method") != "tools/call":
            return None
        final = {"jsonrpc": "2.0", "id": message["id"],
                 "result": {"resultType": "complete", "content": [{"type": "text", "text": "y" * (LIMIT // 2)}]}}
        return sse(*([note] * 200), final)  # the stream is far over the cap, each event under it

    base = await served(RawPeer(script))
    async with Client(f"{base}/mcp", mode="modern", limits=Limits(max_message_bytes=LIMIT)) as client:
        result = await client.call_tool("echo", {})
    assert len(result["content"][0]["text"]) == LIMIT // 2


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        Limits(max_message_bytes=0)
    assert Limits().max_message_bytes == 16 * 1024 * 1024


# -- logs reach on_log --------------------------------------------------------------------


async def test_a_log_on_a_request_stream_is_tagged_with_the_request(served: Any) -> None:
    def script(seen: Seen) -> Reply | None:
        message = seen.message
        if message.get("method") != "tools/call":
            return None
        log = {"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": "info", "logger": "t", "data": "working"}}
        final = {"jsonrpc": "2.0", "id": message["id"], "result": {"resultType": "complete", "content": []}}
        return sse(log, final)

    peer = RawPeer(script)
    base = await served(peer)
    logs: list[dict[str, Any]] = []
    async with Client(f"{base}/mcp", mode="modern", log_level="info", on_log=logs.append) as client:
        await client.call_tool("echo", {})
    rid = peer.posts("tools/call")[0].message["id"]
    assert logs == [{"level": "info", "logger": "t", "data": "working", "requestId": rid}]


# -- the legacy session: 404 re-initializes, logs outside a request ------------------------


class LegacyPeer(RawPeer):
    """A 2025-11-25 server: sessions, a GET stream that carries a log, and sessions that
    expire on demand (404 with a JSON-RPC error for the request's own id, as our server
    and others answer)."""

    def __init__(self) -> None:
        super().__init__(self.reply)
        self.sessions = 0
        self.expired: set[str] = set()
        self.get_log = asyncio.Event()

    def reply(self, seen: Seen) -> Reply | None:
        sid = seen.headers.get("mcp-session-id")
        if sid in self.expired:
            body = {"jsonrpc": "2.0", "id": seen.message.get("id"),
                    "error": {"code": -32600, "message": "Session not found"}}
            return Reply(404, [("content-type", "application/json")], json.dumps(body).encode())
        if seen.method == "GET":
            return None  # served by `__call__` below
        if seen.method == "DELETE":
            return Reply(200)
        message = seen.message
        method = message.get("method")
        if method == "server/discover":
            return Reply(400, [("content-type", "text/plain")], b"Bad Request: no session")
        if method == "initialize":
            self.sessions += 1
            reply = jsonrpc(message["id"], {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                            "serverInfo": {"name": "old", "version": "1"}})
            reply.headers.append(("mcp-session-id", f"s{self.sessions}"))
            return reply
        if method == "tools/list":
            return jsonrpc(message["id"], {"tools": TOOLS})
        return None

    async def __call__(self, scope: Any, receive: Any, send: Send) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["method"] != "GET" or headers.get("mcp-session-id") in self.expired:
            await super().__call__(scope, receive, send)
            return
        self.seen.append(Seen("GET", scope["path"], headers, b""))
        if scope["path"] == "/mcp":  # the GET stream moved: a same-origin redirect
            await send({"type": "http.response.start", "status": 307,
                        "headers": [(b"location", b"/mcp/")]})
            await send({"type": "http.response.body", "body": b""})
            return
        log = {"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": "warning", "data": "disk almost full"}}
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "more_body": True,
                    "body": b"event: message\ndata: " + json.dumps(log).encode() + b"\n\n"})
        await self.get_log.wait()
        await send({"type": "http.response.body", "body": b""})


async def test_legacy_404_starts_a_new_session_and_resends(served: Any) -> None:
    peer = LegacyPeer()
    peer.get_log.set()
    base = await served(peer)
    async with Client(f"{base}/mcp") as client:
        assert [t["name"] for t in await client.list_tools(cache=False)] == ["echo"]
        assert client.era == "legacy" and peer.sessions == 1
        peer.expired.add("s1")
        assert [t["name"] for t in await client.list_tools(cache=False)] == ["echo"]
    assert peer.sessions == 2
    last = peer.posts("tools/list")[-1]
    assert last.headers["mcp-session-id"] == "s2"


async def test_legacy_logs_outside_a_request_reach_on_log(served: Any) -> None:
    peer = LegacyPeer()
    base = await served(peer)
    logs: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    got = asyncio.Event()

    def on_log(params: dict[str, Any]) -> None:
        logs.append(params)
        got.set()

    async with Client(f"{base}/mcp", on_log=on_log, on_notification=others.append) as client:
        await client.ensure_era()
        await asyncio.wait_for(got.wait(), 5)
        peer.get_log.set()
    assert logs == [{"level": "warning", "data": "disk almost full"}]  # no request: no requestId
    assert others == []
    gets = [s.path for s in peer.seen if s.method == "GET"]
    assert gets[:2] == ["/mcp", "/mcp/"]  # the GET stream followed its redirect


# -- no version in common, malformed URLs ---------------------------------------------------


async def test_no_version_in_common_names_both_sides(served: Any) -> None:
    def script(seen: Seen) -> Reply | None:
        message = seen.message
        if "id" not in message:
            return None
        error = {"code": -32022, "message": "Unsupported protocol version",
                 "data": {"supported": ["2099-01-01"], "requested": "2026-07-28"}}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode()
        return Reply(400, [("content-type", "application/json")], body)

    base = await served(RawPeer(script))
    async with Client(f"{base}/mcp") as client:
        with pytest.raises(UnsupportedProtocolVersion) as caught:
            await client.list_tools()
    text = str(caught.value)
    assert "2099-01-01" in text and "2026-07-28" in text and "2025-11-25" in text
    assert caught.value.supported == ["2099-01-01"]


async def test_a_discover_with_no_shared_version_and_no_initialize_names_both(served: Any) -> None:
    def script(seen: Seen) -> Reply | None:
        message = seen.message
        if message.get("method") == "server/discover":
            return jsonrpc(message["id"], {**DISCOVERED, "supportedVersions": ["2099-01-01"]})
        if message.get("method") == "initialize":
            error = {"code": -32601, "message": "Method not found: initialize"}
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode()
            return Reply(404, [("content-type", "application/json")], body)
        return None

    base = await served(RawPeer(script))
    async with Client(f"{base}/mcp") as client:
        with pytest.raises(UnsupportedProtocolVersion) as caught:
            await client.list_tools()
    assert "2099-01-01" in str(caught.value) and "2026-07-28" in str(caught.value)


@pytest.mark.parametrize("url", ["http://[::1/mcp", "http:///mcp"])
def test_a_malformed_url_is_a_client_error(url: str) -> None:
    with pytest.raises(ClientError, match="invalid URL"):
        Client(url)


@pytest.mark.parametrize("url", ["http://[::1/mcp", "http:///mcp"])
def test_the_cli_answers_a_malformed_url_in_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from nimblemcp.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["call", url, "echo"])
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None)
    assert "invalid URL" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_httpx_is_not_asked_to_follow_redirects_itself() -> None:
    # A caller's own httpx client may follow redirects (any origin); ours must not let it.
    async def go() -> None:
        peer = RawPeer(lambda seen: Reply(307, [("location", "http://localhost:1/mcp")]))
        async with serving(peer, log_level="critical") as base:
            http = httpx.AsyncClient(follow_redirects=True)
            transport = HttpTransport(f"{base}/mcp", http=http)
            async with Client(transport, mode="modern") as client:
                with pytest.raises(RedirectNotFollowed):
                    await client.list_tools()
            await http.aclose()

    asyncio.run(go())


async def test_a_listen_relistens_after_the_retry_after_of_a_busy_server(served: Any) -> None:
    ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
           "params": {"notifications": {"toolsListChanged": True}}}
    listens: list[float] = []

    def script(seen: Seen) -> Reply | None:
        message = seen.message
        if message.get("method") != "subscriptions/listen":
            return None
        listens.append(time.monotonic())
        if len(listens) == 2:  # the re-listen after the drop: busy for a second
            return Reply(503, [("retry-after", "1")])
        tagged = {**ack, "params": {**ack["params"], "_meta": {
            "io.modelcontextprotocol/subscriptionId": message["id"]}}}
        return sse(tagged)  # the stream ends without the closing result: a drop

    base = await served(RawPeer(script))
    async with Client(f"{base}/mcp", mode="modern") as client, \
            client.listen(tools=True, backoff=0.01, max_backoff=0.05) as events:
        assert (await asyncio.wait_for(events.next(), 5)).kind == "acknowledged"
        missed = await asyncio.wait_for(events.next(), 10)
        assert missed.kind == "missed"
    assert len(listens) >= 3
    assert listens[2] - listens[1] >= 0.9  # waited for Retry-After, not the 0.02 s backoff


# -- the capped SSE line reader, against a reference split ------------------------------


async def _lines_of(parts: list[bytes], limit: int) -> list[str]:
    from nimblemcp.transports.client._answers import bounded_lines

    async def chunks() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    return [line async for line in bounded_lines(chunks(), limit)]


async def test_the_capped_line_reader_splits_like_the_event_stream_rules() -> None:
    import random
    import re

    rnd = random.Random(17)
    for _ in range(2000):
        data = bytes(rnd.choice(b"ab\r\n:") for _ in range(rnd.randint(0, 30)))
        cuts = sorted(rnd.randint(0, len(data)) for _ in range(rnd.randint(0, 5)))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        expected = re.split(rb"\r\n|\r|\n", data)
        if expected and expected[-1] == b"":
            expected.pop()
        assert await _lines_of(parts, 10**6) == [e.decode() for e in expected], (data, cuts)
    with pytest.raises(MessageTooLarge):  # an event over the cap, its line still unfinished
        await _lines_of([b"data: " + b"x" * 40, b"x" * 40, b"\n\n"], 50)
    with pytest.raises(MessageTooLarge):  # an event of many short lines
        await _lines_of([b"data: xxxxxxxxxx\n" * 10 + b"\n"], 50)
    assert len(await _lines_of([b"data: xxxxxxxxxx\n\n" * 100], 50)) == 200  # many small events
