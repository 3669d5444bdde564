"""Issue 19, auth inside handlers: `JwtVerifier` (JWKS fetched from a real loopback
endpoint, cached, refetched once on an unknown key id) and `IntrospectionVerifier`
(RFC 7662 against a real loopback endpoint), alone and behind `BearerAuth`, with the
principal's subject, scopes and claims on the handler's context."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import httpx
import orjson
import pytest
from _serving import serving
from joserfc import jwk, jwt

import nimblemcp as m
from nimblemcp import HttpSecurity
from nimblemcp.client import Client
from nimblemcp.transports.auth.verifiers import IntrospectionVerifier, JwtVerifier
from nimblemcp.transports.client.http import HttpTransport

ISSUER = "https://issuer.example"
RESOURCE = "https://mcp.example/mcp"


class AuthWorld:
    """An ASGI app: `/jwks` (a key set we can rotate) and `/introspect` (RFC 7662)."""

    def __init__(self) -> None:
        self.keys = [jwk.generate_key("EC", "P-256", parameters={"kid": "k1"})]
        self.jwks_hits = 0
        self.jwks_status = 200
        self.introspect_hits = 0
        self.active: dict[str, dict[str, Any]] = {}
        self.client_auth = "Basic " + base64.b64encode(b"rs:s3cret").decode()

    def rotate(self, kid: str) -> None:
        self.keys = [jwk.generate_key("EC", "P-256", parameters={"kid": kid})]

    def sign(self, claims: dict[str, Any], key: Any = None, **header: Any) -> str:
        key = key or self.keys[0]
        return jwt.encode({"alg": "ES256", "kid": key.kid, **header}, claims, key)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, answer = 404, {}
        if scope["path"] == "/jwks":
            self.jwks_hits += 1
            status, answer = self.jwks_status, {"keys": [k.as_dict(private=False) for k in self.keys]}
        elif scope["path"] == "/introspect" and scope["method"] == "POST":
            self.introspect_hits += 1
            headers = dict(scope["headers"])
            form = dict(httpx.QueryParams(body.decode()))
            if headers.get(b"authorization", b"").decode() != self.client_auth:
                status, answer = 401, {"error": "invalid_client"}
            else:
                status, answer = 200, self.active.get(form.get("token", ""), {"active": False})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(answer)})


def _claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "scope": "notes:read notes:write",
            "iat": now, "exp": now + 300, "org": "acme", **extra}


async def test_jwt_verified_against_a_fetched_jwks_and_cached() -> None:
    world = AuthWorld()
    async with serving(world) as base:
        verifier = JwtVerifier(jwks_uri=base + "/jwks", issuer=ISSUER, audience=RESOURCE)
        try:
            token = await verifier.verify(world.sign(_claims()))
            assert token is not None
            assert token.subject == "alice"
            assert token.scopes == frozenset({"notes:read", "notes:write"})
            assert token.audience == (RESOURCE,)
            assert token.claims["org"] == "acme"
            assert token.expires_at is not None and token.expires_at > time.time()
            for _ in range(5):
                assert await verifier.verify(world.sign(_claims(sub="bob"))) is not None
            assert world.jwks_hits == 1  # cached
        finally:
            await verifier.aclose()


async def test_jwt_refusals_expiry_audience_issuer_signature_algorithm() -> None:
    world = AuthWorld()
    async with serving(world) as base:
        verifier = JwtVerifier(jwks_uri=base + "/jwks", issuer=ISSUER, audience=RESOURCE, leeway=5)
        try:
            now = int(time.time())
            assert await verifier.verify(world.sign(_claims(exp=now - 60))) is None          # expired
            assert await verifier.verify(world.sign(_claims(exp=now - 2))) is not None      # in leeway
            assert await verifier.verify(world.sign(_claims(nbf=now + 600))) is None        # not yet
            assert await verifier.verify(world.sign(_claims(aud="https://other.example"))) is None
            assert await verifier.verify(world.sign(_claims(aud=["https://other.example", RESOURCE]))) is not None
            assert await verifier.verify(world.sign(_claims(iss="https://evil.example"))) is None
            no_exp = _claims()
            del no_exp["exp"]
            assert await verifier.verify(world.sign(no_exp)) is None                        # exp required
            impostor = jwk.generate_key("EC", "P-256", parameters={"kid": "k1"})
            assert await verifier.verify(world.sign(_claims(), key=impostor)) is None        # bad signature
            secret = jwk.OctKey.generate_key(256, parameters={"kid": "k1"})
            hs = jwt.encode({"alg": "HS256", "kid": "k1"}, _claims(), secret)
            assert await verifier.verify(hs) is None                                        # symmetric refused
            unsigned = (base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode() + "."
                        + base64.urlsafe_b64encode(orjson.dumps(_claims())).rstrip(b"=").decode() + ".")
            assert await verifier.verify(unsigned) is None
            assert await verifier.verify("not-a-jwt") is None
        finally:
            await verifier.aclose()
    with pytest.raises(ValueError, match="none"):
        JwtVerifier(jwks={"keys": []}, issuer=ISSUER, audience=None, algorithms=["none"])
    with pytest.raises(TypeError, match="exactly one"):
        JwtVerifier(issuer=ISSUER, audience=None)


async def test_jwt_key_rotation_refetches_once_per_unknown_kid_window() -> None:
    world = AuthWorld()
    async with serving(world) as base:
        verifier = JwtVerifier(jwks_uri=base + "/jwks", issuer=ISSUER, audience=RESOURCE, miss_interval=60)
        try:
            assert await verifier.verify(world.sign(_claims())) is not None
            assert world.jwks_hits == 1
            world.rotate("k2")
            rotated = await verifier.verify(world.sign(_claims(sub="carol")))
            assert rotated is not None and rotated.subject == "carol"
            assert world.jwks_hits == 2  # the unknown kid fetched the new set once
            # Forged key ids do not make the verifier hammer the issuer.
            stranger = jwk.generate_key("EC", "P-256", parameters={"kid": "forged"})
            for _ in range(5):
                assert await verifier.verify(world.sign(_claims(), key=stranger)) is None
            assert world.jwks_hits == 2
            # The old key is gone from the set: its tokens no longer verify.
            assert await verifier.verify(world.sign(_claims(), key=jwk.generate_key(
                "EC", "P-256", parameters={"kid": "k1"}))) is None
        finally:
            await verifier.aclose()


async def test_jwt_issuer_unreachable_fails_closed() -> None:
    world = AuthWorld()
    async with serving(world) as base:
        pass  # the port is closed now
    verifier = JwtVerifier(jwks_uri=base + "/jwks", issuer=ISSUER, audience=RESOURCE)
    try:
        assert await verifier.verify(world.sign(_claims())) is None
    finally:
        await verifier.aclose()
    # An issuer that fails after the first fetch: the old keys stay, and it is asked
    # again only after miss_interval, not on every request.
    async with serving(world) as base:
        verifier = JwtVerifier(jwks_uri=base + "/jwks", issuer=ISSUER, audience=RESOURCE,
                               cache_ttl=0.2, miss_interval=30)
        try:
            assert await verifier.verify(world.sign(_claims())) is not None
            assert world.jwks_hits == 1
            world.jwks_status = 503
            await asyncio.sleep(0.3)  # the cache expires
            for _ in range(5):
                assert await verifier.verify(world.sign(_claims())) is not None  # old keys kept
            assert world.jwks_hits == 2
        finally:
            await verifier.aclose()


async def test_introspection_active_inactive_cached_and_checked() -> None:
    world = AuthWorld()
    now = int(time.time())
    world.active["opaque-1"] = {"active": True, "sub": "dave", "scope": "notes:read", "aud": RESOURCE,
                                "iss": ISSUER, "exp": now + 300, "client_id": "app"}
    world.active["opaque-expired"] = {"active": True, "sub": "erin", "exp": now - 10}
    world.active["opaque-elsewhere"] = {"active": True, "sub": "frank", "aud": "https://other.example"}
    world.active["revoked"] = {"active": False}
    async with serving(world) as base:
        verifier = IntrospectionVerifier(base + "/introspect", client_id="rs", client_secret="s3cret",
                                         issuer=ISSUER, audience=RESOURCE)
        try:
            token = await verifier.verify("opaque-1")
            assert token is not None and token.subject == "dave"
            assert token.scopes == frozenset({"notes:read"}) and token.claims["client_id"] == "app"
            assert await verifier.verify("opaque-1") is not None
            assert world.introspect_hits == 1  # cached
            assert await verifier.verify("revoked") is None
            assert await verifier.verify("unknown") is None
            assert await verifier.verify("opaque-expired") is None
            assert await verifier.verify("opaque-elsewhere") is None
            hits = world.introspect_hits
            assert await verifier.verify("revoked") is None
            assert world.introspect_hits == hits  # inactive answers are cached too
        finally:
            await verifier.aclose()
        wrong = IntrospectionVerifier(base + "/introspect", client_id="rs", client_secret="nope")
        try:
            assert await wrong.verify("opaque-1") is None  # the AS refused us: fail closed
        finally:
            await wrong.aclose()


def _server() -> m.Server:
    server = m.Server("notes")

    @server.tool()
    def whoami(ctx: m.Context) -> str:
        p = ctx.principal
        return f"{p.subject} {sorted(p.scopes)} {p.claims.get('org')}" if p else "nobody"

    return server


async def test_handlers_see_the_principal_from_either_verifier() -> None:
    world = AuthWorld()
    world.active["opaque-1"] = {"active": True, "sub": "dave", "scope": "notes:read", "aud": RESOURCE,
                                "org": "initech"}
    world.active["revoked"] = {"active": False}
    async with serving(world) as issuer:
        jwt_verifier = JwtVerifier(jwks_uri=issuer + "/jwks", issuer=ISSUER, audience=RESOURCE)
        introspection = IntrospectionVerifier(issuer + "/introspect", client_id="rs", client_secret="s3cret")
        for verifier, good, bad, expected in (
            (jwt_verifier, world.sign(_claims()), world.sign(_claims(aud="https://x.example")),
             "alice ['notes:read', 'notes:write'] acme"),
            (introspection, "opaque-1", "revoked", "dave ['notes:read'] initech"),
        ):
            app = _server().asgi_app(auth={
                "verifier": verifier, "resource": RESOURCE, "authorization_servers": [ISSUER]}, security=HttpSecurity(allowed_hosts=["*"]))
            async with serving(app) as base:
                transport = HttpTransport(base + "/mcp", headers={"authorization": f"Bearer {good}"})
                async with Client(transport) as client:
                    result = await client.call_tool("whoami", {})
                    assert result["content"][0]["text"] == expected
                async with httpx.AsyncClient() as http:
                    refused = await http.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                              headers={"authorization": f"Bearer {bad}"})
                    assert refused.status_code == 401
                    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
        await jwt_verifier.aclose()
        await introspection.aclose()
