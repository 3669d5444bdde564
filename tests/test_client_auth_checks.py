"""What the OAuth client must refuse (AUTH-C-04/09/10/11, TRAP-37/38), and its parsers.

The refusals run against the real mini authorization server of `_auth_peer`, each
made to misbehave one way; every test also checks that nothing went further than it
should (no authorization request, or no token request: the code is never used).
"""

from __future__ import annotations

import pytest
from _auth_peer import follow_redirect, world

from nimblemcp.client import Client
from nimblemcp.client.auth import (
    AuthError,
    OAuth,
    choose_scopes,
    metadata_urls,
    parse_challenges,
    resource_matches,
)


async def call(url: str, auth: OAuth) -> None:
    async with Client(url, auth=auth, mode="modern") as client:
        await client.call_tool("whoami", {})


@pytest.mark.parametrize(("advertise", "mode", "ok"), [
    (True, "correct", True),
    (None, "omit", True),  # neither advertised nor sent: proceed
    (True, "omit", False),  # advertised but missing
    (True, "wrong", False),
    (None, "wrong", False),  # compared even when not advertised (TRAP-37)
    (True, "slash", False),  # no normalization: a trailing slash is a mismatch
])
async def test_rfc9207_iss_is_checked_before_the_code_is_used(
    advertise: bool | None, mode: str, ok: bool
) -> None:
    async with world() as w:
        w.as1.advertise_iss, w.as1.iss_mode = advertise, mode
        if ok:
            await call(w.url, OAuth(on_authorize=follow_redirect))
            assert len(w.as1.seen("token")) == 1
        else:
            with pytest.raises(AuthError, match="iss"):
                await call(w.url, OAuth(on_authorize=follow_redirect))
            assert len(w.as1.seen("authorize")) == 1 and w.as1.seen("token") == []


async def test_metadata_with_another_issuer_is_not_used() -> None:
    async with world() as w:
        w.as1.issuer_claim = "https://attacker.example"
        with pytest.raises(AuthError, match="attacker"):
            await call(w.url, OAuth(on_authorize=follow_redirect))
        assert w.as1.log == []  # no registration, authorization or token request


async def test_no_pkce_advertised_means_no_authorization() -> None:
    async with world() as w:
        w.as1.pkce_methods = None
        with pytest.raises(AuthError, match="code_challenge_methods_supported"):
            await call(w.url, OAuth(on_authorize=follow_redirect))
        assert w.as1.seen("authorize") == []
    async with world() as w:
        w.as1.pkce_methods = ["plain"]
        with pytest.raises(AuthError, match="S256"):
            await call(w.url, OAuth(on_authorize=follow_redirect))


async def test_metadata_for_another_resource_stops_the_flow() -> None:
    async with world() as w:
        w.prm_override = {"resource": "https://evil.example/mcp",
                          "authorization_servers": [w.as1.issuer]}
        with pytest.raises(AuthError, match="evil"):
            await call(w.url, OAuth(on_authorize=follow_redirect))
        assert w.as1.log == []


async def test_without_a_callback_the_error_names_the_authorization_url() -> None:
    async with world() as w:
        with pytest.raises(AuthError, match="on_authorize") as caught:
            await call(w.url, OAuth())
        assert f"{w.as1.issuer}/authorize?" in str(caught.value)
        assert w.as1.seen("token") == []


async def test_a_forged_state_is_refused() -> None:
    async with world() as w:
        async def forge(url: str) -> str:
            landed = await follow_redirect(url)
            return landed.replace("state=", "state=x")
        with pytest.raises(AuthError, match="state"):
            await call(w.url, OAuth(on_authorize=forge))
        assert w.as1.seen("token") == []


async def test_a_denied_authorization_surfaces_the_error() -> None:
    async with world() as w:
        def deny(url: str) -> str:  # a sync callback works too
            state = url.split("state=")[1].split("&")[0]
            return f"http://localhost:8765/callback?error=access_denied&state={state}&iss={w.as1.issuer}"
        with pytest.raises(AuthError, match="access_denied"):
            await call(w.url, OAuth(on_authorize=deny))


def test_www_authenticate_parsing() -> None:
    header = ('DPoP algs="ES256", Bearer error="insufficient_scope", scope="a b",'
              ' resource_metadata="https://x/.well-known/oauth-protected-resource/mcp",'
              ' error_description="say \\"please\\""')
    parsed = parse_challenges(header)
    assert parsed["dpop"] == {"algs": "ES256"}
    bearer = parsed["bearer"]
    assert bearer["scope"] == "a b" and bearer["error"] == "insufficient_scope"
    assert bearer["resource_metadata"].endswith("/oauth-protected-resource/mcp")
    assert bearer["error_description"] == 'say "please"'
    assert parse_challenges("Bearer") == {"bearer": {}}
    assert parse_challenges("bearer realm=x,scope=y") == {"bearer": {"realm": "x", "scope": "y"}}


def test_metadata_url_order() -> None:
    assert metadata_urls("https://auth.ex.com/tenant1") == [
        "https://auth.ex.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.ex.com/.well-known/openid-configuration/tenant1",
        "https://auth.ex.com/tenant1/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://auth.ex.com") == [
        "https://auth.ex.com/.well-known/oauth-authorization-server",
        "https://auth.ex.com/.well-known/openid-configuration",
    ]


def test_resource_matching() -> None:
    assert resource_matches("http://h:1/mcp", "http://h:1/mcp")
    assert resource_matches("http://h:1/mcp", "http://h:1")  # a parent resource
    assert resource_matches("http://h:1/mcp", "HTTP://H:1/mcp/")
    assert not resource_matches("http://h:1/mcp", "http://h:1/mc")
    assert not resource_matches("http://h:1/mcp", "http://h:2/mcp")
    assert not resource_matches("http://h:1/mcp", "https://evil.example/mcp")
    assert not resource_matches("http://h:1/mcp", "http://h:1/mcp#frag")


def test_scope_selection() -> None:
    meta = {"scopes_supported": ["a", "offline_access"]}
    assert choose_scopes(["c"], ["a", "b"], {}) == ("c",)  # the challenge wins
    assert choose_scopes([], ["a", "b"], {}) == ("a", "b")
    assert choose_scopes([], None, meta) == ()  # nothing known: omit scope
    assert choose_scopes([], ["a"], meta) == ("a", "offline_access")
    assert choose_scopes([], ["a"], meta, offline_access=False) == ("a",)
    assert choose_scopes(["w"], ["a"], {}, previous=("r",)) == ("r", "w")  # step-up union
