"""A real OAuth world on 127.0.0.1 for the assertion-based and DPoP client tests.

One uvicorn server hosts:
- `/as` — an authorization server (RFC 8414 metadata) whose token endpoint takes the
  authorization-code grant (PKCE), client credentials authenticated with
  `private_key_jwt` or a secret, and the JWT-bearer grant with either a workload
  identity JWT or an ID-JAG; it checks DPoP proofs on token requests, can demand a
  nonce (`as_nonce`), and issues DPoP-bound tokens (or Bearer ones, `unbound`);
- `/idp` — an enterprise IdP whose token endpoint does the RFC 8693 token exchange
  of an ID token for an ID-JAG;
- `/mcp` — our MCP server behind a resource-server gate that accepts Bearer tokens
  and DPoP-bound ones (proof signature, `htm`/`htu`, `ath`, `cnf` thumbprint, `jti`
  replay, `iat` window, and an optional nonce with `use_dpop_nonce`);
- `/metadata/token` — a workload metadata endpoint handing out the workload JWT.

JWS checking and signing here are written independently of `nimblemcp.client.auth`
(straight `cryptography` calls), so the tests compare our client with a second
implementation rather than with itself. Every refusal is also recorded in `errors`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode

import uvicorn
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

import nimblemcp as m
from nimblemcp.transports.http.security import secure_app

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_HASH = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_CURVE = {"P-256": ec.SECP256R1, "P-384": ec.SECP384R1, "P-521": ec.SECP521R1}


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(text: str) -> int:
    return int.from_bytes(b64d(text), "big")


def public_key_of(jwk: dict[str, Any]) -> Any:
    if jwk["kty"] == "EC":
        return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), _CURVE[jwk["crv"]]()).public_key()
    if jwk["kty"] == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
    assert jwk["kty"] == "OKP" and jwk["crv"] == "Ed25519"
    return ed25519.Ed25519PublicKey.from_public_bytes(b64d(jwk["x"]))


def thumbprint(jwk: dict[str, Any]) -> str:
    names = {"EC": ["crv", "kty", "x", "y"], "RSA": ["e", "kty", "n"], "OKP": ["crv", "kty", "x"]}[jwk["kty"]]
    canonical = "{" + ",".join(f'"{n}":"{jwk[n]}"' for n in names) + "}"
    return b64e(hashlib.sha256(canonical.encode()).digest())


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    head, body, _ = token.split(".")
    return json.loads(b64d(head)), json.loads(b64d(body))


def verify(token: str, key: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check a compact JWS with `key` (a cryptography public key); raises on failure."""
    head, body, sig = token.split(".")
    header, claims = json.loads(b64d(head)), json.loads(b64d(body))
    data, raw, alg = f"{head}.{body}".encode(), b64d(sig), header["alg"]
    if alg.startswith("ES"):
        half = len(raw) // 2
        der = encode_dss_signature(int.from_bytes(raw[:half], "big"), int.from_bytes(raw[half:], "big"))
        key.verify(der, data, ec.ECDSA(_HASH[alg[2:]]()))
    elif alg.startswith("RS"):
        key.verify(raw, data, padding.PKCS1v15(), _HASH[alg[2:]]())
    elif alg.startswith("PS"):
        digest = _HASH[alg[2:]]()
        key.verify(raw, data, padding.PSS(padding.MGF1(digest), padding.PSS.AUTO), digest)
    elif alg == "EdDSA":
        key.verify(raw, data)
    else:
        raise InvalidSignature(f"alg {alg}")
    return header, claims


def sign_es256(key: ec.EllipticCurvePrivateKey, claims: dict[str, Any], typ: str = "JWT") -> str:
    head = b64e(json.dumps({"alg": "ES256", "typ": typ}).encode())
    body = b64e(json.dumps(claims).encode())
    r, s = decode_dss_signature(key.sign(f"{head}.{body}".encode(), ec.ECDSA(hashes.SHA256())))
    return f"{head}.{body}.{b64e(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


class Refused(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers or {}


@dataclass
class JwtWorld:
    base: str
    dpop_algs: list[str] | None = None
    as_nonce: str | None = None
    rs_nonce: str | None = None
    rotate_rs_nonce: str | None = None  # sent on the next successful MCP response
    unbound: bool = False  # answer DPoP token requests with Bearer tokens
    expires_in: int = 3600
    refresh_tokens: dict[str, str | None] = field(default_factory=dict)  # refresh token -> bound jkt
    challenge_scheme: str = "Bearer"
    prm_extra: dict[str, Any] = field(default_factory=dict)
    auth_methods: list[str] = field(default_factory=lambda: ["private_key_jwt", "client_secret_basic", "none"])
    client_keys: dict[str, Any] = field(default_factory=dict)  # client_id -> public key
    secrets: dict[str, str] = field(default_factory=dict)
    workload_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    idp_key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    idp_client: str = "idp-client"
    tokens: dict[str, str | None] = field(default_factory=dict)  # token -> bound jkt
    token_log: list[dict[str, Any]] = field(default_factory=list)
    idp_log: list[dict[str, Any]] = field(default_factory=list)
    authorize_log: list[dict[str, str]] = field(default_factory=list)
    mcp_log: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _jtis: set[str] = field(default_factory=set)
    _challenge: str | None = None
    _dpop_jkt: str | None = None
    # When set, the ASGI app serving /mcp and its PRM instead of `gate` (a real resource
    # server under test, e.g. nimblemcp's BearerAuth with DPoP).
    resource_server: Any = None

    @property
    def issuer(self) -> str:
        return self.base + "/as"

    @property
    def idp_issuer(self) -> str:
        return self.base + "/idp"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    def workload_jwt(self, *, audience: str | None = None, expires_in: int = 300) -> str:
        now = int(time.time())
        return sign_es256(self.workload_key, {
            "iss": "https://workload.example", "sub": "spiffe://example/agent",
            "aud": audience or self.issuer, "iat": now, "exp": now + expires_in, "jti": uuid.uuid4().hex})

    def id_token(self, user: str = "alice@example.com") -> str:
        now = int(time.time())
        return sign_es256(self.idp_key, {"iss": self.idp_issuer, "sub": user, "aud": self.idp_client,
                                         "iat": now, "exp": now + 600})

    def metadata(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token", "registration_endpoint": f"{self.issuer}/register",
            "response_types_supported": ["code"], "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "client_credentials", JWT_BEARER],
            "token_endpoint_auth_methods_supported": self.auth_methods,
            "token_endpoint_auth_signing_alg_values_supported": ["ES256", "RS256", "PS256", "EdDSA"],
        }
        if self.dpop_algs is not None:
            doc["dpop_signing_alg_values_supported"] = self.dpop_algs
        return doc

    # -- checks -------------------------------------------------------------------------

    def check_proof(self, proof: str | None, method: str, url: str, token: str | None = None) -> tuple[dict[str, Any], str]:
        """RFC 9449 §4.3; returns (claims, jkt of the proof key)."""
        if not proof or "," in proof:
            raise Refused(400, "invalid_dpop_proof")
        try:
            header, _ = parts(proof)
            jwk = header["jwk"]
            assert header["typ"] == "dpop+jwt" and "d" not in jwk and header["alg"] != "none"
            _, claims = verify(proof, public_key_of(jwk))
        except Exception as exc:
            self.errors.append(f"bad proof: {exc!r}")
            raise Refused(400, "invalid_dpop_proof") from exc
        problems = []
        if claims.get("htm") != method:
            problems.append(f"htm {claims.get('htm')} != {method}")
        if claims.get("htu") != url:
            problems.append(f"htu {claims.get('htu')} != {url}")
        if abs(time.time() - claims.get("iat", 0)) > 60:
            problems.append("iat")
        if not isinstance(claims.get("jti"), str) or claims["jti"] in self._jtis:
            problems.append("jti replayed")
        if token is not None and claims.get("ath") != b64e(hashlib.sha256(token.encode()).digest()):
            problems.append("ath")
        if token is None and "ath" in claims:
            problems.append("ath on a token request")
        if problems:
            self.errors.append("; ".join(problems))
            raise Refused(401 if token else 400, "invalid_dpop_proof")
        self._jtis.add(claims["jti"])
        return claims, thumbprint(jwk)

    def client_of(self, form: dict[str, str], headers: dict[str, str]) -> str | None:
        """Authenticate the client: private_key_jwt, client_secret_basic, or none."""
        if "client_assertion" in form:
            if form.get("client_assertion_type") != ASSERTION_TYPE:
                raise Refused(401, "invalid_client")
            _, claims = parts(form["client_assertion"])
            key = self.client_keys.get(claims.get("iss", ""))
            try:
                verify(form["client_assertion"], key)
            except Exception as exc:
                self.errors.append(f"client assertion: {exc!r}")
                raise Refused(401, "invalid_client") from exc
            ok = (claims["iss"] == claims.get("sub") and claims.get("aud") == self.issuer
                  and claims.get("exp", 0) > time.time() and claims.get("jti") not in self._jtis
                  and form.get("client_id", claims["iss"]) == claims["iss"])
            if not ok:
                self.errors.append(f"client assertion claims {claims}")
                raise Refused(401, "invalid_client")
            self._jtis.add(claims["jti"])
            return str(claims["iss"])
        basic = headers.get("authorization", "")
        if basic.startswith("Basic "):
            client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
            if self.secrets.get(client_id) != secret:
                raise Refused(401, "invalid_client")
            return client_id
        return form.get("client_id")

    def check_grant(self, form: dict[str, str], client: str | None) -> str:
        """The subject the JWT-bearer assertion vouches for."""
        assertion = form.get("assertion", "")
        try:
            header, claims = parts(assertion)
            if header.get("typ") == "oauth-id-jag+jwt":
                verify(assertion, self.idp_key.public_key())
                assert claims["iss"] == self.idp_issuer and claims["client_id"] == client
                assert claims["resource"] == self.url
            else:
                verify(assertion, self.workload_key.public_key())
            assert claims["aud"] == self.issuer and claims["exp"] > time.time()
        except Exception as exc:
            self.errors.append(f"assertion: {exc!r}")
            raise Refused(400, "invalid_grant") from exc
        return str(claims["sub"])

    # -- endpoints ----------------------------------------------------------------------

    def token(self, form: dict[str, str], headers: dict[str, str]) -> dict[str, Any]:
        self.token_log.append({"form": form, "dpop": headers.get("dpop"),
                               "authorization": headers.get("authorization")})
        client = self.client_of(form, headers)  # first: a client assertion's jti is spent
        jkt = None
        if "dpop" in headers:
            claims, jkt = self.check_proof(headers["dpop"], "POST", f"{self.issuer}/token")
            if self.as_nonce is not None and claims.get("nonce") != self.as_nonce:
                raise Refused(400, "use_dpop_nonce", {"DPoP-Nonce": self.as_nonce})
        grant = form.get("grant_type")
        if grant == "authorization_code":
            verifier = form.get("code_verifier", "")
            if b64e(hashlib.sha256(verifier.encode()).digest()) != self._challenge:
                raise Refused(400, "invalid_grant")
            if self._dpop_jkt is not None and self._dpop_jkt != jkt:
                self.errors.append("dpop_jkt of the authorization request != the proof key")
                raise Refused(400, "invalid_dpop_proof")
        elif grant == "client_credentials":
            if client is None or (client not in self.client_keys and client not in self.secrets):
                raise Refused(401, "invalid_client")
        elif grant == JWT_BEARER:
            self.check_grant(form, client)
        elif grant == "refresh_token":
            # RFC 9449 §5: a public client's refresh token is bound to the proof key
            if form.get("refresh_token") not in self.refresh_tokens \
                    or self.refresh_tokens[form["refresh_token"]] != jkt:
                self.errors.append("refresh token unknown or presented with another key")
                raise Refused(400, "invalid_grant")
        else:
            raise Refused(400, "unsupported_grant_type")
        if form.get("resource") != self.url:
            self.errors.append(f"resource {form.get('resource')!r}")
            raise Refused(400, "invalid_target")
        token = f"at-{uuid.uuid4().hex}"
        bound = jkt if jkt is not None and not self.unbound else None
        self.tokens[token] = bound
        refresh = f"rt-{uuid.uuid4().hex}"
        self.refresh_tokens[refresh] = bound
        return {"access_token": token, "token_type": "DPoP" if bound else "Bearer",
                "expires_in": self.expires_in, "refresh_token": refresh}

    def exchange(self, form: dict[str, str], headers: dict[str, str]) -> dict[str, Any]:
        self.idp_log.append(form)
        want = {"grant_type": TOKEN_EXCHANGE, "requested_token_type": ID_JAG,
                "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                "client_id": self.idp_client, "audience": self.issuer, "resource": self.url}
        if any(form.get(k) != v for k, v in want.items()):
            self.errors.append(f"token exchange form {form}")
            raise Refused(400, "invalid_request")
        try:
            _, claims = verify(form["subject_token"], self.idp_key.public_key())
        except Exception as exc:
            raise Refused(400, "invalid_grant") from exc
        now = int(time.time())
        jag = sign_es256(self.idp_key, {
            "iss": self.idp_issuer, "sub": claims["sub"], "aud": form["audience"], "client_id": "mcp-client",
            "resource": form["resource"], "iat": now, "exp": now + 300, "jti": uuid.uuid4().hex,
        }, typ="oauth-id-jag+jwt")
        return {"access_token": jag, "issued_token_type": ID_JAG, "token_type": "N_A", "expires_in": 300}

    def gate(self, method: str, headers: dict[str, str]) -> None:
        """The resource server's check of one MCP request."""
        entry: dict[str, Any] = {"method": method, "authorization": headers.get("authorization"),
                                 "dpop": headers.get("dpop")}
        self.mcp_log.append(entry)
        meta = f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
        scheme, _, token = (headers.get("authorization") or "").partition(" ")
        if token not in self.tokens:
            raise Refused(401, "invalid_token", {"WWW-Authenticate": f"{self.challenge_scheme} {meta}"})
        jkt = self.tokens[token]
        if jkt is None:
            if scheme != "Bearer":
                self.errors.append(f"an unbound token sent as {scheme}")
                raise Refused(401, "invalid_token", {"WWW-Authenticate": f"Bearer {meta}"})
            return
        if scheme != "DPoP":
            self.errors.append(f"a DPoP-bound token sent as {scheme}")
            raise Refused(401, "invalid_token", {"WWW-Authenticate": f"DPoP {meta}"})
        claims, proof_jkt = self.check_proof(headers.get("dpop"), method, self.url, token)
        entry["proof"] = claims
        if proof_jkt != jkt:
            self.errors.append("proof key is not the token's key")
            raise Refused(401, "invalid_token")
        if self.rs_nonce is not None and claims.get("nonce") != self.rs_nonce:
            raise Refused(401, "use_dpop_nonce", {
                "WWW-Authenticate": f'DPoP error="use_dpop_nonce", {meta}', "DPoP-Nonce": self.rs_nonce})


async def _body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _send(send: Any, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    hs = [(b"content-type", b"application/json")] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hs})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


@asynccontextmanager
async def jwt_world() -> AsyncIterator[JwtWorld]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = m.Server("protected")

    @server.tool
    async def ping_tool() -> str:
        return "pong"

    w = JwtWorld(base)
    mcp = secure_app(server)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await mcp(scope, receive, send)
        path: str = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        if w.resource_server is not None and (path == "/mcp" or path.startswith("/.well-known/oauth-protected")):
            return await w.resource_server(scope, receive, send)
        try:
            if path == "/.well-known/oauth-protected-resource/mcp":
                return await _send(send, 200, {"resource": w.url, "authorization_servers": [w.issuer], **w.prm_extra})
            if path == "/.well-known/oauth-authorization-server/as":
                return await _send(send, 200, w.metadata())
            if path == "/idp/.well-known/openid-configuration":
                return await _send(send, 200, {
                    "issuer": w.idp_issuer, "authorization_endpoint": f"{w.idp_issuer}/authorize",
                    "token_endpoint": f"{w.idp_issuer}/token", "jwks_uri": f"{w.idp_issuer}/jwks"})
            if path == "/metadata/token":
                if headers.get("metadata-flavor") != "Google":
                    return await _send(send, 403, {"error": "no flavor"})
                return await _send(send, 200, {"token": w.workload_jwt()})
            if path == "/as/register":
                doc = json.loads(await _body(receive))
                return await _send(send, 201, {"client_id": "dcr-client", **doc})
            if path == "/as/authorize":
                w.authorize_log.append(query)
                w._challenge, w._dpop_jkt = query.get("code_challenge"), query.get("dpop_jkt")
                back = urlencode({"code": "the-code", "state": query["state"], "iss": w.issuer})
                return await _send(send, 302, {}, {"location": f"{query['redirect_uri']}?{back}"})
            if path in ("/as/token", "/idp/token"):
                form = {k: v[0] for k, v in parse_qs((await _body(receive)).decode()).items()}
                answer = w.token(form, headers) if path == "/as/token" else w.exchange(form, headers)
                return await _send(send, 200, answer)
            if path == "/mcp":
                w.gate(scope["method"], headers)
                extra = w.rotate_rs_nonce

                async def send_with_nonce(message: dict[str, Any]) -> None:
                    if extra is not None and message["type"] == "http.response.start":
                        message = {**message, "headers": [*message["headers"], (b"dpop-nonce", extra.encode())]}
                    await send(message)

                if extra is not None:
                    w.rs_nonce, w.rotate_rs_nonce = extra, None
                return await mcp(scope, receive, send_with_nonce)
        except Refused as refusal:
            return await _send(send, refusal.status, {"error": refusal.error}, refusal.headers)
        return await _send(send, 404, {"error": "not_found"})

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
