"""A real, small OAuth world on 127.0.0.1 for the client auth tests.

One uvicorn server hosts a mini authorization server (`MiniAS`: RFC 8414 metadata, an
authorization endpoint that approves at once by redirecting, a token endpoint that
checks PKCE, `resource` and client authentication, DCR, refresh) under `/as1` and
`/as2`, and our own MCP server as a resource server (`secure_app(..., auth=...)`)
whose token verifier accepts what the current authorization server issued. Knobs on
`MiniAS` make it misbehave the ways the client must refuse; `World.step_up` makes
`tools/call` need `mcp:write` (403 otherwise), and `World.prm_override` replaces
the Protected Resource Metadata (another resource, another authorization server).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import orjson
import uvicorn

import nimblemcp as m
from nimblemcp.transports.auth.bearer import AccessToken
from nimblemcp.transports.http.security import secure_app


async def follow_redirect(url: str) -> str:
    """The headless user agent: GET the authorization URL, return where it redirects."""
    async with httpx.AsyncClient(follow_redirects=False) as http:
        response = await http.get(url)
    assert response.status_code == 302
    return response.headers["location"]


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _send(send: Any, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
    raw = orjson.dumps(body) if body is not None else b""
    hs = [(b"content-type", b"application/json")] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hs})
    await send({"type": "http.response.body", "body": raw})


@dataclass
class MiniAS:
    """An authorization server at `base + prefix` whose issuer is exactly that URL."""

    base: str
    prefix: str
    iss_mode: str = "correct"  # correct | omit | wrong | slash
    advertise_iss: bool | None = True
    pkce_methods: list[str] | None = field(default_factory=lambda: ["S256"])
    auth_methods: list[str] = field(default_factory=lambda: ["none"])
    cimd: bool = False
    dcr: bool = True
    issuer_claim: str | None = None
    scopes_supported: list[str] | None = None
    grantable: set[str] | None = None  # None grants whatever is asked
    expires_in: int = 3600
    refresh: bool = False
    secrets: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _challenge: str | None = None
    _n: int = 0

    @property
    def issuer(self) -> str:
        return self.base + self.prefix

    def seen(self, kind: str) -> list[dict[str, Any]]:
        return [d for k, d in self.log if k == kind]

    def metadata(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "issuer": self.issuer_claim or self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token", "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": self.auth_methods,
        }
        if self.dcr:
            doc["registration_endpoint"] = f"{self.issuer}/register"
        if self.pkce_methods is not None:
            doc["code_challenge_methods_supported"] = self.pkce_methods
        if self.advertise_iss is not None:
            doc["authorization_response_iss_parameter_supported"] = self.advertise_iss
        if self.cimd:
            doc["client_id_metadata_document_supported"] = True
        if self.scopes_supported is not None:
            doc["scopes_supported"] = self.scopes_supported
        return doc

    def _issue(self, scopes: frozenset[str], resource: str) -> dict[str, Any]:
        self._n += 1
        token = f"{self.prefix.strip('/')}-token-{self._n}"
        self.tokens[token] = (resource, scopes)
        body: dict[str, Any] = {"access_token": token, "token_type": "Bearer",
                                "expires_in": self.expires_in, "scope": " ".join(sorted(scopes))}
        if self.refresh:
            body["refresh_token"] = f"refresh-{self._n}"
        return body

    async def handle(self, path: str, query: dict[str, str], body: bytes, headers: dict[str, str], send: Any) -> None:
        if path == "/authorize":
            self.log.append(("authorize", query))
            self._challenge = query.get("code_challenge")
            back = {"code": "the-code", "state": query.get("state", "")}
            iss = {"correct": self.issuer, "wrong": "https://evil.example", "slash": self.issuer + "/"}
            if self.iss_mode in iss:
                back["iss"] = iss[self.iss_mode]
            await _send(send, 302, headers={"location": f"{query['redirect_uri']}?{urlencode(back)}"})
        elif path == "/register":
            doc = orjson.loads(body)
            self.log.append(("register", doc))
            client_id = f"{self.prefix.strip('/')}-client-{len(self.seen('register'))}"
            answer = {"client_id": client_id, **doc}
            if doc.get("token_endpoint_auth_method") != "none":
                answer["client_secret"] = self.secrets[client_id] = "s3cret"
            await _send(send, 201, answer)
        elif path == "/token":
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            basic = headers.get("authorization", "")
            if basic.startswith("Basic "):
                form["basic"] = base64.b64decode(basic[6:]).decode()
            self.log.append(("token", form))
            if form["grant_type"] == "authorization_code":
                digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
                if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != self._challenge:
                    await _send(send, 400, {"error": "invalid_grant"})
                    return
            asked = form.get("scope") if form["grant_type"] == "client_credentials" \
                else self.seen("authorize")[-1].get("scope")
            scopes = frozenset((asked or "").split())
            if self.grantable is not None:
                scopes &= self.grantable
            await _send(send, 200, self._issue(scopes, form.get("resource", "")))
        else:
            await _send(send, 404, {"error": "not_found"})


@dataclass
class World:
    url: str
    resource: str
    servers: dict[str, MiniAS]
    current: str = "/as1"
    step_up: bool = False
    prm_override: dict[str, Any] | None = None
    mcp_auth_headers: list[str | None] = field(default_factory=list)

    @property
    def as1(self) -> MiniAS:
        return self.servers["/as1"]

    @property
    def as2(self) -> MiniAS:
        return self.servers["/as2"]

    async def verify(self, token: str) -> AccessToken | None:
        issued = self.servers[self.current].tokens.get(token)
        if issued is None:
            return None
        return AccessToken("alice", issued[1], (issued[0],))


@asynccontextmanager
async def world() -> AsyncIterator[World]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = m.Server("protected")

    @server.tool
    async def whoami(ctx: m.Context) -> str:
        return ctx.subject or "nobody"

    w = World(f"{base}/mcp", f"{base}/mcp", {p: MiniAS(base, p) for p in ("/as1", "/as2")})

    class Verifier:
        async def verify(self, token: str) -> AccessToken | None:
            return await w.verify(token)

    def prm() -> dict[str, Any]:
        return w.prm_override or {"resource": w.resource, "authorization_servers": [base + w.current],
                                  "scopes_supported": ["mcp:use"]}

    mcp = secure_app(server, auth={"verifier": Verifier(), "resource": w.resource,
                                   "authorization_servers": [base + "/as1"], "required_scopes": ["mcp:use"]})

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await mcp(scope, receive, send)
        path: str = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        for prefix, peer in w.servers.items():
            if path.startswith(prefix + "/"):
                query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
                return await peer.handle(path[len(prefix):], query, await _body(receive), headers, send)
            if path == "/.well-known/oauth-authorization-server" + prefix:
                return await _send(send, 200, peer.metadata())
        if path.startswith("/.well-known/oauth-protected-resource"):
            return await _send(send, 200, prm())
        if path == "/mcp" and scope["method"] == "POST":
            w.mcp_auth_headers.append(headers.get("authorization"))
            if w.step_up and headers.get("mcp-method") == "tools/call":
                access = await w.verify(headers.get("authorization", "")[7:])
                if access is not None and "mcp:write" not in access.scopes:
                    challenge = (f'Bearer error="insufficient_scope", scope="mcp:write", '
                                 f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"')
                    await _body(receive)
                    return await _send(send, 403, {"error": "insufficient_scope"}, {"www-authenticate": challenge})
        return await mcp(scope, receive, send)

    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield w
    finally:
        uv.should_exit = True
        await task
        sock.close()
