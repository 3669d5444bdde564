"""The CLI's OAuth token cache: one file per MCP server, readable by its owner only.

`nimblemcp login URL` fills it; the client commands (`tools URL`, `call ...`) read it
and keep it current (a refreshed access token and a rotated refresh token are written
back); `nimblemcp logout URL` deletes it. It is a `TokenStore`
(`nimblemcp.client.auth`): tokens keyed by authorization server and resource, client
registrations by authorization server, plus the loopback redirect URI the login used
(its registration names it).

Where: `$XDG_CONFIG_HOME/nimblemcp/tokens/` (else `~/.config/...`) on Linux,
`~/Library/Application Support/nimblemcp/tokens/` on macOS, `%APPDATA%\\nimblemcp\\tokens\\`
on Windows; the folder is created with mode 0700 and each file written atomically with
mode 0600 (`has_tokens` reads it without the HTTP extra). The file holds bearer and refresh tokens in the clear, like the credential
files of other command-line tools: the file mode is the protection. DPoP keys are not
kept (the CLI asks for Bearer tokens).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from nimblemcp.client.auth import ClientRegistration, TokenSet

__all__ = ["TokenCache", "normalize", "tokens_folder"]


def normalize(url: str) -> str:
    """The server URL a cache is kept for: without query, fragment or a trailing slash."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/") or "/"
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}"


def tokens_folder() -> Path:
    """The per-user folder holding the token files (see the module docstring)."""
    home = Path.home()
    if sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME")
        base = Path(xdg) if xdg and os.path.isabs(xdg) else home / ".config"
    return base / "nimblemcp" / "tokens"


class TokenCache:
    """The tokens and registrations for one MCP server URL, in one file."""

    def __init__(self, server: str, folder: Path | None = None) -> None:
        self.server = normalize(server)
        parts = urlsplit(self.server)
        label = "".join(c if c.isalnum() or c in "-." else "_" for c in parts.netloc)
        digest = hashlib.sha256(self.server.encode()).hexdigest()[:16]
        self.path = (folder or tokens_folder()) / f"{label}-{digest}.json"

    def exists(self) -> bool:
        return self.path.is_file()

    def has_tokens(self) -> bool:
        """Whether a login left tokens here (what the client commands then use)."""
        return bool(self._read().get("tokens"))

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"server": self.server, "tokens": [], "clients": []}
        return data if isinstance(data, dict) else {"server": self.server, "tokens": [], "clients": []}

    def _write(self, data: dict[str, Any]) -> None:
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=2)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def delete(self) -> bool:
        """Forget everything about this server; whether there was anything."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    # -- the login's redirect URI ----------------------------------------------------------

    @property
    def redirect_uri(self) -> str | None:
        value = self._read().get("redirect_uri")
        return value if isinstance(value, str) else None

    def set_redirect_uri(self, uri: str) -> None:
        data = self._read()
        data["redirect_uri"] = uri
        self._write(data)

    def forget_clients(self) -> None:
        """Drop the client registrations (their redirect URI is not usable any more)."""
        data = self._read()
        data["clients"] = []
        self._write(data)

    # -- TokenStore ------------------------------------------------------------------------

    async def get_tokens(self, issuer: str, resource: str) -> TokenSet | None:
        from nimblemcp.client.auth import TokenSet

        for entry in self._read().get("tokens", []):
            if entry.get("issuer") == issuer and entry.get("resource") == resource:
                return TokenSet(
                    access_token=entry["access_token"], token_type=entry.get("token_type", "Bearer"),
                    refresh_token=entry.get("refresh_token"), expires_at=entry.get("expires_at"),
                    scope=entry.get("scope"), requested_scopes=tuple(entry.get("requested_scopes", ())))
        return None

    async def set_tokens(self, issuer: str, resource: str, tokens: TokenSet | None) -> None:
        data = self._read()
        kept = [e for e in data.get("tokens", [])
                if (e.get("issuer"), e.get("resource")) != (issuer, resource)]
        if tokens is not None:
            kept.append({
                "issuer": issuer, "resource": resource, "access_token": tokens.access_token,
                "token_type": tokens.token_type, "refresh_token": tokens.refresh_token,
                "expires_at": tokens.expires_at, "scope": tokens.scope,
                "requested_scopes": list(tokens.requested_scopes),
            })
        data["server"], data["tokens"] = self.server, kept
        self._write(data)

    async def get_client(self, issuer: str) -> ClientRegistration | None:
        from nimblemcp.client.auth import ClientRegistration

        for entry in self._read().get("clients", []):
            if entry.get("issuer") == issuer:
                return ClientRegistration(
                    entry["client_id"], entry.get("client_secret"), entry.get("auth_method", "none"),
                    entry.get("source", "dcr"), tuple(entry.get("redirect_uris", ())))
        return None

    async def set_client(self, issuer: str, client: ClientRegistration | None) -> None:
        data = self._read()
        kept = [e for e in data.get("clients", []) if e.get("issuer") != issuer]
        if client is not None:
            if client.signing_key is not None:
                raise ValueError("the CLI's token cache keeps no signing keys")
            kept.append({
                "issuer": issuer, "client_id": client.client_id, "client_secret": client.client_secret,
                "auth_method": client.auth_method, "source": client.source,
                "redirect_uris": list(client.redirect_uris),
            })
        data["server"], data["clients"] = self.server, kept
        self._write(data)
