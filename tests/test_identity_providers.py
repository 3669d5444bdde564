"""Identity providers (issue 35, item 2): `JwtVerifier.from_issuer` by discovery against a
real OAuth server (the npm `oidc-provider`, client-credentials tokens), the presets'
issuers, audiences and permission claims, and the opaque-token verifiers for GitHub and
Google against local servers that speak their APIs (the real ones cannot be reached
here), each protecting a real nimblemcp server process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from _deploy import stop, wait_port
from _redis import free_port
from tests._oidc_provider import oidc_provider

from nimblemcp.transports.auth import identity
from nimblemcp.transports.auth.verifiers import JwtVerifier, _access

RESOURCE = "http://127.0.0.1/mcp"
OTHER = "http://127.0.0.1/other"
SERVICE = {"client_id": "svc", "client_secret": "s3cret", "grant_types": ["client_credentials"],
           "redirect_uris": [], "response_types": [], "token_endpoint_auth_method": "client_secret_basic"}

SERVED = '''
import json, os, sys
import uvicorn
import nimblemcp as m
from nimblemcp.transports.auth import identity
from nimblemcp.transports.auth.verifiers import JwtVerifier

config = json.loads(os.environ["IDP_CONFIG"])
server = m.Server("protected")


@server.tool
def whoami(ctx: m.Context) -> dict:
    p = ctx.principal
    return {"subject": p.subject, "scopes": sorted(p.scopes), "login": p.claims.get("login")}


kind = config["kind"]
if kind == "issuer":
    verifier = JwtVerifier.from_issuer(config["issuer"], audience=config["audience"], leeway=0,
                                       scope_claims=("scope", "permissions"))
elif kind == "github":
    verifier = identity.github(api_url=config["api"], allow_insecure_http=True, cache_ttl=config["ttl"])
else:
    verifier = identity.google(config["client_id"], api_url=config["api"], allow_insecure_http=True)
auth = {"verifier": verifier, "resource": config["resource"],
        "authorization_servers": [config.get("issuer") or "https://idp.example"],
        "allow_missing_audience": kind != "issuer"}
uvicorn.run(server.asgi_app(auth=auth, security=m.HttpSecurity(allowed_hosts=["*"])), host="127.0.0.1", port=int(sys.argv[1]),
            log_level="warning")
'''


@contextmanager
def protected(tmp_path: Path, config: dict[str, Any]) -> Iterator[str]:
    script = tmp_path / "served.py"
    script.write_text(SERVED)
    port = free_port()
    log = tmp_path / "served.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, str(script), str(port)], stdout=sink, stderr=sink,
                                env={**os.environ, "IDP_CONFIG": json.dumps(config)})
    try:
        wait_port(port, proc, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


def call_whoami(url: str, token: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "whoami", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}}
    return httpx.post(url, json=body, timeout=30, headers={
        "authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "whoami"})


def whoami(url: str, token: str) -> dict[str, Any]:
    answer = call_whoami(url, token)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]["structuredContent"]
    return result


def service_token(issuer: str, resource: str, scope: str) -> str:
    answer = httpx.post(f"{issuer}/token", auth=("svc", "s3cret"), timeout=30, data={
        "grant_type": "client_credentials", "resource": resource, "scope": scope})
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token


def test_from_issuer_finds_the_keys_and_checks_every_token(tmp_path: Path) -> None:
    resources = {RESOURCE: {"scope": "notes:read notes:write", "ttl": 2},
                 OTHER: {"scope": "notes:read", "ttl": 60}}
    with oidc_provider(resources, clients=[SERVICE], registration=False) as provider, \
            protected(tmp_path, {"kind": "issuer", "issuer": provider.issuer, "audience": RESOURCE,
                                 "resource": RESOURCE}) as url:
        token = service_token(provider.issuer, RESOURCE, "notes:read")
        assert whoami(url, token) == {"subject": "svc", "scopes": ["notes:read"], "login": None}
        head, payload, signature = token.split(".")
        forged_claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        forged_claims["scope"] = "notes:read notes:write"
        forged = ".".join([head, base64.urlsafe_b64encode(json.dumps(forged_claims).encode()).decode().rstrip("="),
                           signature])
        assert call_whoami(url, forged).status_code == 401
        elsewhere = service_token(provider.issuer, OTHER, "notes:read")  # for another resource
        assert call_whoami(url, elsewhere).status_code == 401
        assert call_whoami(url, "not-a-jwt").status_code == 401
        assert whoami(url, token)["subject"] == "svc"  # still serving
        deadline = 30.0
        while call_whoami(url, token).status_code != 401:  # the 2 s token expires (leeway 0)
            deadline -= 0.2
            assert deadline > 0, "an expired token was still accepted"
            asyncio.run(asyncio.sleep(0.2))


class FakeProvider:
    """A loopback HTTP server speaking GitHub's `GET /user` and Google's `tokeninfo`."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.paths: list[str] = []
        self.users = {"gho_alice": ({"id": 583231, "login": "octocat", "name": "Mona"}, "repo, read:org"),
                      "gho_bob": ({"id": 7, "login": "bob"}, "")}
        self.google = {"ya29.alice": {"aud": "notes.apps.googleusercontent.com", "sub": "1170",
                                      "scope": "openid https://www.googleapis.com/auth/userinfo.email",
                                      "exp": "9999999999", "email": "alice@example.com"},
                       "ya29.elsewhere": {"aud": "other.apps.googleusercontent.com", "sub": "1171",
                                          "exp": "9999999999"}}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                fake.paths.append(parts.path)
                if parts.path == "/.well-known/openid-configuration":  # names another issuer
                    return self._send(200, {"issuer": "https://idp.evil.example", "jwks_uri": fake.url + "/jwks"})
                if parts.path == "/user":
                    token = self.headers.get("authorization", "").removeprefix("Bearer ")
                    fake.asked.append(token)
                    found = fake.users.get(token)
                    if found is None:
                        return self._send(401, {"message": "Bad credentials"})
                    return self._send(200, found[0], {"X-OAuth-Scopes": found[1]})
                if parts.path == "/tokeninfo":
                    token = parse_qs(parts.query).get("access_token", [""])[0]
                    fake.asked.append(token)
                    info = fake.google.get(token)
                    return self._send(200 if info else 400, info or {"error": "invalid_token"})
                return self._send(404, {})

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in {"content-type": "application/json", **(headers or {})}.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    provider = FakeProvider()
    try:
        yield provider
    finally:
        provider.close()


def test_github_tokens_through_the_user_api_once_per_token(tmp_path: Path, fake: FakeProvider) -> None:
    with protected(tmp_path, {"kind": "github", "api": fake.url, "ttl": 2, "resource": RESOURCE}) as url:
        for _ in range(5):
            assert whoami(url, "gho_alice") == {"subject": "583231", "scopes": ["read:org", "repo"],
                                                "login": "octocat"}
        assert fake.asked.count("gho_alice") == 1  # cached per token
        assert whoami(url, "gho_bob")["scopes"] == []
        assert call_whoami(url, "gho_forged").status_code == 401
        assert call_whoami(url, "gho_forged").status_code == 401
        assert fake.asked.count("gho_forged") == 1  # a refusal is remembered for a while
        del fake.users["gho_alice"]  # revoked at GitHub: refused once the cache entry lapses
        deadline = 30.0
        while call_whoami(url, "gho_alice").status_code != 401:
            deadline -= 0.2
            assert deadline > 0, "a revoked token was accepted past the cache's time"
            asyncio.run(asyncio.sleep(0.2))
        assert fake.asked.count("gho_alice") == 2
        assert whoami(url, "gho_bob")["subject"] == "7"  # still serving


def test_google_tokens_must_be_issued_to_our_client(tmp_path: Path, fake: FakeProvider) -> None:
    with protected(tmp_path, {"kind": "google", "api": fake.url, "client_id": "notes.apps.googleusercontent.com",
                              "resource": RESOURCE}) as url:
        me = whoami(url, "ya29.alice")
        assert me["subject"] == "1170" and "openid" in me["scopes"]
        assert call_whoami(url, "ya29.elsewhere").status_code == 401  # another app's token
        assert call_whoami(url, "ya29.unknown").status_code == 401


async def test_an_unreachable_provider_fails_closed_and_is_asked_again() -> None:
    port = free_port()  # nothing listens there
    verifier = identity.github(api_url=f"http://127.0.0.1:{port}", allow_insecure_http=True, timeout=2)
    try:
        assert await verifier.verify("gho_alice") is None
        assert await verifier.verify("gho_alice") is None
        assert verifier.asked == 2  # not cached: the provider may be back
    finally:
        await verifier.aclose()


async def test_concurrent_requests_with_one_new_token_ask_once(fake: FakeProvider) -> None:
    verifier = identity.github(api_url=fake.url, allow_insecure_http=True)
    try:
        found = await asyncio.gather(*(verifier.verify("gho_alice") for _ in range(20)))
        assert all(f is not None and f.subject == "583231" for f in found)
        assert fake.asked.count("gho_alice") == 1
    finally:
        await verifier.aclose()


def test_a_discovery_document_naming_another_issuer_is_refused(fake: FakeProvider) -> None:
    verifier = JwtVerifier.from_issuer(fake.url, audience=RESOURCE)

    async def check() -> None:
        assert await verifier.verify("eyJhbGciOiJFUzI1NiJ9.e30.sig") is None
        await verifier.aclose()

    asyncio.run(check())
    assert "/.well-known/openid-configuration" in fake.paths
    assert "/jwks" not in fake.paths  # its keys are never fetched
    with pytest.raises(ValueError, match="must be https"):
        JwtVerifier.from_issuer("http://idp.example.com", audience=RESOURCE)


def test_presets_name_the_providers_issuers_audiences_and_permission_claims() -> None:
    entra = identity.entra_id("contoso.onmicrosoft.com", "6f1c")
    assert entra.issuer == "https://login.microsoftonline.com/contoso.onmicrosoft.com/v2.0"
    assert entra.discover and set(entra.audience) == {"6f1c", "api://6f1c"}
    claims = {"sub": "u", "aud": "api://6f1c", "scp": "Notes.Read Notes.Write", "roles": ["Notes.Admin"]}
    assert _access(claims, entra.scope_claims).scopes == {"Notes.Read", "Notes.Write", "Notes.Admin"}

    a0 = identity.auth0("notes.eu.auth0.com", "https://notes.example/mcp")
    assert a0.issuer == "https://notes.eu.auth0.com/"
    assert a0.jwks_uri == "https://notes.eu.auth0.com/.well-known/jwks.json"
    claims = {"sub": "auth0|1", "aud": ["https://notes.example/mcp"], "scope": "openid",
              "permissions": ["read:notes"]}
    assert _access(claims, a0.scope_claims).scopes == {"openid", "read:notes"}

    ok = identity.okta("acme.okta.com")
    assert ok.issuer == "https://acme.okta.com/oauth2/default"
    assert ok.jwks_uri == "https://acme.okta.com/oauth2/default/v1/keys" and ok.audience == ("api://default",)
    assert _access({"sub": "00u", "aud": "api://default", "scp": ["notes.read"]}, ok.scope_claims).scopes == {
        "notes.read"}

    kc = identity.keycloak("https://sso.example.com/", "staff", "notes-mcp")
    assert kc.issuer == "https://sso.example.com/realms/staff"
    assert kc.jwks_uri == "https://sso.example.com/realms/staff/protocol/openid-connect/certs"
    claims = {"sub": "k", "aud": "notes-mcp", "scope": "profile", "realm_access": {"roles": ["editor"]}}
    assert _access(claims, kc.scope_claims).scopes == {"profile", "editor"}

    wo = identity.workos("notes.authkit.app")
    assert wo.issuer == "https://notes.authkit.app" and wo.discover

    for bad in ("notes.eu.auth0.com/evil", "", "a b"):
        with pytest.raises(ValueError):
            identity.auth0(bad, "x")
    with pytest.raises(ValueError):
        identity.entra_id("contoso/../x", "id")
