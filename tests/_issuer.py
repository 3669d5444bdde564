"""A real token issuer on 127.0.0.1 for the resource-server tests (issue 37).

`Issuer` is an ASGI app (serve it with `_serving.serving`): `/jwks`, the key set it
signs with (keys can be rotated or removed; a `Cache-Control` header can be set), and
`/introspect`, RFC 7662 introspection (HTTP Basic `rs:s3cret`). Its `mode` makes it
misbehave the ways a resource server must survive: `"drip"` sends one byte every
half second (an issuer that never finishes, yet never leaves a read waiting long
enough for a read timeout), `"huge"` pads the key set to 2 MB. `sign` makes
compact JWS tokens with any header (joserfc's `jws`, so `typ` and `kid` are exactly
what the test says), and `forged_header` swaps in a header a real issuer would never
sign (a `kid` that is a list).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from typing import Any

import httpx
import orjson
from joserfc import jwk, jws

ISSUER = "https://issuer.example"
CLIENT_AUTH = "Basic " + base64.b64encode(b"rs:s3cret").decode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    def __init__(self) -> None:
        self.keys = [jwk.generate_key("EC", "P-256", parameters={"kid": "k1"})]
        self.jwks_hits = 0
        self.introspect_hits = 0
        self.cache_control: str | None = None
        self.mode = "normal"  # "normal" | "drip" | "huge"
        self.drip_gap = 0.5  # seconds between two bytes of a drip
        self.active: dict[str, dict[str, Any]] = {}  # opaque token -> introspection answer

    def new_key(self, kid: str) -> Any:
        return jwk.generate_key("EC", "P-256", parameters={"kid": kid})

    def claims(self, audience: Any, **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": "alice", "scope": "mcp", "iat": now, "exp": now + 300, **extra}
        if audience is not None:
            claims["aud"] = audience
        return {k: v for k, v in claims.items() if v is not None}

    def sign(self, claims: dict[str, Any], key: Any = None, **header: Any) -> str:
        key = key or self.keys[0]
        head = {"alg": "ES256", "kid": key.kid, "typ": "at+jwt", **header}
        return jws.serialize_compact({k: v for k, v in head.items() if v is not None}, orjson.dumps(claims), key)

    @staticmethod
    def forged_header(token: str, **header: Any) -> str:
        """`token` with its header replaced (the signature no longer matches)."""
        _, body, signature = token.split(".")
        return f"{b64(orjson.dumps(header))}.{body}.{signature}"

    def key_set(self) -> bytes:
        document: dict[str, Any] = {"keys": [k.as_dict(private=False) for k in self.keys]}
        if self.mode == "huge":
            document["padding"] = "x" * (2 * 1024 * 1024)
        return orjson.dumps(document)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(b"content-type", b"application/json")]
        if scope["path"] == "/jwks":
            self.jwks_hits += 1
            answer = self.key_set()
            if self.cache_control is not None:
                headers.append((b"cache-control", self.cache_control.encode()))
        elif scope["path"] == "/introspect" and scope["method"] == "POST":
            self.introspect_hits += 1
            form = dict(httpx.QueryParams(body.decode()))
            if dict(scope["headers"]).get(b"authorization", b"").decode() != CLIENT_AUTH:
                answer = orjson.dumps({"error": "invalid_client"})
            else:
                answer = orjson.dumps(self.active.get(form.get("token", ""), {"active": False}))
        else:
            await send({"type": "http.response.start", "status": 404, "headers": headers})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        if self.mode == "drip":
            await self._drip(receive, send, headers, answer)
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    async def _drip(self, receive: Any, send: Any, headers: list[tuple[bytes, bytes]], answer: bytes) -> None:
        """One byte every `drip_gap`, until the client leaves or the test ends the mode."""
        gone = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for i in range(len(answer)):
                if gone.is_set() or self.mode != "drip":
                    break
                await send({"type": "http.response.body", "body": answer[i:i + 1], "more_body": True})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gone.wait(), self.drip_gap)
            await send({"type": "http.response.body", "body": b""})
        finally:
            watcher.cancel()
