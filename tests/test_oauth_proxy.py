"""The OAuth proxy (issue 35, item 2): MCP clients register and log in at the proxy, which
runs the authorization upstream at a real provider (the npm `oidc-provider`) whose
Dynamic Client Registration is OFF, with the one client registered there by hand.

Real parts throughout: the provider as a Node process, the MCP server with the proxy on
uvicorn on loopback, nimblemcp's own `Client` with `OAuth` (and `nimblemcp login`), a
shared Redis for two instances. AUTH-RS-* (the resource server) and AUTH-C-* (the client)
hold unchanged; what is new is the authorization server the client talks to."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn
from tests._oidc_provider import OidcProvider, browse_until, browser_command, oidc_provider
from tests._peers import free_port, wait_for_port

from nimblemcp import Client, Context, Server
from nimblemcp.client.auth import OAuth
from nimblemcp.transports.auth.oauth_proxy import OAuthProxy, Upstream
from nimblemcp.transports.auth.verifiers import JwtVerifier

SECRET = "proxy-secret-" + "x" * 20
CLIENT_REDIRECT = "http://localhost:8765/callback"  # OAuth()'s default; nothing listens there


def upstream_client(base: str, *extra: str) -> dict[str, Any]:
    """The proxy's one client at the provider, registered by hand."""
    return {"client_id": "mcp-proxy", "client_secret": SECRET,
            "redirect_uris": [f"{b}/callback" for b in (base, *extra)],
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_basic"}


def notes_server() -> Server:
    server = Server("notes")

    @server.tool
    def whoami(ctx: Context) -> str:
        """Who the token says the caller is."""
        assert ctx.principal is not None
        return ctx.principal.subject

    return server


class Proxied:
    """The MCP server behind the proxy, and what to close after it."""

    def __init__(self, provider: OidcProvider, base: str, *, store: Any = None, issuer: str | None = None) -> None:
        resource = f"{issuer or base}/mcp"
        self.proxy = OAuthProxy(Upstream(client_id="mcp-proxy", client_secret=SECRET, issuer=provider.issuer,
                                         scopes=("notes:read",)),
                                base_url=issuer or base, resource=resource, store=store, server_name="Notes")
        self.verifier = JwtVerifier(jwks_uri=provider.jwks_uri, issuer=provider.issuer, audience=resource)
        self.app = self.proxy.wrap(notes_server().asgi_app(auth=self.proxy.resource_server(self.verifier)))

    async def aclose(self) -> None:
        await self.proxy.aclose()
        await self.verifier.aclose()


@asynccontextmanager
async def serving_on(app: Any, port: int) -> AsyncIterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def user_at_browser(url: str) -> str:
    """The user: allows the client on the proxy's page, signs in at the provider."""
    return await asyncio.to_thread(browse_until, url, CLIENT_REDIRECT)


@pytest.fixture
def port() -> int:
    return free_port()


async def test_a_client_logs_in_through_the_proxy_and_calls_a_tool(port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    with oidc_provider({f"{base}/mcp": {"scope": "notes:read", "ttl": 60}},
                       clients=[upstream_client(base)], registration=False) as provider:
        async with httpx.AsyncClient() as http:  # the provider really refuses to register clients
            meta = (await http.get(f"{provider.issuer}/.well-known/openid-configuration")).json()
        assert "registration_endpoint" not in meta
        proxied = Proxied(provider, base)
        async with serving_on(proxied.app, port):
            auth = OAuth(on_authorize=user_at_browser, client_name="Notes CLI")
            async with Client(f"{base}/mcp", auth=auth) as client:
                result = await client.call_tool("whoami", {})
            assert result["content"][0]["text"] == "alice"
            assert len(provider.grants("authorization_code")) == 1  # one upstream exchange
            async with httpx.AsyncClient() as http:  # the metadata MCP clients found
                served = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
        assert served["issuer"] == base and served["registration_endpoint"] == f"{base}/register"
        assert served["code_challenge_methods_supported"] == ["S256"]
        await proxied.aclose()


# -- the proxy's own checks, driven as raw HTTP ------------------------------------------------


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def register(http: httpx.AsyncClient, base: str, **extra: Any) -> dict[str, Any]:
    answer = await http.post(f"{base}/register", json={"redirect_uris": [CLIENT_REDIRECT], "client_name": "Tester", **extra})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def authorize_url(base: str, client_id: str, challenge: str, **extra: str) -> str:
    query = {"response_type": "code", "client_id": client_id, "redirect_uri": CLIENT_REDIRECT,
             "code_challenge": challenge, "code_challenge_method": "S256", "state": "st-1", **extra}
    return str(httpx.URL(f"{base}/authorize", params=query))


async def code_for(base: str, client_id: str, challenge: str) -> str:
    landed = await asyncio.to_thread(browse_until, authorize_url(base, client_id, challenge), CLIENT_REDIRECT)
    query = parse_qs(urlsplit(landed).query)
    assert query["state"] == ["st-1"] and query["iss"] == [base], landed
    return query["code"][0]


async def test_the_proxy_checks_what_an_authorization_server_must(port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    with oidc_provider({f"{base}/mcp": {"scope": "notes:read", "ttl": 60}},
                       clients=[upstream_client(base)], registration=False) as provider:
        proxied = Proxied(provider, base)
        async with serving_on(proxied.app, port), httpx.AsyncClient(timeout=30) as http:
            # Registration: only acceptable redirect URIs.
            for bad in (["http://evil.example/cb"], ["javascript:alert(1)"], [], ["https://x.example/cb#frag"]):
                refused = await http.post(f"{base}/register", json={"redirect_uris": bad})
                assert refused.status_code == 400 and refused.json()["error"] == "invalid_redirect_uri", bad
            assert (await http.post(f"{base}/register", content=b"{not json",
                                    headers={"content-type": "application/json"})).status_code == 400
            client = await register(http, base)
            other = await register(http, base)
            verifier, challenge = pkce()
            # An unknown client or a redirect it did not register: an error page, never a redirect.
            for url in (authorize_url(base, "mcp-unknown", challenge),
                        authorize_url(base, client["client_id"], challenge).replace("localhost%3A8765", "evil.example")):
                page = await http.get(url)
                assert page.status_code == 400 and "location" not in page.headers
            # No PKCE: back to the client with the error.
            no_pkce = await http.get(authorize_url(base, client["client_id"], "short"))
            assert no_pkce.status_code == 302 and "error=invalid_request" in no_pkce.headers["location"]
            # The consent form only counts from the browser that got the page (its cookie).
            page = await http.get(authorize_url(base, client["client_id"], challenge))
            assert page.status_code == 200 and "Tester" in page.text and "localhost:8765" in page.text
            fields = dict(re.findall(r'name="(flow|csrf)" value="([^"]+)"', page.text))
            async with httpx.AsyncClient() as stranger:  # another browser: no cookie
                forged = await stranger.post(f"{base}/consent", data={**fields, "decision": "allow"})
            assert forged.status_code == 403
            denied = await http.post(f"{base}/consent", data={**fields, "decision": "deny"})
            assert denied.status_code == 302 and "error=access_denied" in denied.headers["location"]
            # A whole authorization, then the token endpoint's checks.
            code = await code_for(base, client["client_id"], challenge)
            token = {"grant_type": "authorization_code", "code": code, "redirect_uri": CLIENT_REDIRECT}
            wrong = await http.post(f"{base}/token", data={**token, "client_id": client["client_id"],
                                                           "code_verifier": pkce()[0]})
            assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"  # a wrong verifier burns the code
            code = await code_for(base, client["client_id"], challenge)
            stolen = await http.post(f"{base}/token", data={**token, "code": code, "client_id": other["client_id"],
                                                            "code_verifier": verifier})
            assert stolen.json()["error"] == "invalid_grant"
            code = await code_for(base, client["client_id"], challenge)
            good = await http.post(f"{base}/token", data={**token, "code": code, "client_id": client["client_id"],
                                                          "code_verifier": verifier})
            assert good.status_code == 200, good.text
            tokens = good.json()
            assert tokens["token_type"].lower() == "bearer" and tokens["refresh_token"]
            again = await http.post(f"{base}/token", data={**token, "code": code, "client_id": client["client_id"],
                                                           "code_verifier": verifier})
            assert again.json()["error"] == "invalid_grant"  # single use
            # The access token is the provider's, for this resource: the MCP endpoint takes it.
            mcp = await http.post(f"{base}/mcp", headers={"authorization": f"Bearer {tokens['access_token']}"},
                                  json={"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}})
            assert mcp.status_code != 401
            # Refresh tokens belong to the client that got them.
            theirs = await http.post(f"{base}/token", data={"grant_type": "refresh_token", "client_id": other["client_id"],
                                                            "refresh_token": tokens["refresh_token"]})
            assert theirs.json()["error"] == "invalid_grant"
            refreshed = await http.post(f"{base}/token", data={"grant_type": "refresh_token", "client_id": client["client_id"],
                                                               "refresh_token": tokens["refresh_token"]})
            assert refreshed.status_code == 200 and refreshed.json()["access_token"] != tokens["access_token"]
            # A confidential client proves itself.
            confidential = await register(http, base, token_endpoint_auth_method="client_secret_basic")
            no_secret = await http.post(f"{base}/token", data={"grant_type": "refresh_token",
                                                               "client_id": confidential["client_id"], "refresh_token": "x"})
            assert no_secret.status_code == 401 and no_secret.json()["error"] == "invalid_client"
            # Bad input: wrong content type, repeated parameters, an unknown grant.
            assert (await http.post(f"{base}/token", json={"grant_type": "x"})).status_code == 400
            repeated = await http.post(f"{base}/token", content=b"grant_type=a&grant_type=b&client_id=" + client["client_id"].encode(),
                                       headers={"content-type": "application/x-www-form-urlencoded"})
            assert repeated.json()["error"] == "invalid_request"
            unknown = await http.post(f"{base}/token", data={"grant_type": "password", "client_id": client["client_id"]})
            assert unknown.json()["error"] == "unsupported_grant_type"
            assert (await http.get(f"{base}/token")).status_code == 405
            # And the server kept serving throughout.
            assert (await http.get(f"{base}/.well-known/oauth-authorization-server")).status_code == 200
        await proxied.aclose()


async def test_a_login_may_start_on_one_instance_and_end_on_another(fresh_redis: Any) -> None:
    """Round-robin: registration, consent, the provider's callback and the token request
    reach different instances; the records are in the shared Redis."""
    from nimblemcp.backends import from_url

    port_a, port_b = free_port(), free_port()
    front = f"http://127.0.0.1:{port_a}"  # the issuer both instances present (a load balancer's name)
    other = f"http://127.0.0.1:{port_b}"
    with oidc_provider({f"{front}/mcp": {"scope": "notes:read", "ttl": 60}},
                       clients=[upstream_client(front)], registration=False) as provider:
        stores = [from_url(fresh_redis.url)[0] for _ in range(2)]
        a = Proxied(provider, front, store=stores[0])
        b = Proxied(provider, other, store=stores[1], issuer=front)
        async with serving_on(a.app, port_a), serving_on(b.app, port_b), httpx.AsyncClient(timeout=30) as http:
            client = await register(http, other)                     # instance B
            verifier, challenge = pkce()

            def walk() -> str:
                with httpx.Client(follow_redirects=False, timeout=30) as browser:
                    page = browser.get(authorize_url(front, client["client_id"], challenge))  # instance A
                    fields = dict(re.findall(r'name="(flow|csrf)" value="([^"]+)"', page.text))
                    upstream = browser.post(f"{other}/consent", data={**fields, "decision": "allow"})  # B
                    assert upstream.status_code == 302, upstream.text
                    # At the provider, as the user; its redirect to the callback goes to B.
                    callback = browse_until(upstream.headers["location"], f"{front}/callback")
                    landed = browser.get(callback.replace(front, other))
                    assert landed.status_code == 302, landed.text
                    return str(landed.headers["location"])

            landed = await asyncio.to_thread(walk)
            code = parse_qs(urlsplit(landed).query)["code"][0]
            good = await http.post(f"{front}/token", data={                # instance A
                "grant_type": "authorization_code", "code": code, "redirect_uri": CLIENT_REDIRECT,
                "client_id": client["client_id"], "code_verifier": verifier})
            assert good.status_code == 200, good.text
            replay = await http.post(f"{other}/token", data={              # B: the code is gone everywhere
                "grant_type": "authorization_code", "code": code, "redirect_uri": CLIENT_REDIRECT,
                "client_id": client["client_id"], "code_verifier": verifier})
            assert replay.json()["error"] == "invalid_grant"
        for store in stores:
            await store.close()
        await a.aclose()
        await b.aclose()


def test_nimblemcp_login_through_the_proxy_then_tools(tmp_path: Path, port: int) -> None:
    """The CLI: `nimblemcp login URL` registers at the proxy, the user allows it and signs
    in at the provider; `nimblemcp tools` then uses the cached token."""
    base = f"http://127.0.0.1:{port}"
    with oidc_provider({f"{base}/mcp": {"scope": "notes:read", "ttl": 60}},
                       clients=[upstream_client(base)], registration=False) as provider:
        source = tmp_path / "served.py"
        source.write_text(f'''
import sys
sys.path[:0] = {[str(Path(__file__).resolve().parents[1])]!r}
from tests.test_oauth_proxy import Proxied
from tests._oidc_provider import OidcProvider
app = Proxied(OidcProvider({provider.issuer!r}, None), {base!r}).app  # type: ignore[arg-type]
''')
        log = (tmp_path / "server.log").open("wb")
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "served:app", "--host", "127.0.0.1",
                                   "--port", str(port), "--log-level", "warning"], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_for_port(server, port, "the proxied server")  # type: ignore[arg-type]
            env = {**os.environ, "BROWSER": str(browser_command(tmp_path)), "XDG_CONFIG_HOME": str(tmp_path / "config"),
                   "HOME": str(tmp_path)}
            login = subprocess.run([sys.executable, "-m", "nimblemcp", "login", f"{base}/mcp"], env=env,
                                   capture_output=True, text=True, timeout=120)
            assert login.returncode == 0, login.stderr
            tools = subprocess.run([sys.executable, "-m", "nimblemcp", "call", f"{base}/mcp", "whoami"], env=env,
                                   capture_output=True, text=True, timeout=120)
            assert tools.returncode == 0, tools.stderr
            assert tools.stdout.strip() == "alice"
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()
