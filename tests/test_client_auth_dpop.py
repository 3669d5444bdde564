"""DPoP on the client (RFC 9449, issue 15): our Client + `OAuth(dpop=...)` against a
local authorization server and resource server that check every proof with an
independent JWS implementation (`_jwt_world`)."""

from __future__ import annotations

import hashlib
import time

import pytest
from _auth_peer import follow_redirect
from _jwt_world import JwtWorld, b64e, jwt_world, parts, public_key_of, thumbprint, verify
from cryptography.hazmat.primitives.asymmetric import ec

from nimblemcp.client import Client
from nimblemcp.client.auth import DPoP, OAuth, PreRegistered, SigningKey
from nimblemcp.errors import AuthError


async def call(w: JwtWorld, auth: OAuth, mode: str = "auto", times: int = 1) -> None:
    async with Client(w.url, auth=auth, mode=mode) as client:  # type: ignore[arg-type]
        for _ in range(times):
            result = await client.call_tool("ping_tool", {})
            assert result["content"][0]["text"] == "pong"


def authorized(w: JwtWorld) -> list[dict[str, object]]:
    return [e for e in w.mcp_log if e["authorization"]]


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_authorization_code_flow_gets_a_dpop_bound_token_and_proves_possession(mode: str) -> None:
    async with jwt_world() as w:
        w.dpop_algs = ["ES256"]
        w.auth_methods = ["none"]
        dpop = DPoP()
        await call(w, OAuth(on_authorize=follow_redirect, dpop=dpop), mode, times=2)
        assert w.errors == []
        # RFC 9449 §10: the code is bound to the key's thumbprint.
        (query,) = w.authorize_log
        assert query["dpop_jkt"] == dpop.thumbprint() == thumbprint(dpop.key.public_jwk)
        (token_request,) = w.token_log
        header, claims = parts(str(token_request["dpop"]))
        assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256" and "d" not in header["jwk"]
        assert claims["htm"] == "POST" and claims["htu"] == f"{w.issuer}/token" and "ath" not in claims
        # every MCP request: the DPoP scheme, a fresh proof bound to method, URL and token
        sent = authorized(w)
        assert len(sent) >= 3
        token = str(sent[0]["authorization"]).removeprefix("DPoP ")
        assert {e["authorization"] for e in sent} == {f"DPoP {token}"}
        ath = b64e(hashlib.sha256(token.encode()).digest())
        jtis = set()
        for entry in sent:
            proof = entry["proof"]
            assert isinstance(proof, dict)
            assert proof["ath"] == ath and proof["htu"] == w.url and proof["htm"] == entry["method"]
            jtis.add(proof["jti"])
        assert len(jtis) == len(sent)
        if mode == "legacy":  # the session's GET stream and DELETE carry their own method
            assert {"POST", "GET"} <= {e["method"] for e in sent}


async def test_nonces_from_the_authorization_server_and_the_resource_server_are_honoured() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods = ["ES256"], ["none"]
        w.as_nonce, w.rs_nonce = "as-nonce-1", "rs-nonce-1"
        await call(w, OAuth(on_authorize=follow_redirect, dpop=True), "modern", times=3)
        assert w.errors == []
        # RFC 9449 §8: one refused token request without the nonce, then one with it
        first, second = w.token_log
        assert "nonce" not in parts(str(first["dpop"]))[1]
        assert parts(str(second["dpop"]))[1]["nonce"] == "as-nonce-1"
        # §9: the resource server's nonce is never sent to the AS, and vice versa
        sent = authorized(w)
        assert "nonce" not in sent[0]["proof"]  # type: ignore[operator]
        assert all(e["proof"]["nonce"] == "rs-nonce-1" for e in sent[1:])  # type: ignore[index]
        # once known, the nonce is used at once: exactly one use_dpop_nonce round trip
        assert len(sent) >= 4


async def test_a_nonce_rotated_on_a_success_response_is_used_next() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods, w.rs_nonce = ["ES256"], ["none"], "n1"
        auth = OAuth(on_authorize=follow_redirect, dpop=True)
        async with Client(w.url, auth=auth, mode="modern") as client:
            await client.call_tool("ping_tool", {})
            w.rotate_rs_nonce = "n2"
            await client.call_tool("ping_tool", {})  # its response announces n2
            before = len(w.mcp_log)
            await client.call_tool("ping_tool", {})
        assert w.errors == []
        after = w.mcp_log[before:]
        assert len(after) == 1 and after[0]["proof"]["nonce"] == "n2"  # type: ignore[index]


async def test_an_expired_dpop_token_is_refreshed_with_a_proof_from_the_same_key() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods, w.as_nonce = ["ES256"], ["none"], "as-n"
        w.expires_in = 5  # inside the client's 30 s leeway: every request refreshes first
        await call(w, OAuth(on_authorize=follow_redirect, dpop=True), "modern", times=2)
        assert w.errors == []
        grants = [r["form"]["grant_type"] for r in w.token_log]
        assert grants[:2] == ["authorization_code"] * 2 and "refresh_token" in grants[2:]
        assert len(w.authorize_log) == 1
        keys = {thumbprint(parts(str(r["dpop"]))[0]["jwk"]) for r in w.token_log}
        assert len(keys) == 1  # the authorization code, the refreshes: one proof key
        refreshes = [r for r in w.token_log if r["form"]["grant_type"] == "refresh_token"]
        assert all(parts(str(r["dpop"]))[1]["nonce"] == "as-n" for r in refreshes)


async def test_client_credentials_with_an_application_eddsa_dpop_key() -> None:
    async with jwt_world() as w:
        w.dpop_algs = ["ES256", "EdDSA"]
        key = SigningKey.generate("EdDSA")
        w.secrets["machine"] = "s3cret"
        auth = OAuth(grant_type="client_credentials", dpop=DPoP(key),
                     pre_registered=PreRegistered("machine", "s3cret"))
        await call(w, auth, "modern")
        assert w.errors == []
        (token_request,) = w.token_log
        header, _ = parts(str(token_request["dpop"]))
        assert header["alg"] == "EdDSA" and thumbprint(header["jwk"]) == key.thumbprint()
        assert all(str(e["authorization"]).startswith("DPoP ") for e in authorized(w))


async def test_the_nonce_retry_of_a_token_request_signs_a_new_client_assertion() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.as_nonce = ["ES256"], "as-n"
        key = SigningKey.generate("ES256")
        w.client_keys["agent"] = public_key_of(key.public_jwk)
        auth = OAuth(grant_type="client_credentials", dpop=True,
                     pre_registered=PreRegistered("agent", signing_key=key))
        await call(w, auth, "modern")
        assert w.errors == []
        first, second = (r["form"]["client_assertion"] for r in w.token_log)
        assert parts(first)[1]["jti"] != parts(second)[1]["jti"]
        assert parts(str(w.token_log[1]["dpop"]))[1]["nonce"] == "as-n"


async def test_an_unbound_bearer_answer_is_used_as_bearer() -> None:
    """RFC 9449 §5: an AS that ignores the proof issues a Bearer token."""
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods, w.unbound = ["ES256"], ["none"], True
        await call(w, OAuth(on_authorize=follow_redirect, dpop=True), "modern")
        assert w.errors == []
        assert w.token_log[0]["dpop"] is not None
        sent = authorized(w)
        assert sent and all(str(e["authorization"]).startswith("Bearer ") and e["dpop"] is None for e in sent)


async def test_dpop_tokens_are_refused_when_dpop_was_not_requested() -> None:
    from nimblemcp.client.auth import TokenSet

    body = {"access_token": "t", "token_type": "DPoP"}
    with pytest.raises(ValueError, match="token_type"):
        TokenSet.from_response(body, ())
    assert TokenSet.from_response(body, (), dpop=True).dpop_bound


async def test_an_authorization_server_without_our_algorithm_is_refused() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods = ["RS256"], ["none"]
        with pytest.raises(AuthError, match="DPoP"):
            await call(w, OAuth(on_authorize=follow_redirect, dpop=True), "modern")
        assert w.token_log == [] and w.authorize_log == []


async def test_a_resource_that_requires_dpop_is_not_sent_bearer_tokens() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods = ["ES256"], ["none"]
        w.prm_extra = {"dpop_bound_access_tokens_required": True}
        with pytest.raises(AuthError, match="dpop=True"):
            await call(w, OAuth(on_authorize=follow_redirect), "modern")
        assert w.token_log == [] and w.authorize_log == []
        await call(w, OAuth(on_authorize=follow_redirect, dpop=True), "modern")
        assert w.errors == [] and w.token_log[0]["dpop"] is not None


async def test_a_dpop_challenge_is_understood_for_discovery() -> None:
    async with jwt_world() as w:
        w.dpop_algs, w.auth_methods, w.challenge_scheme = ["ES256"], ["none"], "DPoP"
        await call(w, OAuth(on_authorize=follow_redirect, dpop=True), "modern")
        assert w.errors == [] and w.mcp_log[0]["authorization"] is None


def test_proofs_on_their_own() -> None:
    dpop = DPoP(alg="ES384")
    proof = dpop.proof("get", "https://Api.Example.com/mcp?x=1#frag", access_token="tok", nonce="n")
    header, claims = verify(proof, public_key_of(dpop.key.public_jwk))
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES384"
    assert claims["htm"] == "GET" and claims["htu"] == "https://api.example.com/mcp"
    assert claims["nonce"] == "n" and claims["ath"] == b64e(hashlib.sha256(b"tok").digest())
    assert abs(claims["iat"] - time.time()) < 5
    assert dpop.proof("POST", "https://a.example/t") != dpop.proof("POST", "https://a.example/t")
    # nonces are kept per origin, and apart for token and resource requests
    assert dpop.observe("https://as.example/token", {"dpop-nonce": "A"})
    assert not dpop.observe("https://as.example/other", {"dpop-nonce": "A"})
    assert dpop.nonce("https://as.example/x") == "A" and dpop.nonce("https://rs.example/mcp") is None
    assert "nonce" not in parts(dpop.proof("POST", "https://rs.example/mcp"))[1]
    assert "nonce" not in parts(dpop.proof("POST", "https://as.example/mcp", access_token="t"))[1]
    dpop.observe("https://as.example/mcp", {"DPoP-Nonce": "R"}, resource=True)
    assert parts(dpop.proof("POST", "https://as.example/mcp", access_token="t"))[1]["nonce"] == "R"
    assert parts(dpop.proof("POST", "https://as.example/token"))[1]["nonce"] == "A"


def test_keys_from_pem_and_rfc7638_thumbprint() -> None:
    from cryptography.hazmat.primitives import serialization

    raw = ec.generate_private_key(ec.SECP256R1())
    pem = raw.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    key = SigningKey.from_pem(pem.decode())
    assert key.alg == "ES256" and key.public_jwk["crv"] == "P-256"
    with pytest.raises(AuthError):
        SigningKey.from_pem(pem, "RS256")
    with pytest.raises(AuthError):
        SigningKey.from_pem("not a key")
    # RFC 7638 §3.1's example key and thumbprint
    from nimblemcp.client.auth._jose import jwk_thumbprint

    example = {"kty": "RSA", "e": "AQAB", "alg": "RS256", "kid": "2011-04-29", "n": (
        "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiF"
        "V4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnY"
        "b9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0L"
        "s1jF44-csFCur-kEgU8awapJzKnqDKgw")}
    assert jwk_thumbprint(example) == "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
