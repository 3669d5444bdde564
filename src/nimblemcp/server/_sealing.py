"""Sealed `requestState`: authenticated encryption with a key ring (MRTR-12/13).

A sealed token is `base64url(key_id[4] | nonce[12] | AES-GCM(payload))`. The first
key of the ring seals; every key opens, so keys can rotate without breaking rounds
in flight. The payload binds method, target, an argument digest, the subject and
the audience, and carries an expiry and a nonce for the optional replay guard.
Every failure raises `StateError` whose reason is for the server log only; the
client sees one fixed message. `cryptography` is imported on first use.

Size limit: a token is at most `max_chars` characters (`StateOptions.max_state_size`,
64 KiB by default) both ways: `open` refuses a longer one, and `seal` raises
`StateTooLarge` rather than issue a token its own `open` would refuse (the payload
size is known before encrypting, so nothing is sealed in vain).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import time
from typing import Any

import orjson

from nimblemcp.errors import StateError as StateError  # re-exported: its old home
from nimblemcp.errors import StateTooLarge
from nimblemcp.server._options import ENV_STATE_KEYS as ENV_KEYS

logger = logging.getLogger("nimblemcp.server")

_VERSION = 1
MAX_STATE_CHARS = 65_536  # the default of StateOptions.max_state_size
_OVERHEAD = 4 + 12 + 16  # key id, nonce, GCM tag


def sealed_length(payload_bytes: int) -> int:
    """Characters of the unpadded base64url token for a payload of this many bytes."""
    n = payload_bytes + _OVERHEAD
    return (n * 4 + 2) // 3


def _decode_key(text: str) -> bytes:
    raw = text.strip()
    try:
        key = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ValueError("state keys must be 32 random bytes, base64url-encoded")
    return key


def new_key() -> str:
    """A fresh key in the format NIMBLEMCP_STATE_KEYS and `StateOptions(keys=...)` accept."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def digest(value: Any) -> str:
    """A short, stable digest of JSON-able arguments (key order does not matter)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()[:16]).decode().rstrip("=")


class Sealer:
    """Seals and opens request state for one server (audience)."""

    def __init__(
        self, audience: str, keys: list[str] | None = None, ttl_s: float = 600.0,
        max_chars: int = MAX_STATE_CHARS,
    ) -> None:
        texts = list(keys or ())  # NIMBLEMCP_STATE_KEYS arrives here via ServerSettings
        if texts:
            self.keys = [_decode_key(k) for k in texts]
        else:
            self.keys = [os.urandom(32)]
            logger.warning(
                "no requestState key configured (%s or StateOptions(keys=)): using a per-process key; "
                "fine for one process, wrong for several instances behind a load balancer",
                ENV_KEYS,
            )
        self.audience = audience
        self.ttl_s = ttl_s
        self.max_chars = max_chars
        self._ids = [hashlib.sha256(k).digest()[:4] for k in self.keys]
        self._aeads: list[Any] | None = None

    def _ciphers(self) -> list[Any]:
        if self._aeads is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aeads = [AESGCM(k) for k in self.keys]
        return self._aeads

    def seal(self, binding: dict[str, Any], state: dict[str, Any]) -> str:
        payload = {
            "v": _VERSION,
            "aud": self.audience,
            "exp": int(time.time() + self.ttl_s),
            "n": base64.urlsafe_b64encode(os.urandom(12)).decode().rstrip("="),
            "b": binding,
            "s": state,
        }
        plain = orjson.dumps(payload)
        size = sealed_length(len(plain))
        if size > self.max_chars:
            raise StateTooLarge(
                f"The handler's state would seal into a {size}-character requestState, over the "
                f"limit of {self.max_chars} (StateOptions.max_state_size): keep ctx.state small "
                f"and put bulky data behind a state handle (ctx.handles)"
            )
        nonce = os.urandom(12)
        box = self._ciphers()[0].encrypt(nonce, plain, self._ids[0])
        return base64.urlsafe_b64encode(self._ids[0] + nonce + box).decode().rstrip("=")

    def open(self, token: Any, binding: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Verify and decrypt; returns (state, nonce). Raises StateError."""
        if not isinstance(token, str) or not token or len(token) > self.max_chars:
            raise StateError("requestState is not a non-empty string of sane size")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise StateError("requestState is not base64url") from None
        if len(raw) < 4 + 12 + 16:
            raise StateError("requestState is too short")
        key_id, nonce, box = raw[:4], raw[4:16], raw[16:]
        try:
            index = self._ids.index(key_id)
        except ValueError:
            raise StateError("requestState was sealed with an unknown key") from None
        from cryptography.exceptions import InvalidTag

        try:
            data = self._ciphers()[index].decrypt(nonce, box, key_id)
        except InvalidTag:
            raise StateError("requestState failed authentication (tampered)") from None
        payload = orjson.loads(data)
        if payload.get("v") != _VERSION or payload.get("aud") != self.audience:
            raise StateError("requestState belongs to another server (audience)")
        if payload.get("exp", 0) < time.time():
            raise StateError("requestState expired")
        if payload.get("b") != binding:
            raise StateError(f"requestState is bound to another request: {payload.get('b')} != {binding}")
        return payload.get("s") or {}, payload["n"]
