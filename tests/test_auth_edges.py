"""Issue 37, authorization where it joins the rest of the framework: every finding
through real processes. A real issuer (key set and RFC 7662 introspection, uvicorn on
loopback in the test) and a protected nimblemcp server in its own process
(`fixtures/protected_server.py`: apps mounted behind path prefixes, verifiers
fetching from the issuer over loopback), spoken to over real HTTP with real signed
tokens, in both protocol eras.

AUTH-RS-03/05/06/08 (challenges, audience, insufficient scope), RFC 9068 (`typ`),
RFC 9728 §3.1 (the path-inserted metadata URL).
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from _issuer import ISSUER, Issuer
from _protected import FIXTURE, protected, start
from _serving import serving

from nimblemcp.testing import connect
from nimblemcp.transports.auth.verifiers import IntrospectionVerifier, JwtVerifier

HANG = 30.0  # a guard against a hung test, never a measurement
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
ACCEPT = "application/json, text/event-stream"

JWT_SITE = {"name": "jwt", "verifier": {"kind": "jwt", "audience": None, "miss_interval": 0.5}}
COMPOSED = {"name": "front", "composed": True, "verifier": {"kind": "jwt", "audience": None},
            "auth": {"required_scopes": ["mcp"]}}

# (method, Mcp-Name, params, the scope its rule asks for) of every target a mounted
# server or a mounted proxy protects, and two it does not.
PROTECTED = [
    ("tools/call", "notes_delete", {"name": "notes_delete", "arguments": {"id": "1"}}, "notes:admin"),
    ("tools/call", "notes_purge", {"name": "notes_purge", "arguments": {}}, "notes:admin"),
    ("prompts/get", "notes_audit", {"name": "notes_audit"}, "notes:admin"),
    ("resources/read", "notes://notes/secret", {"uri": "notes://notes/secret"}, "notes:admin"),
    ("resources/read", "notes://notes/doc/7", {"uri": "notes://notes/doc/7"}, "notes:admin"),
    ("tools/call", "remote_drop", {"name": "remote_drop", "arguments": {"table": "t"}}, "remote:admin"),
]
OPEN = [
    ("tools/call", "notes_count", {"name": "notes_count", "arguments": {}}),
    ("tools/call", "remote_echo", {"name": "remote_echo", "arguments": {"text": "hi"}}),
]


def _body(method: str, params: dict[str, Any], rid: int = 1, meta: bool = True) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method,
            "params": {**params, "_meta": META} if meta else params}


def _modern(token: str | None, method: str = "tools/call", name: str | None = "whoami") -> dict[str, str]:
    headers = {"accept": ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return headers


async def _whoami(http: httpx.AsyncClient, url: str, token: str | None) -> httpx.Response:
    return await http.post(url, json=_body("tools/call", {"name": "whoami", "arguments": {}}),
                           headers=_modern(token))


def _result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or a one-event SSE answer."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        message: dict[str, Any] = orjson.loads(data[-1])
        return message
    answer: dict[str, Any] = response.json()
    return answer


def _challenge(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.headers["www-authenticate"]


async def _legacy_session(http: httpx.AsyncClient, url: str, token: str) -> dict[str, str]:
    """A 2025-11-25 session's headers (initialize, then initialized)."""
    auth = {"authorization": f"Bearer {token}", "accept": ACCEPT}
    init = await http.post(url, headers=auth, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert init.status_code == 200, init.text
    headers = {**auth, "mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
    note = await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202, note.text
    return headers


@pytest.fixture
async def issuer() -> Any:
    world = Issuer()
    async with serving(world) as base:
        world.url = base  # type: ignore[attr-defined]
        try:
            yield world
        finally:
            world.mode = "normal"  # ends a drip still running


# -- HIGH: scope rules survive mount(), through proxies, in both eras ---------------------------


async def test_mounted_rules_hold_over_http_in_both_eras(issuer: Issuer, tmp_path: Path) -> None:
    async with protected([COMPOSED], issuer.url, tmp_path) as p, \
            httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url, metadata = p.url("front"), f"{p.base}/.well-known/oauth-protected-resource/front/mcp"
        narrow = issuer.sign(issuer.claims(url, scope="mcp"))
        admin = issuer.sign(issuer.claims(url, scope="mcp notes:admin remote:admin"))
        legacy_narrow = await _legacy_session(http, url, narrow)
        legacy_admin = await _legacy_session(http, url, admin)
        for rid, (method, name, params, scope) in enumerate(PROTECTED, start=1):
            modern = await http.post(url, json=_body(method, params, rid), headers=_modern(narrow, method, name))
            old = await http.post(url, json=_body(method, params, rid, meta=False), headers=legacy_narrow)
            for era, refused in (("modern", modern), ("legacy", old)):
                assert refused.status_code == 403, (era, name, refused.text)
                challenge = _challenge(refused)
                assert challenge.startswith("Bearer "), challenge
                assert 'error="insufficient_scope"' in challenge, (era, challenge)
                assert f'scope="mcp {scope}"' in challenge, (era, challenge)
                assert f'resource_metadata="{metadata}"' in challenge
            allowed = await http.post(url, json=_body(method, params, rid), headers=_modern(admin, method, name))
            old_allowed = await http.post(url, json=_body(method, params, rid, meta=False), headers=legacy_admin)
            for era, ok in (("modern", allowed), ("legacy", old_allowed)):
                assert ok.status_code == 200, (era, name, ok.text)
                assert "result" in _result(ok), (era, name, ok.text)
        for rid, (method, name, params) in enumerate(OPEN, start=100):
            ok = await http.post(url, json=_body(method, params, rid), headers=_modern(narrow, method, name))
            assert "result" in _result(ok), ok.text
            old_ok = await http.post(url, json=_body(method, params, rid, meta=False), headers=legacy_narrow)
            assert "result" in _result(old_ok), old_ok.text
    assert "Traceback" not in p.log()


def _fixture_module() -> Any:
    spec = importlib.util.spec_from_file_location("protected_server_fixture", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_mounted_rules_hold_over_the_in_memory_transport() -> None:
    host = _fixture_module().composed([sys.executable, str(FIXTURE), "--target"])
    async with connect(host) as client:  # no token: no scopes
        for method, _name, params, scope in PROTECTED:
            exchange = await client.exchange(method, params)
            assert exchange.error["code"] == -32001, (method, params)
            assert exchange.error["data"] == {"requiredScopes": [scope]}
        for method, _name, params in OPEN:
            assert (await client.exchange(method, params)).result


async def test_rules_travel_through_nested_mounts_and_add_to_the_hosts_own() -> None:
    import nimblemcp as m

    leaf, middle, top = m.Server("leaf"), m.Server("middle"), m.Server("top")
    leaf.tool(lambda: "x", name="wipe")
    middle.mount(leaf, "leaf")
    top.mount(middle, "mid")
    leaf.require_scopes(["a"], tool="wipe")  # declared last, two mounts below
    top.require_scopes(["b"], tool="mid_leaf_wipe")
    assert top.scopes_needed("tools/call", "mid_leaf_wipe") == {"a", "b"}
    assert middle.scopes_needed("tools/call", "leaf_wipe") == {"a"}
    async with connect(top) as client:
        exchange = await client.exchange("tools/call", {"name": "mid_leaf_wipe", "arguments": {}})
        assert exchange.error["data"] == {"requiredScopes": ["a", "b"]}
    with pytest.raises(ValueError, match="cycle"):
        leaf.mount(top, "top")


# -- MEDIUM: a token must name this server -------------------------------------------------------


async def test_tokens_without_this_servers_audience_are_refused(issuer: Issuer, tmp_path: Path) -> None:
    sites = [JWT_SITE,
             {"name": "introspect", "verifier": {"kind": "introspection"}},  # the documented set-up
             {"name": "optout", "verifier": {"kind": "introspection"}, "auth": {"allow_missing_audience": True}}]
    async with protected(sites, issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        jwt_url = p.url("jwt")
        for token, status, why in (
            (issuer.sign(issuer.claims(None)), 401, "names no audience"),
            (issuer.sign(issuer.claims("https://elsewhere.example/mcp")), 401, "for another resource"),
            (issuer.sign(issuer.claims(p.url("introspect"))), 401, "for another resource"),  # a sibling
            (issuer.sign(issuer.claims([jwt_url, "https://elsewhere.example/mcp"])), 200, None),
        ):
            response = await _whoami(http, jwt_url, token)
            assert response.status_code == status, response.text
            if why is not None:
                assert 'error="invalid_token"' in _challenge(response) and why in response.text
        now = int(time.time())
        for site in ("introspect", "optout"):
            issuer.active[f"{site}-none"] = {"active": True, "sub": "dave", "exp": now + 300}
            issuer.active[f"{site}-other"] = {"active": True, "sub": "dave", "aud": "https://elsewhere.example"}
            issuer.active[f"{site}-mine"] = {"active": True, "sub": "dave", "aud": p.url(site)}
        expected = {("introspect", "none"): 401, ("introspect", "other"): 401, ("introspect", "mine"): 200,
                    ("optout", "none"): 200, ("optout", "other"): 401, ("optout", "mine"): 200}
        for (site, kind), status in expected.items():
            response = await _whoami(http, p.url(site), f"{site}-{kind}")
            assert response.status_code == status, (site, kind, response.text)


# -- LOW -----------------------------------------------------------------------------------------


async def test_a_kid_or_typ_that_is_not_a_string_is_a_401_not_a_500(issuer: Issuer, tmp_path: Path) -> None:
    async with protected([JWT_SITE], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url = p.url("jwt")
        good = issuer.sign(issuer.claims(url))
        assert (await _whoami(http, url, good)).status_code == 200
        for header in ({"alg": "ES256", "kid": ["k1"]}, {"alg": "ES256", "kid": {"k": 1}},
                       {"alg": "ES256", "kid": "k1", "typ": ["at+jwt"]}, {"alg": ["ES256"], "kid": "k1"}):
            refused = await _whoami(http, url, Issuer.forged_header(good, **header))
            assert refused.status_code == 401, (header, refused.text)
            assert 'error="invalid_token"' in _challenge(refused)
            assert (await _whoami(http, url, good)).status_code == 200  # still serving
    assert "Traceback" not in p.log() and "500" not in p.log()


async def test_typ_is_checked(issuer: Issuer, tmp_path: Path) -> None:
    strict = {"name": "strict", "verifier": {"kind": "jwt", "audience": None, "typ": "at+jwt"}}
    async with protected([JWT_SITE, strict], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        default_expected = {"at+jwt": 200, "application/at+jwt": 200, "AT+JWT": 200, "JWT": 200, None: 200,
                            "dpop+jwt": 401, "oauth-id-jag+jwt": 401, "logout+jwt": 401, "secevent+jwt": 401}
        strict_expected = {"at+jwt": 200, "application/at+jwt": 200, "JWT": 401, None: 401, "dpop+jwt": 401}
        for site, expected in (("jwt", default_expected), ("strict", strict_expected)):
            url = p.url(site)
            for typ, status in expected.items():
                response = await _whoami(http, url, issuer.sign(issuer.claims(url), typ=typ))
                assert response.status_code == status, (site, typ, response.text)


async def test_plain_http_issuer_urls_off_loopback_are_refused(issuer: Issuer, tmp_path: Path) -> None:
    for number, verifier in enumerate((
        {"kind": "jwt", "audience": None, "jwks_uri": "http://issuer.internal.example/jwks"},
        {"kind": "introspection", "endpoint": "http://10.0.0.5/introspect"},
    )):
        where = tmp_path / str(number)
        where.mkdir()
        p = start([{"name": "bad", "verifier": verifier}], issuer.url, where)  # type: ignore[attr-defined]
        try:
            exit_code = await asyncio.wait_for(asyncio.to_thread(p.process.wait), HANG)
        finally:
            if p.process.poll() is None:  # it started after all: the test fails, and leaves nothing behind
                p.process.kill()
                p.process.wait()
        assert exit_code != 0
        assert "must be https://" in p.log(), p.log()
    # Explicitly allowed, and loopback (every other test here), start and serve.
    opted = {"name": "opted", "verifier": {"kind": "jwt", "audience": None, "allow_insecure_http": True,
                                           "jwks_uri": "http://issuer.internal.example/jwks"}}
    async with protected([opted, JWT_SITE], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url = p.url("jwt")
        assert (await _whoami(http, url, issuer.sign(issuer.claims(url)))).status_code == 200
    for url in ("http://localhost:9/jwks", "http://127.0.0.1:9/jwks", "http://[::1]:9/jwks", "https://x.example/jwks"):
        JwtVerifier(issuer=ISSUER, audience=None, jwks_uri=url)
    with pytest.raises(ValueError, match="https://"):
        IntrospectionVerifier("ftp://issuer.example/introspect")


async def test_an_oversized_key_set_is_not_used(issuer: Issuer, tmp_path: Path) -> None:
    async with protected([JWT_SITE], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url = p.url("jwt")
        token = issuer.sign(issuer.claims(url))
        issuer.mode = "huge"  # the right key, padded to 2 MB
        refused = await _whoami(http, url, token)
        assert refused.status_code == 401 and issuer.jwks_hits == 1
        issuer.mode = "normal"
        await asyncio.sleep(0.6)  # miss_interval: the issuer is asked again
        assert (await _whoami(http, url, token)).status_code == 200
    assert "answer too large" in p.log()


async def test_a_dripping_issuer_holds_requests_no_longer_than_the_timeout(issuer: Issuer, tmp_path: Path) -> None:
    # Half a second per byte: no single read waits long enough for a read timeout,
    # so only a deadline on the whole download ends it (the key set takes minutes).
    slow = {"name": "slow", "verifier": {"kind": "jwt", "audience": None, "timeout": 2.0}}
    async with protected([slow], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url = p.url("slow")
        issuer.mode = "drip"
        token = issuer.sign(issuer.claims(url))
        started = time.monotonic()
        answers = await asyncio.gather(*(_whoami(http, url, token) for _ in range(5)))
        elapsed = time.monotonic() - started
        assert [a.status_code for a in answers] == [401] * 5
        assert elapsed < HANG / 2, elapsed  # the whole drip would take minutes
        assert issuer.jwks_hits == 1  # the waiting requests shared the one download


async def test_leeway_applies_to_exp_nbf_and_iat(issuer: Issuer, tmp_path: Path) -> None:
    async with protected([JWT_SITE], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url = p.url("jwt")
        now = int(time.time())
        for extra, status in (({"exp": now - 5}, 200), ({"exp": now - 120}, 401), ({"nbf": now + 10}, 200),
                              ({"iat": now + 10}, 200), ({"nbf": now + 300}, 401), ({"iat": now + 300}, 401)):
            response = await _whoami(http, url, issuer.sign(issuer.claims(url, **extra)))
            assert response.status_code == status, (extra, response.text)


async def test_a_removed_key_stops_being_trusted_as_the_issuer_says(issuer: Issuer, tmp_path: Path) -> None:
    site = {"name": "rotate", "verifier": {"kind": "jwt", "audience": None, "cache_ttl": 3600, "miss_interval": 0.5}}
    issuer.cache_control = "public, max-age=1"
    async with protected([site], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        url = p.url("rotate")
        old_key = issuer.keys[0]
        old = issuer.sign(issuer.claims(url), key=old_key)
        assert (await _whoami(http, url, old)).status_code == 200
        issuer.keys = [issuer.new_key("k2")]  # k1 removed
        deadline = time.monotonic() + HANG
        while (status := (await _whoami(http, url, old)).status_code) == 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert status == 401  # within max-age (not cache_ttl's hour)
        assert (await _whoami(http, url, issuer.sign(issuer.claims(url)))).status_code == 200


def test_key_set_lifetime_defaults_and_the_issuers_max_age() -> None:
    verifier = JwtVerifier(issuer=ISSUER, audience=None, jwks_uri="https://issuer.example/jwks")
    assert verifier.cache_ttl == 300  # a removed key is trusted at most 5 minutes
    assert verifier._keep_for(None) == 300
    assert verifier._keep_for(60) == 60  # the issuer's max-age when shorter
    assert verifier._keep_for(86_400) == 300  # never longer than cache_ttl
    assert verifier._keep_for(0) == verifier.miss_interval  # no-store: not on every request


async def test_routes_need_a_token_unless_public(issuer: Issuer, tmp_path: Path) -> None:
    async with protected([COMPOSED], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        token = issuer.sign(issuer.claims(p.url("front")))
        refused = await http.get(f"{p.base}/front/status")
        assert refused.status_code == 401 and _challenge(refused).startswith("Bearer resource_metadata=")
        assert (await http.get(f"{p.base}/front/status", headers={"authorization": "Bearer forged"})).status_code == 401
        page = await http.get(f"{p.base}/front/status", headers={"authorization": f"Bearer {token}"})
        assert (page.status_code, page.json()) == (200, {"subject": "alice"})
        assert (await http.get(f"{p.base}/front/public")).text == "open to all"
        assert (await http.get(f"{p.base}/front/healthz")).status_code == 200
        assert (await http.get(f"{p.base}/front/readyz")).status_code == 200
        assert (await http.get(f"{p.base}/front/nothing")).status_code == 401  # nothing is told without a token


async def test_metadata_url_behind_a_prefix_follows_rfc_9728(issuer: Issuer, tmp_path: Path) -> None:
    async with protected([COMPOSED], issuer.url, tmp_path) as p, httpx.AsyncClient(timeout=HANG) as http:  # type: ignore[attr-defined]
        refused = await _whoami(http, p.url("front"), None)
        metadata = f"{p.base}/.well-known/oauth-protected-resource/front/mcp"
        assert f'resource_metadata="{metadata}"' in _challenge(refused)
        document = await http.get(metadata)
        assert document.status_code == 200
        assert document.json()["resource"] == p.url("front")
        assert document.json()["authorization_servers"] == [ISSUER]
