"""Which era a request belongs to: a modern (2026-07-28) request names its protocol
version in `params._meta` (COMPAT-S05); one without is for a legacy session.

Its own small module so that a transport can tell the eras apart without loading the
legacy adapter (`_legacy`), which only a 2025-11-25 peer needs (start-up, issue 18).
Imports only `types._meta`.
"""

from __future__ import annotations

from typing import Any

from nimblemcp.types._meta import PROTOCOL_VERSION

__all__ = ["is_enveloped"]


def is_enveloped(message: dict[str, Any]) -> bool:
    """A modern request: its `_meta` names a protocol version (COMPAT-S05)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION in meta
