"""Grants without a user (issue 15): `private_key_jwt` client authentication (RFC 7523
§2.2), the JWT-bearer grant with a workload identity token (RFC 7523 §2.1), and
enterprise-managed authorization (RFC 8693 token exchange for an ID-JAG, then the
JWT-bearer grant), against the local authorization server and IdP of `_jwt_world`."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from _jwt_world import ASSERTION_TYPE, JWT_BEARER, JwtWorld, jwt_world, parts, public_key_of, verify

from nimblemcp.client import Client
from nimblemcp.client.auth import (
    ClientRegistration,
    EnterpriseManaged,
    JwtBearer,
    OAuth,
    PreRegistered,
    SigningKey,
    client_assertion,
    request_id_jag,
    token_from_env,
    token_from_file,
    token_from_url,
)
from nimblemcp.errors import AuthError


async def call(w: JwtWorld, auth: OAuth) -> None:
    async with Client(w.url, auth=auth, mode="modern") as client:
        result = await client.call_tool("ping_tool", {})
    assert result["content"][0]["text"] == "pong"


@pytest.mark.parametrize("alg", ["ES256", "ES512", "RS256", "PS256", "EdDSA"])
async def test_client_credentials_with_private_key_jwt(alg: str) -> None:
    async with jwt_world() as w:
        key = SigningKey.generate(alg)
        w.client_keys["agent-7"] = public_key_of(key.public_jwk)
        auth = OAuth(grant_type="client_credentials",
                     pre_registered=PreRegistered("agent-7", signing_key=key, issuer=w.issuer))
        await call(w, auth)
        assert w.errors == []
        (request,) = w.token_log
        form = request["form"]
        assert form["grant_type"] == "client_credentials" and form["client_assertion_type"] == ASSERTION_TYPE
        assert "client_secret" not in form and request["authorization"] is None
        header, claims = parts(form["client_assertion"])
        assert header["alg"] == alg
        assert claims["iss"] == claims["sub"] == "agent-7" and claims["aud"] == w.issuer
        assert 0 < claims["exp"] - time.time() <= 120 and claims["jti"]


async def test_a_client_assertion_on_its_own() -> None:
    key = SigningKey.generate("ES256")
    token = client_assertion(key, "me", "https://as.example", lifetime=30)
    header, claims = verify(token, public_key_of(key.public_jwk))
    assert header == {"alg": "ES256", "typ": "JWT"}
    assert (claims["iss"], claims["sub"], claims["aud"]) == ("me", "me", "https://as.example")
    assert claims["exp"] - claims["iat"] == 30
    assert parts(client_assertion(key, "me", "x"))[1]["jti"] != claims["jti"]


async def test_workload_identity_from_a_file_with_no_client_registration(tmp_path: Path) -> None:
    async with jwt_world() as w:
        token_file = tmp_path / "token"
        token_file.write_text(w.workload_jwt() + "\n")
        await call(w, OAuth(grant=JwtBearer(token_from_file(token_file))))
        assert w.errors == []
        (request,) = w.token_log
        form = request["form"]
        assert form["grant_type"] == JWT_BEARER and form["assertion"] == token_file.read_text().strip()
        assert form["resource"] == w.url
        assert "client_id" not in form and request["authorization"] is None  # RFC 7523 §3.1


async def test_workload_identity_from_the_environment_and_a_metadata_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with jwt_world() as w:
        monkeypatch.setenv("MCP_WORKLOAD_TOKEN", w.workload_jwt())
        pre = PreRegistered("workload-1", issuer=w.issuer)
        await call(w, OAuth(grant=JwtBearer(token_from_env("MCP_WORKLOAD_TOKEN")), pre_registered=pre))
        assert w.token_log[-1]["form"]["client_id"] == "workload-1"
        source = token_from_url(f"{w.base}/metadata/token", headers={"Metadata-Flavor": "Google"},
                                json_field="token")
        await call(w, OAuth(grant=JwtBearer(source)))
        assert w.errors == [] and len(w.token_log) == 2
        with pytest.raises(AuthError, match="403"):
            await call(w, OAuth(grant=JwtBearer(token_from_url(f"{w.base}/metadata/token"))))
        monkeypatch.delenv("MCP_WORKLOAD_TOKEN")
        with pytest.raises(AuthError, match="MCP_WORKLOAD_TOKEN"):
            await call(w, OAuth(grant=JwtBearer(token_from_env("MCP_WORKLOAD_TOKEN"))))
        assert len(w.token_log) == 2


@pytest.mark.parametrize("bad", ["audience", "expired"])
async def test_a_refused_workload_assertion_is_reported_once_without_retry(bad: str) -> None:
    async with jwt_world() as w:
        token = w.workload_jwt(audience="https://wrong.example") if bad == "audience" \
            else w.workload_jwt(expires_in=-60)
        with pytest.raises(AuthError, match="invalid_grant"):
            await call(w, OAuth(grant=JwtBearer(lambda: token)))
        assert [r["form"]["grant_type"] for r in w.token_log] == [JWT_BEARER]


@pytest.mark.parametrize("discover", [False, True])
async def test_enterprise_managed_authorization(discover: bool) -> None:
    async with jwt_world() as w:
        w.secrets["mcp-client"] = "mcp-secret"

        async def id_token() -> str:
            return w.id_token()

        where = {"idp_issuer": w.idp_issuer} if discover else {"idp_token_endpoint": f"{w.idp_issuer}/token"}
        grant = EnterpriseManaged(id_token=id_token, idp_client_id=w.idp_client, **where)
        await call(w, OAuth(grant=grant, pre_registered=PreRegistered("mcp-client", "mcp-secret", w.issuer)))
        assert w.errors == []
        (exchange,) = w.idp_log
        assert exchange["audience"] == w.issuer and exchange["resource"] == w.url
        (request,) = w.token_log
        form = request["form"]
        assert form["grant_type"] == JWT_BEARER
        header, claims = parts(form["assertion"])
        assert header["typ"] == "oauth-id-jag+jwt" and claims["sub"] == "alice@example.com"
        assert str(request["authorization"]).startswith("Basic ")  # the AS's client_secret_basic


async def test_enterprise_managed_needs_client_credentials_and_a_real_id_jag() -> None:
    async with jwt_world() as w:
        grant = EnterpriseManaged(id_token=w.id_token, idp_client_id=w.idp_client,
                                  idp_token_endpoint=f"{w.idp_issuer}/token")
        w.auth_methods = ["client_secret_basic"]
        with pytest.raises(AuthError):
            await call(w, OAuth(grant=grant))  # no pre-registered client: no DCR on the fly
        assert w.idp_log == [] and w.token_log == []
        with pytest.raises(ValueError):
            EnterpriseManaged(id_token=w.id_token, idp_client_id="x")
        async with httpx.AsyncClient() as http:
            with pytest.raises(AuthError, match="invalid_grant"):
                await request_id_jag(http, f"{w.idp_issuer}/token", "not-a-jwt", audience=w.issuer,
                                     resource=w.url, client=ClientRegistration(w.idp_client))
            jag = await request_id_jag(http, f"{w.idp_issuer}/token", w.id_token(), audience=w.issuer,
                                       resource=w.url, client=ClientRegistration(w.idp_client))
        assert parts(jag)[0]["typ"] == "oauth-id-jag+jwt"
