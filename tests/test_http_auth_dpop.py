"""DPoP at the resource server (RFC 9449 §4.3, §7, §9; issue 15): `BearerAuth(dpop=...)`
in front of a real nimblemcp server, under uvicorn, with the local authorization
server of `_jwt_world` issuing DPoP-bound tokens. Interop: our DPoP client
(`OAuth(dpop=...)`) against our DPoP resource server, both eras, with and without
server nonces. Refusals: a bound token as Bearer, no proof, a proof for another
method / URL / token / key, a stale `iat`, a replayed `jti`, a wrong `typ`, a private
key in the header, a bad signature."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from _auth_peer import follow_redirect
from _jwt_world import JwtWorld, jwt_world

import nimblemcp as m
from nimblemcp.client import Client
from nimblemcp.client.auth import DPoP, OAuth, SigningKey
from nimblemcp.transports.auth.bearer import AccessToken, BearerAuth, DPoPVerifier
from nimblemcp.transports.http.app import asgi_app


class WorldTokens:
    """The TokenVerifier of the world's tokens: the subject and the `cnf.jkt` binding."""

    def __init__(self, w: JwtWorld) -> None:
        self.w = w

    async def verify(self, token: str) -> AccessToken | None:
        if token not in self.w.tokens:
            return None
        return AccessToken("client", audience=(self.w.url,), claims={"cnf": {"jkt": self.w.tokens[token]}}
                           if self.w.tokens[token] else {})


def protect(w: JwtWorld, **dpop: Any) -> DPoPVerifier:
    server = m.Server("dpop-protected")

    @server.tool
    def whoami(ctx: m.Context) -> str:
        return str(ctx.subject)

    verifier = DPoPVerifier(**dpop)
    w.resource_server = BearerAuth(asgi_app(server), verifier=WorldTokens(w), resource=w.url,
                                   authorization_servers=[w.issuer], dpop=verifier)
    w.dpop_algs, w.auth_methods = ["ES256"], ["none"]
    return verifier


@pytest.mark.parametrize("mode", ["modern", "legacy"])
@pytest.mark.parametrize("nonce", [False, True])
async def test_our_dpop_client_against_our_dpop_resource_server(mode: str, nonce: bool) -> None:
    async with jwt_world() as w:
        protect(w, require_nonce=nonce)
        dpop = DPoP()
        async with Client(w.url, auth=OAuth(on_authorize=follow_redirect, dpop=dpop), mode=mode) as client:
            for _ in range(3):
                result = await client.call_tool("whoami", {})
                assert result["content"][0]["text"] == "client"
        assert w.errors == []
        assert list(w.tokens.values()) == [dpop.thumbprint()]  # the token is bound to our key
        if nonce:
            assert dpop.nonce(w.url, resource=True) is not None


async def test_protected_resource_metadata_names_dpop_algorithms() -> None:
    async with jwt_world() as w:
        protect(w, algorithms=["ES256", "EdDSA"])
        async with httpx.AsyncClient() as http:
            doc = (await http.get(f"{w.base}/.well-known/oauth-protected-resource/mcp")).json()
            assert doc["dpop_signing_alg_values_supported"] == ["ES256", "EdDSA"]
            r = await http.post(w.url, json={})
            assert r.status_code == 401
            challenges = r.headers.get_list("www-authenticate")
            assert [c.split(" ")[0] for c in challenges] == ["Bearer", "DPoP"]
            assert 'algs="ES256 EdDSA"' in challenges[1]


BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "whoami", "arguments": {},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}}}}
HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
           "mcp-method": "tools/call", "mcp-name": "whoami"}


async def bound_token(w: JwtWorld, key: DPoP) -> str:
    token = "at-fixed"
    w.tokens[token] = key.thumbprint()
    return token


async def post(w: JwtWorld, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(w.url, json=BODY, headers={**HEADERS, **headers})


def error_of(r: httpx.Response) -> str:
    return str(r.json()["error"])


async def test_proofs_are_checked_and_refused_with_the_right_error() -> None:
    async with jwt_world() as w:
        protect(w)
        key = DPoP()
        token = await bound_token(w, key)
        good = key.proof("POST", w.url, access_token=token)
        assert (await post(w, {"authorization": f"DPoP {token}", "dpop": good})).status_code == 200
        cases: dict[str, dict[str, str]] = {
            "replayed jti": {"authorization": f"DPoP {token}", "dpop": good},
            "bound token as Bearer": {"authorization": f"Bearer {token}"},
            "no proof": {"authorization": f"DPoP {token}"},
            "another method": {"authorization": f"DPoP {token}", "dpop": key.proof("GET", w.url, access_token=token)},
            "another URL": {"authorization": f"DPoP {token}",
                            "dpop": key.proof("POST", w.base + "/other", access_token=token)},
            "another token": {"authorization": f"DPoP {token}", "dpop": key.proof("POST", w.url, access_token="x")},
            "no ath": {"authorization": f"DPoP {token}", "dpop": key.proof("POST", w.url)},
            "another key": {"authorization": f"DPoP {token}", "dpop": DPoP().proof("POST", w.url, access_token=token)},
        }
        for name, headers in cases.items():
            r = await post(w, headers)
            assert r.status_code == 401, name
            assert error_of(r) in ("invalid_dpop_proof", "invalid_token"), name
            assert any(c.startswith("DPoP ") and "error=" in c for c in r.headers.get_list("www-authenticate")), name

        def forged(claims: dict[str, Any], header: dict[str, Any] | None = None, signer: SigningKey | None = None) -> str:
            base = {"jti": f"jti-{time.time_ns()}", "htm": "POST", "htu": w.url, "iat": int(time.time()),
                    "ath": _ath(token)}
            head = {"typ": "dpop+jwt", "jwk": key.key.public_jwk, **(header or {})}
            return (signer or key.key).sign_jwt({**base, **claims}, head)

        refused = {
            "stale iat": forged({"iat": int(time.time()) - 3600}),
            "future iat": forged({"iat": int(time.time()) + 3600}),
            "wrong typ": forged({}, {"typ": "JWT"}),
            "private key in jwk": forged({}, {"jwk": {**key.key.public_jwk, "d": "AAAA"}}),
            "signed by another key": forged({}, signer=SigningKey.generate()),
        }
        for name, proof in refused.items():
            r = await post(w, {"authorization": f"DPoP {token}", "dpop": proof})
            assert (r.status_code, error_of(r)) == (401, "invalid_dpop_proof"), name
        # an unbound (Bearer) token keeps working beside DPoP
        w.tokens["plain"] = None
        assert (await post(w, {"authorization": "Bearer plain"})).status_code == 200


def _ath(token: str) -> str:
    from nimblemcp.client.auth._dpop import access_token_hash

    return access_token_hash(token)


async def test_nonce_is_demanded_then_accepted_and_jti_replay_is_shared_through_the_store() -> None:
    from nimblemcp.backends.memory import MemoryStore

    async with jwt_world() as w:
        store = MemoryStore()
        verifier = protect(w, require_nonce=True, store=store, nonce_secret=b"s" * 32)
        key = DPoP()
        token = await bound_token(w, key)
        r = await post(w, {"authorization": f"DPoP {token}", "dpop": key.proof("POST", w.url, access_token=token)})
        assert (r.status_code, error_of(r)) == (401, "use_dpop_nonce")
        nonce = r.headers["dpop-nonce"]
        assert 'error="use_dpop_nonce"' in r.headers.get_list("www-authenticate")[1]
        proof = key.proof("POST", w.url, access_token=token, nonce=nonce)
        assert (await post(w, {"authorization": f"DPoP {token}", "dpop": proof})).status_code == 200
        # a second instance with the same store and secret: accepts the nonce, refuses the replay
        twin = DPoPVerifier(require_nonce=True, store=store, nonce_secret=b"s" * 32)
        assert twin.current_nonce() == verifier.current_nonce()
        from nimblemcp.errors import InvalidDPoPProof

        with pytest.raises(InvalidDPoPProof, match="already used"):
            await twin.verify(proof, method="POST", urls=[w.url], access_token=token)
        fresh = key.proof("POST", w.url, access_token=token, nonce=nonce)
        assert (await twin.verify(fresh, method="POST", urls=[w.url], access_token=token))[0] == key.thumbprint()


async def test_an_unknown_token_under_the_dpop_scheme_gets_the_error_on_the_dpop_challenge() -> None:
    async with jwt_world() as w:
        protect(w)
        key = DPoP()
        r = await post(w, {"authorization": "DPoP nope", "dpop": key.proof("POST", w.url, access_token="nope")})
        assert (r.status_code, error_of(r)) == (401, "invalid_token")
        bearer, dpop = r.headers.get_list("www-authenticate")
        assert "error=" not in bearer and 'error="invalid_token"' in dpop


async def test_a_nonce_of_the_previous_period_is_accepted_and_a_fresh_one_handed_out() -> None:
    import asyncio

    async with jwt_world() as w:
        verifier = protect(w, require_nonce=True, nonce_period=2.0)
        key = DPoP()
        token = await bound_token(w, key)
        old = verifier.current_nonce()
        while verifier.current_nonce() == old:  # the period turns
            await asyncio.sleep(0.05)
        r = await post(w, {"authorization": f"DPoP {token}",
                           "dpop": key.proof("POST", w.url, access_token=token, nonce=old)})
        assert r.status_code == 200
        assert r.headers["dpop-nonce"] == verifier.current_nonce() != old
