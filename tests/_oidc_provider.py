"""A real OAuth 2.1 authorization server for tests: the npm `oidc-provider` (panva).

- `install()` puts `oidc-provider` (pinned) into `.cache/npm-oidc-provider-<version>`
  once, under a file lock, with npm, the way `_peers` installs npm peers; when the
  machine's Node is older than 22 (the provider's supported runtimes) the same install
  adds a Node 22 binary from the npm package `node-linux-<arch>`, as scripts/conformance
  does.
- `oidc_provider(resources)` runs `fixtures/oidc_provider/provider.mjs` (its config
  script: DCR, authorization code + PKCE, refresh tokens, RFC 8707 resources with JWT
  access tokens of a chosen lifetime) on a free 127.0.0.1 port and yields an
  `OidcProvider`: its `issuer`, `jwks_uri`, and the `events` it printed (one per
  token issued: `grants("refresh_token")`).
- `browse(url)` is the user at a browser: it opens the authorization URL, signs in on
  the provider's development login page (any login and password), consents, and
  follows the redirect to wherever it leads (the client's loopback listener).
  `browser_command(folder)` writes an executable that does this for the URL it is
  given, for the `BROWSER` environment variable (`webbrowser`, `nimblemcp login`).

Reusable by any test that needs an authorization server (the CLI login, an OAuth proxy).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

if __name__ == "__main__":  # run as a script (`browse`, for BROWSER): `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._peers import CACHE, _locked
from tests._waits import wait_until

VERSION = "9.13.3"
NODE_MAJOR = 22
NODE_VERSION = "22.23.5"  # of the npm package node-linux-<arch> (as scripts/conformance)
FOLDER = CACHE / f"npm-oidc-provider-{VERSION}"
SCRIPT = Path(__file__).resolve().parent / "fixtures" / "oidc_provider" / "provider.mjs"


def _node_major(node: str | None) -> int:
    if node is None:
        return 0
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    found = re.match(r"v(\d+)", out.strip())
    return int(found.group(1)) if found else 0


def _node_package() -> str:
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    if sys.platform != "linux" or arch is None:
        raise RuntimeError(f"oidc-provider needs Node >= {NODE_MAJOR}; no npm Node binary for this machine")
    return f"node-linux-{arch}"


def install() -> tuple[str, Path]:
    """(the node binary, oidc-provider's entry module), installed once into `.cache`."""
    system_node = shutil.which("node")
    packages = {"oidc-provider": VERSION}
    node_pkg = _node_package() if _node_major(system_node) < NODE_MAJOR else ""
    if node_pkg:
        packages[node_pkg] = NODE_VERSION
    marker = FOLDER / ("installed-" + "-".join(f"{k}@{v}" for k, v in sorted(packages.items())))
    with _locked(FOLDER.name):
        if not marker.exists():
            FOLDER.mkdir(parents=True, exist_ok=True)
            (FOLDER / "package.json").write_text(json.dumps(
                {"private": True, "dependencies": packages}, indent=2) + "\n")
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError("npm is not on PATH; the OAuth tests need it for oidc-provider")
            subprocess.run([npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"],
                           cwd=FOLDER, check=True, timeout=600, capture_output=True)
            marker.write_text("ok\n")
    node = str(FOLDER / "node_modules" / node_pkg / "bin" / "node") if node_pkg else str(system_node)
    if _node_major(node) < NODE_MAJOR:
        raise RuntimeError(f"{node} is not Node >= {NODE_MAJOR}")
    return node, FOLDER / "node_modules" / "oidc-provider" / "lib" / "index.js"


@dataclass
class OidcProvider:
    issuer: str
    process: subprocess.Popen[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # its stderr

    @property
    def jwks_uri(self) -> str:
        return f"{self.issuer}/jwks"

    def grants(self, grant_type: str) -> list[dict[str, Any]]:
        """The tokens issued so far by this grant type ("authorization_code", ...)."""
        return [e for e in self.events if e.get("event") == "grant" and e.get("grant_type") == grant_type]


@contextmanager
def oidc_provider(resources: dict[str, dict[str, Any]], *, clients: list[dict[str, Any]] | None = None,
                  refresh_ttl: int = 3600, registration: bool = True) -> Iterator[OidcProvider]:
    """The provider on a free port. `resources`: {resource URL: {"scope": "a b", "ttl": s}}
    (access-token lifetime in seconds); `clients`: pre-registered client metadata;
    `registration=False`: no Dynamic Client Registration (as most company IdPs)."""
    node, entry = install()
    config = {"port": 0, "resources": resources, "clients": clients or [], "refresh_ttl": refresh_ttl,
              "registration": registration}
    proc = subprocess.Popen([node, str(SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OIDC_PROVIDER_ENTRY": str(entry), "OIDC_FIXTURE": json.dumps(config)})
    provider = OidcProvider("", proc)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout, proc.stderr

    def read_events() -> None:
        with out:
            for line in out:
                try:
                    provider.events.append(json.loads(line))
                except ValueError:
                    provider.log.append(line)

    def read_log() -> None:
        with err:
            provider.log.extend(err)

    readers = [threading.Thread(target=f, daemon=True) for f in (read_events, read_log)]
    for reader in readers:
        reader.start()
    try:
        wait_until(lambda: any(e.get("event") == "listening" for e in provider.events) or proc.poll() is not None,
                   "oidc-provider listening", why=lambda: "".join(provider.log))
        if proc.poll() is not None:
            raise RuntimeError("oidc-provider exited: " + "".join(provider.log))
        provider.issuer = next(e["issuer"] for e in provider.events if e.get("event") == "listening")
        yield provider
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        for reader in readers:
            reader.join(timeout=10)


_FORM = re.compile(r'<form[^>]*action="([^"]*)"[^>]*method="post"', re.IGNORECASE)
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', re.IGNORECASE)
_ALLOW = re.compile(r'<button[^>]*name="decision"[^>]*value="allow"', re.IGNORECASE)


def _fill(page: str, login: str, password: str) -> dict[str, str]:
    """What the user sends back from a sign-in or consent page."""
    fields = {unescape(k): unescape(v) for k, v in _HIDDEN.findall(page)}
    if fields.get("prompt") == "login":
        fields.update(login=login, password=password)
    if _ALLOW.search(page):  # an OAuth proxy's own consent page: the user allows
        fields["decision"] = "allow"
    return fields


def browse(url: str, login: str = "alice", password: str = "wonderland") -> str:
    """Open `url` as a user would: consent on an OAuth proxy's page when there is one,
    sign in and consent on the provider's pages, follow the redirects (to the client's
    loopback listener too); the URL it ended at."""
    import httpx  # here: `python tests/_peers.py` installs the provider without the venv

    with httpx.Client(follow_redirects=True, timeout=30) as http:
        response = http.get(url)
        for _ in range(10):
            form = _FORM.search(response.text)
            if form is None:
                break
            response = http.post(urljoin(str(response.url), unescape(form.group(1))),
                                 data=_fill(response.text, login, password))
        return str(response.url)


def browse_until(url: str, stop: str, login: str = "alice", password: str = "wonderland") -> str:
    """`browse`, but the redirect to a URL starting with `stop` (a client's redirect URI
    that nothing listens on) is not followed: it is returned, as a browser's address
    bar would show it."""
    import httpx

    with httpx.Client(follow_redirects=False, timeout=30) as http:
        response = http.get(url)
        for _ in range(30):
            if response.is_redirect:
                target = urljoin(str(response.url), response.headers["location"])
                if target.startswith(stop):
                    return target
                response = http.get(target)
                continue
            form = _FORM.search(response.text)
            if form is None:
                break
            response = http.post(urljoin(str(response.url), unescape(form.group(1))),
                                 data=_fill(response.text, login, password))
        raise AssertionError(f"never sent to {stop}: ended at {response.url} ({response.status_code})")


def browser_command(folder: Path, login: str = "alice") -> Path:
    """An executable for `BROWSER`: `browse`s the URL it is given as `login`."""
    path = folder / "browser"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} browse \"$1\" {login}\n")
    path.chmod(0o755)
    return path


if __name__ == "__main__":  # python tests/_oidc_provider.py browse URL [LOGIN]
    if sys.argv[1:2] == ["browse"]:
        landed = browse(sys.argv[2], *sys.argv[3:4])
        print(landed, file=sys.stderr)
    elif sys.argv[1:2] == ["install"]:
        print(install())
