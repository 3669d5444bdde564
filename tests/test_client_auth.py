"""The OAuth client end to end (AUTH-C-01..16): our Client + `OAuth` against a mini
authorization server and our own MCP server as a resource server, all on 127.0.0.1
(see `_auth_peer`). These are the flows that must succeed; the refusals are in
`test_client_auth_checks.py`."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import sys
from pathlib import Path

import pytest
from _auth_peer import follow_redirect, world

from nimblemcp.client import Client
from nimblemcp.client.auth import MemoryTokenStore, OAuth, PreRegistered
from nimblemcp.transports.client.http import HttpStatusError

CONFORMANCE_CLIENT = Path(__file__).resolve().parents[1] / "examples" / "conformance" / "client.py"


async def whoami(url: str, auth: OAuth, mode: str = "auto") -> str:
    async with Client(url, auth=auth, mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("whoami", {})
    return str(result["content"][0]["text"])


@pytest.mark.parametrize("mode", ["modern", "legacy"])
async def test_first_401_runs_discovery_dcr_pkce_and_the_request_is_retried(mode: str) -> None:
    async with world() as w:
        auth = OAuth(on_authorize=follow_redirect)
        assert await whoami(w.url, auth, mode) == "alice"
        (reg,) = w.as1.seen("register")
        assert reg["application_type"] == "native"  # AUTH-C-07
        assert "refresh_token" in reg["grant_types"] and reg["token_endpoint_auth_method"] == "none"
        (query,) = w.as1.seen("authorize")
        assert query["code_challenge_method"] == "S256" and query["client_id"] == "as1-client-1"
        assert query["resource"] == w.resource  # AUTH-C-10, exactly as published
        assert query["scope"] == "mcp:use"  # the challenge's scope (AUTH-C-12)
        (token,) = w.as1.seen("token")
        assert token["resource"] == w.resource and token["client_id"] == "as1-client-1"
        digest = hashlib.sha256(token["code_verifier"].encode()).digest()
        assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == query["code_challenge"]
        assert w.mcp_auth_headers[0] is None
        assert set(w.mcp_auth_headers[1:]) == {"Bearer as1-token-1"}  # AUTH-C-14


async def test_pre_registered_credentials_use_client_secret_basic_and_skip_dcr() -> None:
    async with world() as w:
        w.as1.auth_methods, w.as1.dcr = ["client_secret_basic"], False
        pre = PreRegistered("my-app", "p@ss:word", issuer=w.as1.issuer)
        assert await whoami(w.url, OAuth(on_authorize=follow_redirect, pre_registered=pre)) == "alice"
        (token,) = w.as1.seen("token")
        assert token["basic"] == "my-app:p%40ss%3Aword"  # RFC 6749 §2.3.1 form-encoding
        assert "client_id" not in token and "client_secret" not in token
        assert w.as1.seen("register") == []


async def test_client_credentials_needs_no_user() -> None:
    async with world() as w:
        w.as1.auth_methods = ["client_secret_basic"]
        pre = PreRegistered("robot", "key")
        assert await whoami(w.url, OAuth(pre_registered=pre, grant_type="client_credentials")) == "alice"
        (token,) = w.as1.seen("token")
        assert token["grant_type"] == "client_credentials" and token["basic"] == "robot:key"
        assert token["scope"] == "mcp:use" and token["resource"] == w.resource
        assert w.as1.seen("authorize") == []


async def test_client_secret_post_when_that_is_all_the_server_takes() -> None:
    async with world() as w:
        w.as1.auth_methods = ["client_secret_post"]
        assert await whoami(w.url, OAuth(on_authorize=follow_redirect)) == "alice"
        (token,) = w.as1.seen("token")
        assert token["client_secret"] == "s3cret" and "basic" not in token


async def test_client_id_metadata_document_is_preferred_over_dcr() -> None:
    async with world() as w:
        w.as1.cimd = True
        doc = "https://app.example/oauth/client.json"
        assert await whoami(w.url, OAuth(on_authorize=follow_redirect, client_metadata_url=doc)) == "alice"
        assert w.as1.seen("authorize")[0]["client_id"] == doc
        assert w.as1.seen("register") == []


async def test_offline_access_is_asked_for_only_when_advertised() -> None:
    async with world() as w:
        w.as1.scopes_supported = ["mcp:use", "offline_access"]
        await whoami(w.url, OAuth(on_authorize=follow_redirect))
        assert w.as1.seen("authorize")[0]["scope"] == "mcp:use offline_access"
    async with world() as w:
        w.as1.scopes_supported = ["mcp:use"]
        await whoami(w.url, OAuth(on_authorize=follow_redirect))
        assert w.as1.seen("authorize")[0]["scope"] == "mcp:use"


async def test_step_up_on_403_asks_for_the_union_of_scopes() -> None:
    async with world() as w:
        w.step_up = True
        assert await whoami(w.url, OAuth(on_authorize=follow_redirect)) == "alice"
        scopes = [q.get("scope") for q in w.as1.seen("authorize")]
        assert scopes == ["mcp:use", "mcp:use mcp:write"]  # AUTH-C-13


async def test_step_up_gives_up_when_more_scope_is_never_granted() -> None:
    async with world() as w:
        w.step_up, w.as1.grantable = True, {"mcp:use"}
        with pytest.raises(HttpStatusError) as caught:
            await whoami(w.url, OAuth(on_authorize=follow_redirect))
        assert caught.value.status == 403
        assert len(w.as1.seen("authorize")) == 2  # one step-up, then no loop


async def test_an_expired_token_is_refreshed_before_use_without_a_new_authorization() -> None:
    async with world() as w:
        w.as1.refresh, w.as1.expires_in = True, 0
        auth = OAuth(on_authorize=follow_redirect)
        async with Client(w.url, auth=auth) as client:
            await client.call_tool("whoami", {})
            await client.call_tool("whoami", {})
        grants = [t["grant_type"] for t in w.as1.seen("token")]
        assert grants[0] == "authorization_code" and "refresh_token" in grants
        refreshes = [t for t in w.as1.seen("token") if t["grant_type"] == "refresh_token"]
        assert all(t["resource"] == w.resource for t in refreshes)
        assert len(w.as1.seen("authorize")) == 1


async def test_a_shared_store_saves_a_second_authorization() -> None:
    async with world() as w:
        store = MemoryTokenStore()
        await whoami(w.url, OAuth(on_authorize=follow_redirect, store=store))
        await whoami(w.url, OAuth(store=store))  # the default on_authorize would raise
        assert len(w.as1.seen("authorize")) == 1
        assert (w.as1.issuer, w.resource) in store.tokens and w.as1.issuer in store.clients


async def test_a_new_authorization_server_means_a_new_registration() -> None:
    """AUTH-C-02/08: nothing issued by as1 is offered to as2."""
    async with world() as w:
        auth = OAuth(on_authorize=follow_redirect)
        async with Client(w.url, auth=auth) as client:
            await client.call_tool("whoami", {})
            w.current = "/as2"  # PRM now names as2; as1 tokens are refused
            await client.call_tool("whoami", {})
        assert len(w.as2.seen("register")) == 1
        assert [q["client_id"] for q in w.as2.seen("authorize")] == ["as2-client-1"]
        assert all(t["client_id"] == "as2-client-1" for t in w.as2.seen("token"))
        assert w.mcp_auth_headers[-1] == "Bearer as2-token-1"


async def test_the_conformance_client_runs_the_flow_headless() -> None:
    async with world() as w:
        w.as1.scopes_supported = ["mcp:use"]
        env = {**os.environ, "MCP_CONFORMANCE_SCENARIO": "auth/metadata-default",
               "MCP_CONFORMANCE_PROTOCOL_VERSION": "2026-07-28"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(CONFORMANCE_CLIENT), w.url, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert len(w.as1.seen("token")) == 1
        assert "Bearer as1-token-1" in w.mcp_auth_headers
