"""The request path of sections 1-4 and 15: envelope, `_meta`, versions, methods,
`resultType`, `serverInfo`, caching hints and pagination. Every bad request gets the
spec's error and the next request still works."""

from __future__ import annotations

from typing import Any

import pytest

import nimblemcp as m
from nimblemcp.jsonrpc import encode
from nimblemcp.testing import TestClient, connect
from nimblemcp.types import CLIENT_CAPABILITIES, LOG_LEVEL, PROTOCOL_VERSION, SERVER_INFO

V = "2026-07-28"
GOOD_META = {PROTOCOL_VERSION: V, CLIENT_CAPABILITIES: {}}


def tools_only() -> m.Server:
    server = m.Server("tools-only", "9.9.9")

    @server.tool()
    def add(a: int, b: int) -> int:
        return a + b

    return server


def req(rid: Any, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


async def still_serving(c: TestClient) -> None:
    r = await c.call_tool("add", {"a": 2, "b": 3})
    assert r["structuredContent"] == {"result": 5}


async def error_of(c: TestClient, message: Any) -> dict[str, Any]:
    ex = await c.send_raw(message if isinstance(message, bytes) else encode(message))
    assert ex.response is not None and "error" in ex.response, ex.response
    await still_serving(c)
    return ex.response


# --- section 1: JSON-RPC base ---------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{oops", -32700),
        (b"\xff\xfe", -32700),
        (b"[]", -32600),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', -32600),
        (b'"text"', -32600),
        (b"42", -32600),
        (b'{"id": 1, "method": "tools/list"}', -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', -32600),
        (b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}', -32600),
    ],
)
async def test_base_09_bad_envelopes_get_spec_errors(raw: bytes, code: int) -> None:
    """BASE-01/BASE-04/BASE-09: parse error, invalid request; the server keeps serving."""
    async with connect(tools_only()) as c:
        response = await error_of(c, raw)
    assert response["error"]["code"] == code
    assert isinstance(response["error"]["message"], str) and response["error"]["message"]


async def test_base_04_error_keeps_readable_id() -> None:
    """BASE-04: the id is echoed when it could be read, omitted only when not."""
    async with connect(tools_only()) as c:
        bad_params = await error_of(c, {"jsonrpc": "2.0", "id": "x7", "method": "tools/list", "params": [1]})
        unreadable = await error_of(c, b"{oops")
    assert bad_params["id"] == "x7"
    assert "id" not in unreadable


@pytest.mark.parametrize("rid", [1, "1", 0, "", -5, 2**53, "ü-🙂"])
async def test_base_11_ids_echo_with_their_json_type(rid: Any) -> None:
    """BASE-11 / BASE-03: `"1"` and `1` come back as sent, for results and errors."""
    async with connect(tools_only()) as c:
        ok = await c.send_raw(req(rid, "tools/list", {"_meta": GOOD_META}))
        bad = await c.send_raw(req(rid, "no/such", {"_meta": GOOD_META}))
    assert ok.response is not None and bad.response is not None
    assert type(ok.response["id"]) is type(rid) and ok.response["id"] == rid
    assert type(bad.response["id"]) is type(rid) and bad.response["id"] == rid


async def test_base_05_notifications_get_no_answer() -> None:
    """BASE-05: notifications (known, unknown, cancelled, even malformed _meta) are never answered."""
    async with connect(tools_only()) as c:
        for note in (
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "method": "whatever/else", "params": {}},
            {"jsonrpc": "2.0", "method": "tools/list"},
        ):
            ex = await c.send_raw(note)
            assert ex.response is None and ex.notifications == []
        # a stray response from a client is not answered either (BASE-06)
        ex = await c.send_raw({"jsonrpc": "2.0", "id": 3, "result": {}})
        assert ex.response is None
        await still_serving(c)


# --- section 2: _meta -----------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"_meta": None},
        {"_meta": []},
        {"_meta": {}},
        {"_meta": {PROTOCOL_VERSION: V}},
        {"_meta": {CLIENT_CAPABILITIES: {}}},
        {"_meta": {PROTOCOL_VERSION: V, CLIENT_CAPABILITIES: None}},
        {"_meta": {PROTOCOL_VERSION: V, CLIENT_CAPABILITIES: []}},
        {"_meta": {PROTOCOL_VERSION: 20260728, CLIENT_CAPABILITIES: {}}},
    ],
)
async def test_meta_01_02_missing_or_partial_meta_is_invalid_params(params: Any) -> None:
    """META-01/META-02: missing `_meta` or either required key -> -32602."""
    async with connect(tools_only()) as c:
        for method in ("server/discover", "tools/list", "tools/call"):
            response = await error_of(c, req(9, method, params))
            assert response["error"]["code"] == -32602
            assert response["id"] == 9


@pytest.mark.parametrize("level", ["verbose", "", "INFO", 3, None, ["info"]])
async def test_log_05_bad_log_level_is_invalid_params(level: Any) -> None:
    """LOG-05: an unrecognized `logLevel` -> -32602 (JSON null counts as unrecognized too)."""
    async with connect(tools_only()) as c:
        response = await error_of(c, req(1, "tools/list", {"_meta": {**GOOD_META, LOG_LEVEL: level}}))
    assert response["error"]["code"] == -32602


async def test_log_level_accepted_values() -> None:
    async with connect(tools_only()) as c:
        for level in ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"):
            assert (await c.request("tools/list", meta={LOG_LEVEL: level}))["tools"]


@pytest.mark.parametrize("token", [1.5, True, {"a": 1}, [1]])
async def test_prog_01_bad_progress_token_is_invalid_params(token: Any) -> None:
    """PROG-01: a progress token is a string or an integer."""
    async with connect(tools_only()) as c:
        response = await error_of(c, req(1, "tools/list", {"_meta": {**GOOD_META, "progressToken": token}}))
    assert response["error"]["code"] == -32602


async def test_meta_05_each_request_stands_alone() -> None:
    """META-05 / BASE-08 / VER-04: a good request does not make a later bad one pass."""
    async with connect(tools_only()) as c:
        await still_serving(c)
        response = await error_of(c, req(2, "tools/list", {"_meta": {PROTOCOL_VERSION: V}}))
    assert response["error"]["code"] == -32602


# --- section 3: discover and versions ------------------------------------------------


@pytest.mark.parametrize("version", ["1999-01-01", "2025-11-25", "2024-11-05", "draft", "2026-07-29", ""])
async def test_ver_02_unknown_version_is_32022_with_data(version: str) -> None:
    """VER-02: unsupported versions -> -32022 with data.supported and data.requested."""
    async with connect(tools_only()) as c:
        response = await error_of(
            c, req(4, "tools/list", {"_meta": {PROTOCOL_VERSION: version, CLIENT_CAPABILITIES: {}}})
        )
    err = response["error"]
    assert err["code"] == -32022
    assert err["data"] == {"supported": ["2026-07-28"], "requested": version}


async def test_disc_01_discover_result() -> None:
    """DISC-01 / DISC-04 / CACHE-01: supportedVersions, capabilities, instructions, hints."""
    server = tools_only()
    server.instructions = "Add numbers."
    async with connect(server) as c:
        r = await c.discover()
    assert r["resultType"] == "complete"
    assert r["supportedVersions"] == ["2026-07-28"]
    assert r["instructions"] == "Add numbers."
    assert set(r["capabilities"]) == {"tools", "logging"}
    assert isinstance(r["capabilities"]["tools"], dict)
    assert isinstance(r["ttlMs"], int) and r["ttlMs"] >= 0
    assert r["cacheScope"] in ("public", "private")


async def test_disc_04_capabilities_follow_registration(full_server: m.Server) -> None:
    """DISC-04: every registered feature is advertised; nothing else."""
    async with connect(full_server) as c:
        caps = (await c.discover())["capabilities"]
    assert set(caps) == {"tools", "resources", "prompts", "completions", "logging"}
    bare = m.Server("bare", logging=False)
    async with connect(bare) as c:
        assert (await c.discover())["capabilities"] == {}


@pytest.mark.parametrize(
    "method",
    ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe",
     "tasks/list", "sampling/createMessage", "elicitation/create", "roots/list", "nope", ""],
)
async def test_base_09_unknown_and_removed_methods_are_32601(method: str) -> None:
    """BASE-09 / section 25: removed and unknown methods -> -32601."""
    async with connect(tools_only()) as c:
        response = await error_of(c, req(5, method, {"_meta": GOOD_META}))
    assert response["error"]["code"] == -32601


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("prompts/list", {}),
        ("prompts/get", {"name": "x"}),
        ("resources/list", {}),
        ("resources/read", {"uri": "a://b"}),
        ("resources/templates/list", {}),
        ("completion/complete", {"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": ""}}),
    ],
)
async def test_base_09_capability_gated_methods_not_advertised_are_32601(method: str, params: dict[str, Any]) -> None:
    """BASE-09 / PROMPT-01 / RES-01 / COMP-01: gated methods without the capability -> -32601."""
    async with connect(tools_only()) as c:
        response = await error_of(c, req(6, method, {**params, "_meta": GOOD_META}))
    assert response["error"]["code"] == -32601


async def test_tool_01_tools_gated_when_no_tools() -> None:
    """TOOL-01: without tools, tools/list and tools/call are -32601."""
    server = m.Server("empty")
    async with connect(server) as c:
        for method in ("tools/list", "tools/call"):
            ex = await c.exchange(method, {"name": "x"})
            assert ex.error["code"] == -32601
        assert (await c.discover())["resultType"] == "complete"


# --- section 4 and META-03: every result's shape --------------------------------------

CACHEABLE = {"server/discover", "tools/list", "resources/list", "resources/templates/list",
             "resources/read", "prompts/list"}

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("server/discover", {}),
    ("tools/list", {}),
    ("tools/call", {"name": "echo", "arguments": {"message": "x"}}),
    ("tools/call", {"name": "fail", "arguments": {"reason": "x"}}),
    ("resources/list", {}),
    ("resources/templates/list", {}),
    ("resources/read", {"uri": "docs://brief"}),
    ("resources/read", {"uri": "docs://glossary"}),
    ("prompts/list", {}),
    ("prompts/get", {"name": "review", "arguments": {"topic": "t"}}),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "review"}, "argument": {"name": "topic", "value": ""}}),
]


@pytest.mark.parametrize(("method", "params"), CALLS, ids=[c[0] for c in CALLS])
async def test_rt_01_meta_03_cache_01_result_shape(full_server: m.Server, method: str, params: dict[str, Any]) -> None:
    """RT-01: resultType on every result; META-03: serverInfo in every result `_meta`;
    CACHE-01: ttlMs + cacheScope on the cacheable methods and never on the others."""
    async with connect(full_server) as c:
        r = await c.request(method, params)
    assert r["resultType"] == "complete"
    assert r["_meta"][SERVER_INFO] == {"name": "full", "version": "1.2.3", "title": "Full server"}
    if method in CACHEABLE:
        assert isinstance(r["ttlMs"], int) and r["ttlMs"] >= 0
        assert r["cacheScope"] in ("public", "private")
    else:
        assert "ttlMs" not in r and "cacheScope" not in r


async def test_cache_01_configured_hints_and_validation() -> None:
    server = m.Server("hints", lists=m.ListOptions(cache_hints={"tools/list": (5, "private")}))

    @server.tool()
    def t() -> str:
        return ""

    @server.resource("a://x", ttl_ms=7, cache_scope="private")
    def x() -> str:
        return "x"

    async with connect(server) as c:
        lst = await c.request("tools/list")
        read = await c.read_resource("a://x")
    assert (lst["ttlMs"], lst["cacheScope"]) == (5, "private")
    assert (read["ttlMs"], read["cacheScope"]) == (7, "private")
    with pytest.raises(ValueError):
        m.Server("bad", lists=m.ListOptions(cache_hints={"tools/list": (-1, "public")}))
    with pytest.raises(ValueError):
        m.Server("bad", lists=m.ListOptions(cache_hints={"tools/list": (1, "shared")}))


# --- section 15: pagination -------------------------------------------------------------


def many(n: int, page_size: int | None) -> m.Server:
    server = m.Server("many", lists=m.ListOptions(page_size=page_size))
    for i in range(n):
        def fn() -> str:
            return ""
        server.add_tool(fn, name=f"t{i:02d}")
        server.add_prompt(m.server._prompts.PromptEntry(fn, name=f"p{i:02d}"))
        server.resource(f"r://{i:02d}")(fn)
        server.resource(f"r{i:02d}://{{x}}")(lambda x: x)
    return server


@pytest.mark.parametrize(("method", "key"), [
    ("tools/list", "tools"), ("prompts/list", "prompts"),
    ("resources/list", "resources"), ("resources/templates/list", "resourceTemplates"),
])
@pytest.mark.parametrize(("n", "size"), [(10, 3), (9, 3), (1, 1), (5, 10)])
async def test_pag_01_walks_every_page(method: str, key: str, n: int, size: int) -> None:
    """PAG-01 / PAG-02 / CACHE-09 / CACHE-11: pages cover everything once, in order, with
    opaque cursors and one cacheScope."""
    async with connect(many(n, size)) as c:
        seen: list[Any] = []
        cursor: str | None = None
        pages = 0
        scopes = set()
        while True:
            r = await c.request(method, {"cursor": cursor} if cursor is not None else None)
            pages += 1
            assert len(r[key]) <= size
            seen.extend(r[key])
            scopes.add(r["cacheScope"])
            cursor = r.get("nextCursor")
            if cursor is None:
                break
            assert isinstance(cursor, str) and not cursor.isdigit()
        everything = await c.request(method) if size >= n else None
    assert pages == max(1, -(-n // size))
    assert len(seen) == n and len({str(x) for x in seen}) == n
    assert len(scopes) == 1
    if everything is not None:
        assert everything[key] == seen


@pytest.mark.parametrize("cursor", ["garbage", "", "None", "bzoxMDAw", "bzotMQ==", 5, None.__class__.__name__, "b2==="])
async def test_pag_03_invalid_cursor_is_invalid_params(cursor: Any) -> None:
    """PAG-03: invalid cursors -> -32602 (including ones that look like our own)."""
    async with connect(many(6, 2)) as c:
        await c.request("tools/list")  # warm the page cache first: it must not answer bad cursors
        ex = await c.exchange("tools/list", {"cursor": cursor})
        assert ex.error["code"] == -32602, (cursor, ex.response)
        first = await c.request("tools/list")
        assert [t["name"] for t in first["tools"]] == ["t00", "t01"]


async def test_cache_11_order_is_registration_order_and_stable() -> None:
    """CACHE-11: deterministic tools/list order across requests and after changes."""
    server = m.Server("order")
    for name in ("zeta", "alpha", "mid"):
        server.add_tool(lambda: "", name=name)
    async with connect(server) as c:
        a = [t["name"] for t in await c.list_tools()]
        b = [t["name"] for t in await c.list_tools()]
        server.add_tool(lambda: "", name="beta")
        after = [t["name"] for t in await c.list_tools()]
        server.remove_tool("alpha")
        removed = [t["name"] for t in await c.list_tools()]
    assert a == b == ["zeta", "alpha", "mid"]
    assert after == ["zeta", "alpha", "mid", "beta"]
    assert removed == ["zeta", "mid", "beta"]
