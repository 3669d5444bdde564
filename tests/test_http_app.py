"""The Streamable HTTP ASGI app in-process (httpx.ASGITransport): one test per rule.

Every test that sends something bad ends by proving the app still answers a good
request (the server keeps serving).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import orjson
import pydantic
import pytest
from _sse_parser import SSEParser

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.transports.http.app import asgi_app
from nimblemcp.transports.http.security import secure_app

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
ACCEPT = "application/json, text/event-stream"


def build_server() -> m.Server:
    server = m.Server("http-test", "0.1")

    @server.tool()
    async def echo(message: str) -> str:
        return message

    @server.tool()
    def sync_echo(message: str) -> str:
        return message

    @server.tool()
    async def progress(steps: int, ctx: m.Context) -> str:
        for i in range(1, steps + 1):
            await ctx.report_progress(i, steps)
            await asyncio.sleep(0)
        return "done"

    @server.tool()
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool()
    async def needs_sampling() -> str:
        raise m.MissingClientCapability({"sampling": {}})

    @server.tool()
    def sql(
        region: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Region"})],
        limit: Annotated[int | None, pydantic.Field(json_schema_extra={"x-mcp-header": "Limit"})] = None,
        dry: Annotated[bool, pydantic.Field(json_schema_extra={"x-mcp-header": "Dry"})] = False,
    ) -> str:
        return f"{region}:{limit}:{dry}"

    @server.resource("docs://brief", mime_type="text/markdown")
    def brief() -> str:
        return "# Brief"

    return server


def req(method: str, params: dict[str, Any] | None = None, rid: int | str = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**(params or {}), "_meta": META}}


def headers_for(body: dict[str, Any], **extra: str) -> dict[str, str]:
    h = {"accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": V,
         "mcp-method": body["method"]}
    params = body.get("params") or {}
    if "name" in params:
        h["mcp-name"] = params["name"]
    elif "uri" in params:
        h["mcp-name"] = params["uri"]
    h.update({k.replace("_", "-"): v for k, v in extra.items()})
    return h


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return req("tools/call", {"name": name, "arguments": arguments})


@pytest.fixture
def server() -> m.Server:
    return build_server()


@pytest.fixture
async def client(server: m.Server) -> AsyncIterator[httpx.AsyncClient]:
    app = asgi_app(server, keepalive=0.02)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c:
        yield c


async def post(c: httpx.AsyncClient, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    h = headers if headers is not None else headers_for(body)
    return await c.post("/mcp", content=orjson.dumps(body), headers=h)


async def still_serving(c: httpx.AsyncClient) -> None:
    r = await post(c, call("echo", message="alive"))
    assert r.status_code == 200
    assert r.json()["result"]["content"][0]["text"] == "alive"


def sse_messages(r: httpx.Response) -> tuple[list[dict[str, Any]], SSEParser]:
    parser = SSEParser()
    return [orjson.loads(e) for e in parser.feed(r.content)], parser


# -- 20.1 endpoint ------------------------------------------------------------------------

async def test_http_06_plain_request_answers_one_json_body(client: httpx.AsyncClient) -> None:
    r = await post(client, call("echo", message="hi"))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["id"] == 1 and body["result"]["resultType"] == "complete"
    assert body["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert "mcp-session-id" not in r.headers


async def test_http_06_sync_tool_in_worker_thread(client: httpx.AsyncClient) -> None:
    r = await post(client, call("sync_echo", message="t"))
    assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == "t"


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT"])
async def test_http_01_only_post_405(client: httpx.AsyncClient, verb: str) -> None:
    r = await client.request(verb, "/mcp", headers={"accept": ACCEPT})
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    await still_serving(client)


async def test_http_01_one_endpoint_path(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    r = await client.post("/other", content=orjson.dumps(body), headers=headers_for(body))
    assert r.status_code == 404
    await still_serving(client)


@pytest.mark.parametrize("accept", ["", "application/json", "text/event-stream", "text/html"])
async def test_http_04_accept_must_list_json_and_sse_406(client: httpx.AsyncClient, accept: str | None) -> None:
    body = call("echo", message="x")
    h = headers_for(body)
    del h["accept"]
    if accept is not None:
        h["accept"] = accept
    r = await post(client, body, h)
    assert r.status_code == 406
    await still_serving(client)


async def test_http_04_wildcard_accept_is_enough(client: httpx.AsyncClient) -> None:
    body = call("echo", message="w")
    r = await post(client, body, headers_for(body, accept="*/*"))
    assert r.status_code == 200


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_http_03_content_type_must_be_json_415(client: httpx.AsyncClient, ctype: str | None) -> None:
    body = call("echo", message="x")
    h = headers_for(body)
    del h["content-type"]
    if ctype:
        h["content-type"] = ctype
    r = await post(client, body, h)
    assert r.status_code == 415
    await still_serving(client)


async def test_http_03_content_type_with_charset_is_json(client: httpx.AsyncClient) -> None:
    body = call("echo", message="c")
    r = await post(client, body, headers_for(body, content_type="application/json; charset=utf-8"))
    assert r.status_code == 200


async def test_http_05_notification_202_no_body(client: httpx.AsyncClient) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    r = await post(client, note, {"accept": ACCEPT, "content-type": "application/json",
                                  "mcp-protocol-version": V, "mcp-method": note["method"]})
    assert r.status_code == 202
    assert r.content == b""
    await still_serving(client)


async def test_http_19_parse_error_400(client: httpx.AsyncClient) -> None:
    h = headers_for(call("echo", message="x"))
    r = await client.post("/mcp", content=b'{"jsonrpc": "2.0", "id": 1,', headers=h)
    assert r.status_code == 400
    assert r.json() == {"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}}
    await still_serving(client)


@pytest.mark.parametrize("body", [
    [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}],  # batch
    {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1, "result": {}},  # a response: clients never send these (HTTP-03)
])
async def test_http_03_not_a_single_request_400(client: httpx.AsyncClient, body: Any) -> None:
    h = {"accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": V,
         "mcp-method": "tools/list"}
    r = await post(client, body, h)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32600
    await still_serving(client)


# -- 20.2 SSE -----------------------------------------------------------------------------

async def test_http_07_progress_switches_to_sse_and_response_ends_stream(client: httpx.AsyncClient) -> None:
    body = call("progress", steps=3)
    body["params"]["_meta"] = {**META, "progressToken": "p1"}
    r = await post(client, body)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    messages, _ = sse_messages(r)
    assert [x.get("method") for x in messages] == ["notifications/progress"] * 3 + [None]
    assert [x["params"]["progress"] for x in messages[:3]] == [1, 2, 3]
    assert all(x["params"]["progressToken"] == "p1" for x in messages[:3])
    assert messages[-1]["id"] == 1 and messages[-1]["result"]["content"][0]["text"] == "done"
    assert not any("id" in x and "method" in x for x in messages)  # no requests on the stream


async def test_http_20_no_notifications_means_json(client: httpx.AsyncClient) -> None:
    r = await post(client, call("progress", steps=2))  # no progressToken: nothing emitted
    assert r.headers["content-type"] == "application/json"
    assert r.json()["result"]["content"][0]["text"] == "done"


async def test_http_08_sse_headers(client: httpx.AsyncClient) -> None:
    body = call("progress", steps=1)
    body["params"]["_meta"] = {**META, "progressToken": 7}
    r = await post(client, body)
    assert r.headers["x-accel-buffering"] == "no"
    assert r.headers["cache-control"] == "no-cache"


async def test_http_08_long_handler_gets_sse_keepalive_comments(client: httpx.AsyncClient) -> None:
    # keepalive is 0.02 s in this fixture; the handler runs far longer than that.
    r = await post(client, call("slow", seconds=0.3))
    assert r.headers["content-type"] == "text/event-stream"
    messages, parser = sse_messages(r)
    assert parser.comments >= 1
    assert len(messages) == 1 and messages[0]["result"]["content"][0]["text"] == "slept"


async def test_http_09_no_event_ids(client: httpx.AsyncClient) -> None:
    body = call("progress", steps=2)
    body["params"]["_meta"] = {**META, "progressToken": "x"}
    r = await post(client, body)
    assert r.headers["content-type"] == "text/event-stream"
    assert not any(line.startswith(b"id:") for line in r.content.splitlines())


async def test_http_10_disconnect_cancels_handler_and_sends_nothing_more(server: m.Server) -> None:
    started = asyncio.Event()
    outcome: list[str] = []

    @server.tool()
    async def forever() -> str:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "never"

    app = asgi_app(server, keepalive=0)
    body = call("forever")
    raw = [(k.encode(), v.encode()) for k, v in headers_for(body).items()]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": raw}
    gone = asyncio.Event()
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.create_task(app(scope, receive, send))
    await started.wait()
    gone.set()
    await task  # returns normally: the disconnect is not an error
    assert outcome == ["cancelled"]
    assert sent == []
    assert not task.cancelled()


# -- 20.3 headers ---------------------------------------------------------------------------

async def expect_mismatch(c: httpx.AsyncClient, body: dict[str, Any], h: dict[str, str], word: str) -> None:
    r = await post(c, body, h)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == -32020
    assert word in error["message"]
    assert r.json()["id"] == body["id"]
    await still_serving(c)


@pytest.mark.parametrize("missing", ["mcp-protocol-version", "mcp-method", "mcp-name"])
async def test_http_17_required_header_missing(client: httpx.AsyncClient, missing: str) -> None:
    body = call("echo", message="x")
    h = headers_for(body)
    del h[missing]
    await expect_mismatch(client, body, h, "missing")


async def test_http_17_version_header_mismatch(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    await expect_mismatch(client, body, headers_for(body, mcp_protocol_version="2099-01-01"), "MCP-Protocol-Version")


async def test_http_17_method_header_mismatch(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    await expect_mismatch(client, body, headers_for(body, mcp_method="tools/list"), "Mcp-Method")


async def test_http_17_name_header_mismatch(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    r = await post(client, body, headers_for(body, mcp_name="foo"))
    assert r.json()["error"]["message"] == (
        "Header mismatch: Mcp-Name header value 'foo' does not match body value 'echo'"
    )
    await expect_mismatch(client, body, headers_for(body, mcp_name="foo"), "Mcp-Name")


async def test_http_17_resources_read_name_is_the_uri(client: httpx.AsyncClient) -> None:
    body = req("resources/read", {"uri": "docs://brief"})
    r = await post(client, body)
    assert r.status_code == 200 and r.json()["result"]["contents"][0]["text"] == "# Brief"
    await expect_mismatch(client, body, headers_for(body, mcp_name="docs://other"), "Mcp-Name")


async def test_http_12_header_names_case_insensitive_values_case_sensitive(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    h = {"ACCEPT": ACCEPT, "Content-Type": "application/json", "Mcp-Protocol-Version": V,
         "MCP-METHOD": "tools/call", "mcp-NAME": "echo"}
    r = await post(client, body, h)
    assert r.status_code == 200
    await expect_mismatch(client, body, headers_for(body, mcp_method="Tools/Call"), "Mcp-Method")


async def test_http_13_14_base64_name_decoded_before_compare(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    encoded = "=?base64?" + base64.b64encode(b"echo").decode() + "?="
    r = await post(client, body, headers_for(body, mcp_name=encoded))
    assert r.status_code == 200


async def test_http_14_malformed_base64_is_mismatch(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    await expect_mismatch(client, body, headers_for(body, mcp_name="=?base64?not*base64?="), "base64")


async def test_http_19_duplicate_routing_header_rejected(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    h = headers_for(body)
    raw = [(k.encode(), v.encode()) for k, v in h.items()] + [(b"mcp-name", b"other")]
    r = await client.post("/mcp", content=orjson.dumps(body), headers=raw)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32020
    assert "more than once" in r.json()["error"]["message"]
    await still_serving(client)


def sql_call(**arguments: Any) -> dict[str, Any]:
    return call("sql", **arguments)


async def test_http_16_param_header_present_and_matching(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu-west1", limit=5, dry=True)
    r = await post(client, body, headers_for(body, mcp_param_region="eu-west1", mcp_param_limit="5",
                                             mcp_param_dry="true"))
    assert r.status_code == 200, r.text
    assert r.json()["result"]["content"][0]["text"] == "eu-west1:5:True"


async def test_http_16_param_header_value_mismatch(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu")
    await expect_mismatch(client, body, headers_for(body, mcp_param_region="us"), "Mcp-Param-Region")


async def test_http_16_param_header_missing_when_value_present(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu")
    await expect_mismatch(client, body, headers_for(body), "missing required header Mcp-Param-Region")


async def test_http_16_null_or_absent_value_needs_no_header(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu", limit=None)
    r = await post(client, body, headers_for(body, mcp_param_region="eu"))
    assert r.status_code == 200, r.text


async def test_http_16_integers_compare_numerically(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu", limit=42)
    r = await post(client, body, headers_for(body, mcp_param_region="eu", mcp_param_limit="42.0"))
    assert r.status_code == 200, r.text
    await expect_mismatch(client, body, headers_for(body, mcp_param_region="eu", mcp_param_limit="43"),
                          "Mcp-Param-Limit")


async def test_http_16_boolean_spelled_lowercase(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu", dry=False)
    await expect_mismatch(client, body, headers_for(body, mcp_param_region="eu", mcp_param_dry="False"),
                          "Mcp-Param-Dry")


async def test_http_13_param_base64_value(client: httpx.AsyncClient) -> None:
    body = sql_call(region="Hello, 世界")
    encoded = "=?base64?" + base64.b64encode("Hello, 世界".encode()).decode() + "?="
    r = await post(client, body, headers_for(body, mcp_param_region=encoded))
    assert r.status_code == 200, r.text


async def test_http_16_param_invalid_characters_rejected(client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu")
    h = [(k.encode(), v.encode()) for k, v in headers_for(body).items()]
    h.append((b"mcp-param-region", "eü".encode()))
    r = await client.post("/mcp", content=orjson.dumps(body), headers=h)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32020 and "invalid characters" in r.json()["error"]["message"]
    await still_serving(client)


async def test_http_16_unknown_param_header_ignored(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    r = await post(client, body, headers_for(body, mcp_param_whatever="1"))
    assert r.status_code == 200


async def test_http_16_rules_follow_tool_replacement(server: m.Server, client: httpx.AsyncClient) -> None:
    body = sql_call(region="eu")
    assert (await post(client, body, headers_for(body, mcp_param_region="eu"))).status_code == 200
    server.remove_tool("sql")

    @server.tool(name="sql")
    def sql2(region: Annotated[str, pydantic.Field(json_schema_extra={"x-mcp-header": "Zone"})]) -> str:
        return region

    await expect_mismatch(client, body, headers_for(body, mcp_param_region="eu"), "Mcp-Param-Zone")
    r = await post(client, body, headers_for(body, mcp_param_zone="eu"))
    assert r.status_code == 200


async def test_http_ignores_session_id_without_legacy_leg(client: httpx.AsyncClient) -> None:
    body = call("echo", message="s")
    r = await post(client, body, headers_for(body, mcp_session_id="abc", last_event_id="5"))
    assert r.status_code == 200 and "mcp-session-id" not in r.headers


# -- 20.4 status codes ------------------------------------------------------------------------

async def test_http_status_unsupported_version_400_32022(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    body["params"]["_meta"] = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    r = await post(client, body, headers_for(body, mcp_protocol_version="2099-01-01"))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": [V], "requested": "2099-01-01"}
    await still_serving(client)


@pytest.mark.parametrize("meta", [None, {}, {"io.modelcontextprotocol/protocolVersion": V}])
async def test_http_status_missing_meta_keys_400_32602(client: httpx.AsyncClient, meta: Any) -> None:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    if meta is not None:
        body["params"]["_meta"] = meta
    r = await post(client, body)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32602 and r.json()["id"] == 3
    await still_serving(client)


async def test_http_status_unknown_method_404_32601(client: httpx.AsyncClient) -> None:
    body = req("nope/nothing")
    r = await post(client, body)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == -32601
    body = req("prompts/list")  # a capability this server does not advertise
    r = await post(client, body)
    assert r.status_code == 404 and r.json()["error"]["code"] == -32601
    await still_serving(client)


async def test_http_status_missing_client_capability_400_32021(client: httpx.AsyncClient) -> None:
    r = await post(client, call("needs_sampling"))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32021
    assert r.json()["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}
    await still_serving(client)


async def test_http_status_unknown_tool_400_32602(client: httpx.AsyncClient) -> None:
    r = await post(client, call("no_such_tool"))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32602
    await still_serving(client)


async def test_http_19_meta_error_wins_over_header_mismatch(client: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}
    r = await post(client, body, headers_for(body, mcp_method="wrong"))
    assert r.json()["error"]["code"] == -32602


async def test_http_19_header_mismatch_wins_over_unsupported_version(client: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    body["params"]["_meta"] = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    r = await post(client, body)  # header says 2026-07-28, body says 2099-01-01
    assert r.status_code == 400 and r.json()["error"]["code"] == -32020


# -- legacy seam ------------------------------------------------------------------------------

async def test_legacy_hook_receives_get_initialize_and_session_requests(server: m.Server) -> None:
    seen: list[tuple[str, Any]] = []

    async def legacy(scope: Any, receive: Any, send: Any, message: Any) -> None:
        seen.append((scope["method"], message and message.get("method")))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"legacy"})

    app = asgi_app(server, legacy=legacy)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c:
        assert (await c.get("/mcp", headers={"accept": "text/event-stream"})).status_code == 299
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
        h = {"accept": ACCEPT, "content-type": "application/json"}
        assert (await post(c, init, h)).content == b"legacy"
        body = call("echo", message="x")
        legacy_session = {"accept": ACCEPT, "content-type": "application/json", "mcp-session-id": "s1"}
        assert (await post(c, body, legacy_session)).status_code == 299
        # COMPAT-S04: a modern version header wins over a stray session id.
        assert (await post(c, body, headers_for(body, mcp_session_id="s1"))).status_code == 200
        # A legacy version header routes a legacy-shaped body to the legacy leg (a body
        # enveloped for 2026-07-28 under that header is a -32020 mismatch instead: HTTP-17).
        bare = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}
        assert (await post(c, bare, headers_for(body, mcp_protocol_version="2025-11-25"))).status_code == 299
        await still_serving(c)
    assert seen == [("GET", None), ("POST", "initialize"), ("POST", "tools/call"), ("POST", "tools/call")]


# -- security middleware (HTTP-02) -------------------------------------------------------------

@pytest.fixture
async def guarded(server: m.Server) -> AsyncIterator[httpx.AsyncClient]:
    app = secure_app(server, security=HttpSecurity(allowed_origins=["https://app.example.com"], max_body=2048, max_headers=40))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:8000") as c:
        yield c


async def test_http_02_foreign_origin_403(guarded: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    r = await post(guarded, body, headers_for(body, origin="https://evil.example"))
    assert r.status_code == 403
    assert "id" not in r.json() and r.json()["error"]["code"] == -32600
    await still_serving(guarded)


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1:8000", "http://[::1]:3000",
                                    "https://app.example.com"])
async def test_http_02_local_and_listed_origins_pass(guarded: httpx.AsyncClient, origin: str) -> None:
    body = call("echo", message="x")
    assert (await post(guarded, body, headers_for(body, origin=origin))).status_code == 200


async def test_http_02_null_origin_refused(guarded: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    assert (await post(guarded, body, headers_for(body, origin="null"))).status_code == 403


async def test_http_02_dns_rebinding_host_403(guarded: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    r = await post(guarded, body, headers_for(body, host="attacker.example:8000"))
    assert r.status_code == 403
    await still_serving(guarded)


async def test_http_02_allowed_hosts_list(server: m.Server) -> None:
    app = secure_app(server, security=HttpSecurity(allowed_hosts=["mcp.example.com"]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://mcp.example.com") as c:
        await still_serving(c)
        body = call("echo", message="x")
        assert (await post(c, body, headers_for(body, host="other.example.com"))).status_code == 403


async def test_body_limit_413(guarded: httpx.AsyncClient) -> None:
    r = await post(guarded, call("echo", message="x" * 5000))
    assert r.status_code == 413
    await still_serving(guarded)


async def test_body_limit_applies_to_chunked_bodies(guarded: httpx.AsyncClient) -> None:
    body = call("echo", message="x" * 5000)

    async def chunks() -> AsyncIterator[bytes]:
        data = orjson.dumps(body)
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    r = await guarded.post("/mcp", content=chunks(), headers=headers_for(body))
    assert r.status_code == 413
    await still_serving(guarded)


async def test_header_flood_431(guarded: httpx.AsyncClient) -> None:
    body = call("echo", message="x")
    h = headers_for(body)
    h.update({f"x-junk-{i}": "1" for i in range(60)})
    assert (await post(guarded, body, h)).status_code == 431
    await still_serving(guarded)


async def test_cors_preflight_and_response_headers(server: m.Server) -> None:
    app = secure_app(server, security=HttpSecurity(allowed_origins=["https://app.example.com"], cors=True))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1") as c:
        r = await c.options("/mcp", headers={"origin": "https://app.example.com",
                                             "access-control-request-method": "POST",
                                             "access-control-request-headers": "mcp-method, mcp-param-region"})
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "mcp-param-region" in r.headers["access-control-allow-headers"]
        body = call("echo", message="x")
        r = await post(c, body, headers_for(body, origin="https://app.example.com"))
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        r = await c.options("/mcp", headers={"origin": "https://evil.example"})
        assert r.status_code == 403


def test_sse_parser_handles_split_frames_and_comments() -> None:
    p = SSEParser()
    assert p.feed(b": keep-alive\n\nda") == []
    assert p.feed(b'ta: {"a":1}\r\n\r\ndata: 2\n') == [b'{"a":1}']
    assert p.feed(b"\n") == [b"2"]
    assert p.comments == 1


async def test_http_13_header_values_are_compared_without_surrounding_whitespace() -> None:
    """RFC 9110 optional whitespace around a field value is not part of it (SEP-2243)."""
    server = m.Server("ows")
    server.tool(lambda text: text, name="echo")
    app = asgi_app(server)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "_meta": META, "name": "echo", "arguments": {"text": "x"}}}
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": " 2026-07-28", "mcp-method": "tools/call\t",
               "mcp-name": "echo  "}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as c:
        r = await c.post("/mcp", json=body, headers=headers)
    assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == "x"


async def test_http_10_disconnect_watch_starts_only_for_requests_still_running() -> None:
    """One shared timer (Watchlist) starts the watch for requests in flight after
    WATCH_DELAY; a finished request is released at once and never watched."""
    from nimblemcp.transports.http._exchange import WATCH_DELAY, Exchange, Watchlist

    loop = asyncio.get_running_loop()
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        pass

    watchlist = Watchlist(loop)
    quick, slow = Exchange(loop, receive, send, 0), Exchange(loop, receive, send, 0)
    watchlist.add(quick)
    watchlist.add(slow)
    quick.finish()
    assert watchlist.entries[0][1] is None  # the finished request is not held
    await asyncio.sleep(WATCH_DELAY * 3)
    assert quick.watcher is None
    assert slow.watcher is not None and not slow.watcher.done()
    assert not watchlist.entries and watchlist.timer is None  # no timer left armed
    slow.finish()
    await asyncio.sleep(0)
    assert slow.watcher.cancelled()


async def test_http_06_answers_of_one_batch_leave_after_all_its_handlers_ran() -> None:
    """Requests started in the same loop pass are all handled before the first answer
    is written (the p99 fix in benchmarks/README.md): no timing, just the order."""
    events: list[str] = []
    server = m.Server("order", "1")

    @server.tool()
    async def mark(label: str) -> str:
        events.append(f"ran {label}")
        return label

    app = asgi_app(server, legacy_sessions=False)

    async def one(name: str) -> None:
        body = call("mark", label=name)
        raw = [(k.encode(), v.encode()) for k, v in headers_for(body).items()]
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": raw}
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.Event().wait()
            sent = True
            return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                events.append(f"answered {orjson.loads(message['body'])['result']['content'][0]['text']}")

        await app(scope, receive, send)

    await asyncio.gather(one("a"), one("b"), one("c"))
    assert events == ["ran a", "ran b", "ran c", "answered a", "answered b", "answered c"]
