"""Issue 33: OAuth from the command line, end to end against a real authorization
server (the npm `oidc-provider`, `tests/_oidc_provider.py`) and a nimblemcp server that
takes its JWT access tokens (`auth=` with a `JwtVerifier`), every command a real
`nimblemcp` process.

- `nimblemcp login URL` runs the authorization-code flow with PKCE through the
  "browser" (`BROWSER` names a program that signs in on the provider's login page) and
  a loopback redirect, and keeps the tokens per server in the user's config folder,
  mode 0600; `nimblemcp tools URL` then uses the cached token and, once it has expired
  (the provider's access tokens last `TTL` seconds), refreshes it and writes the new
  ones back; `nimblemcp logout URL` forgets them.
- A token given on the command line (`--bearer`, `NIMBLEMCP_BEARER`, an Authorization
  `--header`) that the server refuses, or no token at all, is answered in CLI words
  (which flag or command helps); a 403 names the scope from `WWW-Authenticate`.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests._oidc_provider import OidcProvider, browser_command, oidc_provider
from tests._peers import free_port, wait_for_port
from tests._waits import wait_until

TTL = 20  # seconds an access token lasts at the provider

NOTES = '''
import os
import nimblemcp as m
from nimblemcp.transports.auth.verifiers import JwtVerifier

ISSUER, RESOURCE, PORT = os.environ["ISSUER"], os.environ["RESOURCE"], int(os.environ["PORT"])
server = m.Server("notes")

@server.tool
def whoami(ctx: m.Context) -> str:
    """Who the token says you are."""
    return ctx.principal.subject if ctx.principal else "nobody"

@server.tool
def erase() -> str:
    """Erase every note (needs notes:write)."""
    return "erased"

server.require_scopes(["notes:write"], tool="erase")
verifier = JwtVerifier(issuer=ISSUER, audience=RESOURCE, jwks_uri=ISSUER + "/jwks", leeway=0)
server.run("http", port=PORT, auth={"verifier": verifier, "resource": RESOURCE,
                                    "authorization_servers": [ISSUER], "scopes_supported": ["notes:read"]})
'''


@dataclass
class World:
    provider: OidcProvider
    url: str
    folder: Path

    def env(self, home: Path, **more: str) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if k not in ("NIMBLEMCP_BEARER", "XDG_CONFIG_HOME")}
        return {**clean, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
                "BROWSER": str(browser_command(self.folder)), **more}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("oauth")
    (folder / "notes.py").write_text(NOTES)
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    with oidc_provider({resource: {"scope": "notes:read notes:write", "ttl": TTL}}) as provider:
        env = {**os.environ, "ISSUER": provider.issuer, "RESOURCE": resource, "PORT": str(port)}
        server = subprocess.Popen([sys.executable, str(folder / "notes.py")], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(server, port, "the notes server")
            yield World(provider, resource, folder)
        finally:
            server.terminate()
            server.wait(timeout=30)


def nimblemcp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nimblemcp", *args], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)


def cache_file(home: Path) -> Path:
    (found,) = (home / "config" / "nimblemcp" / "tokens").glob("*.json")
    return found


def cached(home: Path) -> dict[str, object]:
    entry: dict[str, object] = json.loads(cache_file(home).read_text())["tokens"][0]
    return entry


def refused_at_server(world: World, token: str) -> bool:
    """Whether the MCP server refuses `token` now (401): it has really expired."""
    answer = httpx.post(world.url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json, "
                        "text/event-stream", "Mcp-Method": "server/discover"},
                        json={"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}, timeout=30)
    return answer.status_code == 401


def test_login_then_tools_uses_then_refreshes_the_cached_token(world: World, tmp_path: Path) -> None:
    env = world.env(tmp_path)
    logged = nimblemcp(env, "login", world.url)
    assert logged.returncode == 0, logged.stderr
    assert f"logged in to {world.url}" in logged.stderr and "then it is refreshed" in logged.stderr
    path = cache_file(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    first = cached(tmp_path)
    codes = len(world.provider.grants("authorization_code"))
    refreshes = len(world.provider.grants("refresh_token"))
    assert codes >= 1

    tools = nimblemcp(env, "tools", world.url)  # the cached token, as it is
    assert tools.returncode == 0, tools.stderr
    # erase needs notes:write, which this login did not ask for: lists show only what the
    # caller's scopes allow (issue 35); the call is still refused with its scope named below
    assert {line.split()[0] for line in tools.stdout.splitlines()[2:]} == {"whoami"}
    assert cached(tmp_path)["access_token"] == first["access_token"]
    assert len(world.provider.grants("refresh_token")) == refreshes

    # Once the provider's token has expired for real, the next command refreshes it.
    wait_until(lambda: refused_at_server(world, str(first["access_token"])), "the access token expiring",
               hang=TTL + 30)
    who = nimblemcp(env, "call", "whoami", world.url)
    assert who.returncode == 0, who.stderr
    assert who.stdout == "alice\n"
    after = cached(tmp_path)
    assert after["access_token"] != first["access_token"]
    assert after["refresh_token"] != first["refresh_token"]  # rotated, and kept
    assert len(world.provider.grants("refresh_token")) == refreshes + 1
    assert len(world.provider.grants("authorization_code")) == codes  # no new login
    assert stat.S_IMODE(cache_file(tmp_path).stat().st_mode) == 0o600

    out = nimblemcp(env, "logout", world.url)
    assert out.returncode == 0 and "logged out" in out.stderr
    assert not list((tmp_path / "config" / "nimblemcp" / "tokens").glob("*.json"))
    again = nimblemcp(env, "tools", world.url)
    assert again.returncode == 1
    assert f"needs authorization (HTTP 401). Log in with `nimblemcp login {world.url}`" in again.stderr


def test_a_missing_scope_is_named_and_login_can_ask_for_it(world: World, tmp_path: Path) -> None:
    env = world.env(tmp_path)
    assert nimblemcp(env, "login", world.url).returncode == 0
    denied = nimblemcp(env, "call", "erase", world.url)
    assert denied.returncode == 1
    assert f"log in again: nimblemcp login {world.url} --scope '" in denied.stderr
    assert "notes:write" in denied.stderr.rsplit("--scope", 1)[1]
    wider = nimblemcp(env, "login", world.url, "--scope", "notes:read notes:write")
    assert wider.returncode == 0, wider.stderr
    erased = nimblemcp(env, "call", "erase", world.url)
    assert erased.returncode == 0 and erased.stdout == "erased\n", erased.stderr
    listed = nimblemcp(env, "tools", world.url)
    assert {line.split()[0] for line in listed.stdout.splitlines()[2:]} == {"whoami", "erase"}


def test_a_second_login_reuses_the_loopback_port_and_registration(world: World, tmp_path: Path) -> None:
    env = world.env(tmp_path)
    assert nimblemcp(env, "login", world.url).returncode == 0
    before = json.loads(cache_file(tmp_path).read_text())
    assert nimblemcp(env, "login", world.url).returncode == 0
    after = json.loads(cache_file(tmp_path).read_text())
    assert after["redirect_uri"] == before["redirect_uri"]
    assert after["clients"] == before["clients"]


def test_tokens_given_on_the_command_line(world: World, tmp_path: Path) -> None:
    env = world.env(tmp_path)
    nothing = nimblemcp(env, "tools", world.url)
    assert nothing.returncode == 1
    assert nothing.stderr.strip() == (
        f"nimblemcp: {world.url} needs authorization (HTTP 401). Log in with `nimblemcp login "
        f"{world.url}`, or pass a token with --bearer TOKEN (or NIMBLEMCP_BEARER)")
    bad = nimblemcp(env, "tools", world.url, "--bearer", "not-a-token")
    assert bad.returncode == 1
    assert f"{world.url} refused the token from --bearer (HTTP 401 invalid_token" in bad.stderr
    assert "pass auth=" not in bad.stderr and "Log in with" not in bad.stderr
    assert f"log in with `nimblemcp login {world.url}`" in bad.stderr
    header = nimblemcp(env, "tools", world.url, "--header", "Authorization: Bearer not-a-token")
    assert header.returncode == 1 and "refused the token from the Authorization --header" in header.stderr

    # A good token, from a login kept elsewhere, passed by the environment.
    other = tmp_path / "elsewhere"
    assert nimblemcp(world.env(other), "login", world.url).returncode == 0
    token = str(cached(other)["access_token"])
    given = nimblemcp(world.env(tmp_path, NIMBLEMCP_BEARER=token), "call", "whoami", world.url)
    assert given.returncode == 0 and given.stdout == "alice\n", given.stderr
    forbidden = nimblemcp(env, "call", "erase", world.url, "--bearer", token)
    assert forbidden.returncode == 1
    assert "HTTP 403 insufficient_scope" in forbidden.stderr
    assert "needs a scope it lacks: notes:write" in forbidden.stderr
    assert f"nimblemcp login {world.url} --scope 'notes:write'" in forbidden.stderr
    assert not (tmp_path / "config").exists()  # a given token leaves nothing behind


def test_login_needs_a_url(tmp_path: Path) -> None:
    out = nimblemcp({**os.environ, "HOME": str(tmp_path)}, "login", "example.com/mcp")
    assert out.returncode == 2 and "is not an http(s):// URL" in out.stderr
    gone = nimblemcp({**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
                     "logout", "http://127.0.0.1:9/mcp")
    assert gone.returncode == 0 and "not logged in" in gone.stderr



def test_a_cached_token_the_server_refuses_is_refreshed(world: World, tmp_path: Path) -> None:
    """The cached token is tried first; when the server refuses it before it expires
    (revoked, or the server's keys changed), the login's refresh token gets a new one."""
    env = world.env(tmp_path)
    assert nimblemcp(env, "login", world.url).returncode == 0
    path = cache_file(tmp_path)
    data = json.loads(path.read_text())
    data["tokens"][0]["access_token"] = "revoked." + str(data["tokens"][0]["access_token"])
    path.write_text(json.dumps(data))
    refreshes = len(world.provider.grants("refresh_token"))
    who = nimblemcp(env, "call", "whoami", world.url)
    assert who.returncode == 0 and who.stdout == "alice\n", who.stderr
    assert len(world.provider.grants("refresh_token")) == refreshes + 1
    assert not str(cached(tmp_path)["access_token"]).startswith("revoked.")
